"""Prometheus exposition: records turned into metric families, served at ``/metrics``.

Needs prometheus_client (``pip install 'osqueue[metrics]'``); without it,
importing this module raises :class:`~osqueue.errors.MissingExtra`.

:class:`MetricsEndpoint` is a small HTTP/1.1 server on the process's own event
loop, not prometheus_client's ``start_http_server`` (a thread per request).
A scrape then reads the broker's or the worker's state between two steps of
the loop: the commit loop changes the held document in place, and a thread
reading it at the same moment would see half a commit (or a dict changing
size under it).  It also stops with the process's loop, leaving no thread.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import math
import re
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any

from osqueue.address import join_host_port, split_host_port
from osqueue.errors import InvalidInput, MissingExtra
from osqueue.metrics import MAX_CONNECTIONS
from osqueue.metrics.histogram import Histogram

try:
    from prometheus_client import (
        GC_COLLECTOR,
        PLATFORM_COLLECTOR,
        PROCESS_COLLECTOR,
        CollectorRegistry,
    )
    from prometheus_client.exposition import choose_encoder
    from prometheus_client.registry import Collector
except ImportError as exc:  # pragma: no cover - the test environment has the extra
    raise MissingExtra("metrics", "prometheus_client") from exc

__all__ = [
    "Collector",
    "MetricsEndpoint",
    "buckets_of",
    "label_of",
    "registry_of",
]

log = logging.getLogger(__name__)

#: A request's head (request line and headers) larger than this is refused.
_MAX_HEAD_BYTES = 16 * 1024
#: A client that sends no complete request head within this long is dropped.
_READ_TIMEOUT_S = 10.0
_CAMEL = re.compile(r"(?<=[a-z0-9])(?=[A-Z])")


def buckets_of(histogram: Histogram) -> list[tuple[str, float]]:
    """A :class:`Histogram`'s buckets as ``HistogramMetricFamily`` takes them."""
    return [("+Inf" if le == math.inf else repr(le), float(n)) for le, n in histogram.cumulative()]


def label_of(cls: type) -> str:
    """A class as a label value: ``LeaseLost`` -> ``lease_lost``."""
    return _CAMEL.sub("_", cls.__name__).lower()


def registry_of(*collectors: Collector, process: bool = True) -> CollectorRegistry:
    """A registry of ``collectors``; ``process``: with the process's own metrics too
    (``process_*``: CPU, memory, open files; ``python_*``: version, garbage collector)."""
    registry = CollectorRegistry()
    extra = (PROCESS_COLLECTOR, PLATFORM_COLLECTOR, GC_COLLECTOR) if process else ()
    for collector in (*extra, *collectors):
        registry.register(collector)
    return registry


@dataclass(frozen=True, slots=True)
class _Response:
    status: str
    content_type: str
    body: bytes
    head_only: bool = False

    def encode(self) -> bytes:
        head = (
            f"HTTP/1.1 {self.status}\r\n"
            f"Content-Type: {self.content_type}\r\n"
            f"Content-Length: {len(self.body)}\r\n"
            "Connection: close\r\n\r\n"
        ).encode("latin-1")
        return head if self.head_only else head + self.body


def _plain(status: str, text: str) -> _Response:
    return _Response(status, "text/plain; charset=utf-8", text.encode())


class MetricsEndpoint:
    """Serves ``registry`` at ``GET /metrics`` on ``listen`` (``host:port``; port 0
    picks a free port, :attr:`address` tells which).

    No token: the metrics are counts, sizes, times and queue names, never a
    payload or a job's token.  One request per connection (``Connection:
    close``, which every Prometheus scraper handles), whose head must arrive
    within ten seconds; at most ``max_connections`` at once (the next ones are
    answered 503 and closed).  :meth:`close` stops listening and ends the
    requests in flight, so nothing outlives it.
    """

    def __init__(
        self, registry: CollectorRegistry, listen: str, *, max_connections: int = MAX_CONNECTIONS
    ) -> None:
        self._registry = registry
        self._host, self._port = split_host_port(listen, "metrics_listen")
        self._max_connections = max_connections
        #: refusing connections since the last one admitted (logged once)
        self._full = False
        self._server: asyncio.Server | None = None
        #: the connections being answered (closed by :meth:`close`)
        self._requests: dict[asyncio.Task[Any], asyncio.StreamWriter] = {}
        #: ``host:port`` it listens on, from :meth:`start` until :meth:`close`
        self.address: str | None = None

    async def start(self) -> None:
        """Listen (the port is bound when this returns)."""
        if self._server is not None:
            return
        try:
            server = await asyncio.start_server(
                self._serve, self._host, self._port, limit=_MAX_HEAD_BYTES
            )
        except OSError as exc:  # in use, or not an address of this machine
            where = join_host_port(self._host, self._port)
            raise InvalidInput(f"cannot listen on {where}: {exc}", field="metrics_listen") from exc
        self._server = server
        port = server.sockets[0].getsockname()[1]
        self.address = join_host_port(self._host, port)
        log.info(
            "metrics endpoint listening on %s",
            self.address,
            extra={"action": "metrics", "address": self.address},
        )

    async def close(self) -> None:
        """Stop listening and end the requests in flight; return once all are gone."""
        server, self._server = self._server, None
        if server is None:
            return
        self.address = None
        server.close()
        requests = list(self._requests.items())
        for _, writer in requests:
            writer.close()  # its read or write fails, and the request ends
        await asyncio.gather(*(task for task, _ in requests), return_exceptions=True)
        await server.wait_closed()

    async def __aenter__(self) -> MetricsEndpoint:
        await self.start()
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.close()

    # ------------------------------------------------------------------ requests

    async def _serve(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        if len(self._requests) >= self._max_connections:
            # No read, no wait: the connection's file is given back at once.
            if not self._full:
                log.warning(
                    "metrics endpoint at its %s connections: refusing more",
                    self._max_connections,
                    extra={"action": "metrics_full", "max_connections": self._max_connections},
                )
            self._full = True
            writer.write(_plain("503 Service Unavailable", "too many connections\n").encode())
            writer.close()
            return
        self._full = False
        task = asyncio.current_task()
        assert task is not None
        self._requests[task] = writer
        try:
            head = await asyncio.wait_for(reader.readuntil(b"\r\n\r\n"), _READ_TIMEOUT_S)
            writer.write(self._respond(head).encode())
            await writer.drain()
        except (asyncio.IncompleteReadError, TimeoutError, ConnectionError):
            pass  # the client went away or never asked
        except asyncio.LimitOverrunError:
            writer.write(_plain("431 Request Header Fields Too Large", "head too large\n").encode())
            with contextlib.suppress(ConnectionError):
                await writer.drain()
        finally:
            self._requests.pop(task, None)
            writer.close()
            with contextlib.suppress(ConnectionError):
                await writer.wait_closed()

    def _respond(self, head: bytes) -> _Response:
        lines = head.decode("latin-1").split("\r\n")
        parts = lines[0].split(" ")
        if len(parts) != 3 or not parts[2].startswith("HTTP/"):
            return _plain("400 Bad Request", "not an HTTP request\n")
        method, target, _ = parts
        if target.split("?", 1)[0] != "/metrics":
            return _plain("404 Not Found", "the metrics are at /metrics\n")
        if method not in ("GET", "HEAD"):
            return _plain("405 Method Not Allowed", "GET /metrics\n")
        accept = _header(lines[1:], "accept")
        encoder, content_type = choose_encoder(accept)
        try:
            body = encoder(self._registry)
        except Exception:  # a collector's bug: answer 500, keep serving
            log.exception("collecting metrics failed", extra={"action": "metrics"})
            return _plain("500 Internal Server Error", "collecting metrics failed\n")
        return _Response("200 OK", content_type, body, head_only=method == "HEAD")


def _header(lines: Iterable[str], name: str) -> str:
    for line in lines:
        key, sep, value = line.partition(":")
        if sep and key.strip().lower() == name:
            return value.strip()
    return ""
