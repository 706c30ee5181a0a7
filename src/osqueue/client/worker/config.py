"""How a worker runs (:class:`WorkerConfig`) and what it has done (:class:`WorkerCounters`).

:class:`WorkerConfig` is what :class:`~osqueue.client.worker.Worker` takes
whole; :class:`WorkerOptions` are the same fields as keyword arguments
(``Worker(client, handler, concurrency=8)``), laid over a config by
:func:`worker_config`.
"""

from __future__ import annotations

import dataclasses
import os
import secrets
import socket
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import Any, TypedDict

from osqueue.errors import InvalidInput

DEFAULT_HEARTBEAT_TIMEOUT_S = 30.0


@dataclass(frozen=True, slots=True)
class WorkerConfig:
    """How a :class:`Worker` runs.  ``concurrency`` counts jobs whose handlers run
    at once (a batch of 10 takes 10 slots), so ``batch_size`` must not exceed it.
    Jobs whose completion is on its way hold no slot."""

    queues: tuple[str, ...] | None = None
    concurrency: int = 1
    batch_size: int = 1
    worker_id: str | None = None
    heartbeat_interval_s: float | None = None
    wait_s: float = 5.0
    shutdown_grace_period_s: float = 30.0
    burst: bool = False

    def __post_init__(self) -> None:
        _positive_int(self.concurrency, "concurrency")
        _positive_int(self.batch_size, "batch_size")
        if self.batch_size > self.concurrency:
            raise InvalidInput(
                f"{self.batch_size} exceeds concurrency ({self.concurrency}); "
                "concurrency counts jobs whose handlers run at once",
                field="batch_size",
            )
        if self.heartbeat_interval_s is not None:
            _seconds(self.heartbeat_interval_s, "heartbeat_interval_s", positive=True)
        _seconds(self.wait_s, "wait_s")
        _seconds(self.shutdown_grace_period_s, "shutdown_grace_period_s")
        if self.queues is not None:
            if isinstance(self.queues, str) or not self.queues:
                raise InvalidInput("must be a non-empty sequence of queue names", field="queues")
            for name in self.queues:
                if not isinstance(name, str) or not name:
                    raise InvalidInput(f"{name!r} is not a queue name", field="queues")
        if self.worker_id is not None and (
            not isinstance(self.worker_id, str) or not self.worker_id
        ):
            raise InvalidInput("must be a non-empty string", field="worker_id")


class WorkerOptions(TypedDict, total=False):
    """The fields of :class:`WorkerConfig` as keyword arguments (``queues`` any sequence)."""

    queues: Sequence[str] | None
    concurrency: int
    batch_size: int
    worker_id: str | None
    heartbeat_interval_s: float | None
    wait_s: float
    shutdown_grace_period_s: float
    burst: bool


def worker_config(config: WorkerConfig | None, options: WorkerOptions) -> WorkerConfig:
    """``config`` (default ``WorkerConfig()``) with ``options`` in place of its fields,
    validated as a whole."""
    base = config if config is not None else WorkerConfig()
    if not options:
        return base
    # Typed at the call site (WorkerOptions), checked by WorkerConfig itself.
    fields: dict[str, Any] = dict(options)
    queues = fields.get("queues")
    if isinstance(queues, Iterable) and not isinstance(queues, str):
        fields["queues"] = tuple(queues)
    return dataclasses.replace(base, **fields)


def _positive_int(value: object, field: str) -> None:
    if isinstance(value, bool) or not isinstance(value, int) or value < 1:
        raise InvalidInput(f"{value!r} is not an integer >= 1", field=field)


def _seconds(value: object, field: str, *, positive: bool = False) -> None:
    ok = isinstance(value, int | float) and not isinstance(value, bool) and value >= 0
    if not ok or (positive and value == 0) or value != value or value == float("inf"):
        bound = "> 0" if positive else ">= 0"
        raise InvalidInput(f"{value!r} is not a finite number of seconds {bound}", field=field)


def broker_heartbeat_timeout_s(client: object) -> float:
    """The broker's heartbeat timeout as ``client`` knows it, else the broker default.

    Clients expose it as ``heartbeat_timeout_s``; an in-process client that does
    not is asked through its broker's config.
    """
    for value in (
        getattr(client, "heartbeat_timeout_s", None),
        getattr(
            getattr(getattr(client, "broker", None), "config", None), "heartbeat_timeout_s", None
        ),
    ):
        if isinstance(value, int | float) and not isinstance(value, bool) and value > 0:
            return float(value)
    return DEFAULT_HEARTBEAT_TIMEOUT_S


def default_worker_id() -> str:
    return f"{socket.gethostname()}-{os.getpid()}-{secrets.token_hex(3)}"


@dataclass(slots=True)
class WorkerCounters:
    """Running totals, for progress display."""

    claimed: int = 0
    processed: int = 0
    failed: int = 0
    retried: int = 0
    lost: int = 0
    released: int = 0

    def as_dict(self) -> dict[str, int]:
        return {name: getattr(self, name) for name in WorkerCounters.__slots__}
