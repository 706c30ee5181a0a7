"""The data source's options: every value arrives as a string; parsed and checked once.

Parsing happens when Spark plans the query (``reader()`` / ``writer()``), so a
typo fails the query before any task runs, with an error naming the option.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Literal
from urllib.parse import urlsplit

from osqueue.errors import InvalidInput
from osqueue.wire.tls import parse_fingerprints

from .rows import TABLES

Table = Literal["jobs", "dead", "archive"]
OnDuplicateKey = Literal["skip", "error"]

READ_OPTIONS = frozenset({"url", "path", "table", "queue", "objects_per_partition"})
WRITE_OPTIONS = frozenset(
    {
        "url",
        "path",
        "queue",
        "priority",
        "delay_s",
        "max_attempts",
        "batch_size",
        "embedded",
        "address",
        "token",
        "tls_ca",
        "tls_fingerprint",
        "allow_plaintext_token",
        "broker_wait_s",
        "on_duplicate_key",
    }
)
MAX_BATCH = 10_000


def _int(options: Mapping[str, str], name: str, default: int, lo: int, hi: int) -> int:
    raw = options.get(name)
    if raw is None:
        return default
    try:
        value = int(str(raw).strip())
    except ValueError:
        raise InvalidInput(f"{raw!r} is not an integer", field=name) from None
    if not lo <= value <= hi:
        raise InvalidInput(f"{value} is outside {lo}..{hi}", field=name)
    return value


def _float(options: Mapping[str, str], name: str, default: float, lo: float = 0.0) -> float:
    raw = options.get(name)
    if raw is None:
        return default
    try:
        value = float(str(raw).strip())
    except ValueError:
        raise InvalidInput(f"{raw!r} is not a number", field=name) from None
    if not math.isfinite(value) or value < lo:
        raise InvalidInput(f"{value} must be a finite number >= {lo}", field=name)
    return value


def _bool(options: Mapping[str, str], name: str) -> bool:
    raw = str(options.get(name, "false")).strip().lower()
    if raw in ("true", "1", "yes"):
        return True
    if raw in ("false", "0", "no", ""):
        return False
    raise InvalidInput(f"{raw!r} is not true or false", field=name)


def _fingerprint(options: Mapping[str, str]) -> str | None:
    raw = options.get("tls_fingerprint") or None
    if raw is not None:
        parse_fingerprints(raw)  # a typo fails the query at planning, naming the option
    return raw


def _url(options: Mapping[str, str], *, served: bool = False) -> str:
    url = options.get("url") or options.get("path")
    if not url:
        raise InvalidInput(
            "is required: .option('url', 'file:///path/to/queue') (or .load(url))", field="url"
        )
    scheme = urlsplit(url).scheme
    if not scheme:
        raise InvalidInput(f"{url!r} has no scheme (file://, s3://, gs://, az://)", field="url")
    if scheme == "memory" and not served:
        raise InvalidInput(
            f"{url!r}: a memory:// queue lives inside one process, and Spark runs data "
            "sources in its own Python workers; serve the queue (osqueue.server) and pass "
            "option address=host:port to write, or use a file:// or cloud URL",
            field="url",
        )
    return url


def _check_known(options: Mapping[str, str], known: frozenset[str], what: str) -> None:
    for name in options:
        if name.lower() not in known:
            listed = ", ".join(sorted(known))
            raise InvalidInput(f"unknown {what} option (known: {listed})", field=name)


def _queue(options: Mapping[str, str]) -> str | None:
    from osqueue.state.validate import queue_name

    raw = options.get("queue")
    return None if raw is None else queue_name(raw)


@dataclass(frozen=True, slots=True)
class ReadOptions:
    url: str
    table: Table
    #: Only jobs of this queue (jobs and dead tables, and the archive).
    queue: str | None
    #: Archive objects read by one Spark task.
    objects_per_partition: int

    @classmethod
    def parse(cls, options: Mapping[str, str]) -> ReadOptions:
        _check_known(options, READ_OPTIONS, "read")
        table = str(options.get("table", "jobs")).strip().lower()
        if table not in TABLES:
            raise InvalidInput(f"{table!r} is not one of {', '.join(TABLES)}", field="table")
        return cls(
            url=_url(options),
            table=table,  # type: ignore[arg-type]
            queue=_queue(options),
            objects_per_partition=_int(options, "objects_per_partition", 64, 1, 100_000),
        )


@dataclass(frozen=True, slots=True)
class WriteOptions:
    url: str
    queue: str
    priority: int
    delay_s: float
    max_attempts: int
    batch_size: int
    #: Push through an in-process broker (started when the write commits).
    embedded: bool
    #: host:port of a broker; skips discovery through the queue document.
    address: str | None
    token: str | None
    #: The broker's TLS identity (see RemoteConfig): a CA file on every executor,
    #: and/or the SHA-256 fingerprint(s) of its certificate.
    tls_ca: str | None
    tls_fingerprint: str | None
    #: Send the token to a non-loopback broker without TLS (warns).
    allow_plaintext_token: bool
    #: How long to wait for a broker to be found (or, embedded, to become free).
    broker_wait_s: float
    on_duplicate_key: OnDuplicateKey

    @classmethod
    def parse(cls, options: Mapping[str, str]) -> WriteOptions:
        _check_known(options, WRITE_OPTIONS, "write")
        on_dup = str(options.get("on_duplicate_key", "skip")).strip().lower()
        if on_dup not in ("skip", "error"):
            raise InvalidInput(f"{on_dup!r} is not skip or error", field="on_duplicate_key")
        address = options.get("address") or None
        if address is not None and ":" not in address:
            raise InvalidInput(f"{address!r} is not host:port", field="address")
        embedded = _bool(options, "embedded")
        if embedded and address is not None:
            raise InvalidInput("embedded=true and an address exclude each other", field="embedded")
        return cls(
            url=_url(options, served=address is not None),
            queue=_queue(options) or "default",
            priority=_int(options, "priority", 0, -(2**31), 2**31 - 1),
            delay_s=_float(options, "delay_s", 0.0),
            max_attempts=_int(options, "max_attempts", 5, 1, 1000),
            batch_size=_int(options, "batch_size", 1000, 1, MAX_BATCH),
            embedded=embedded,
            address=address,
            token=options.get("token") or None,
            tls_ca=options.get("tls_ca") or None,
            tls_fingerprint=_fingerprint(options),
            allow_plaintext_token=_bool(options, "allow_plaintext_token"),
            broker_wait_s=_float(options, "broker_wait_s", 30.0),
            on_duplicate_key=on_dup,  # type: ignore[arg-type]
        )
