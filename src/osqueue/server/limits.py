"""Bounds on what one request, one connection and the whole server may ask for.

Two halves, both enforced before anything reaches the broker:

* :class:`Limits` and :class:`RequestChecker` bound every request's shape:
  batch sizes, payload bytes, string lengths, times.  A violation is
  :class:`~osqueue.errors.InvalidInput` naming the field (``jobs[3].payload``).
  The rules of the document itself (which characters an id may hold, which
  priorities exist) are checked where a message becomes its op
  (:mod:`osqueue.state.make`, the same functions the clients call), so a bad
  item never reaches the broker.
* :class:`Admission` bounds the calls and request bytes in flight per
  connection and in total.  Past a bound the call is refused at once with
  ``RESOURCE_EXHAUSTED``, so a client that floods the broker is pushed back
  while everyone else is still served.

The connections themselves are bounded by gRPC core (the server's options,
see :func:`osqueue.server.server.server_options`): how many at once, how long
one may take to finish its handshake, sit without a call, or live.
"""

from __future__ import annotations

import math
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass

from osqueue.errors import InvalidInput, ResourceExhausted
from osqueue.state import ClaimOp, make, validate
from osqueue.state.cold_dead import DeadFilter
from osqueue.storage.keys import check_key
from osqueue.wire._pb import queue_pb2 as pb
from osqueue.wire.convert import from_pb

MIB = 1024 * 1024


@dataclass(frozen=True, slots=True)
class Limits:
    """What the gRPC server accepts.  Units are in the names."""

    max_payload_bytes: int = 4 * MIB
    #: Items per batch request (push, heartbeat, complete, fail, release, cancel)
    #: and jobs per claim.
    max_batch: int = 1000
    #: gRPC message size, both directions (set on the server's options).
    max_message_bytes: int = 16 * MIB
    max_id_chars: int = validate.MAX_ID_CHARS
    max_queue_chars: int = validate.MAX_QUEUE_CHARS
    max_worker_chars: int = validate.MAX_WORKER_CHARS
    max_key_chars: int = validate.MAX_KEY_CHARS
    #: Longer error texts are refused; the broker keeps the first
    #: ``validate.MAX_ERROR_CHARS`` of those it takes.
    max_error_chars: int = 16_384
    max_queues_per_claim: int = validate.MAX_CLAIM_QUEUES
    max_wait_s: float = 300.0
    max_delay_s: float = validate.MAX_DELAY_S
    max_attempts: int = validate.MAX_ATTEMPTS
    #: Calls in flight on one connection (long polls included).  One client
    #: process multiplexes all its tasks over one connection, so this is high;
    #: the byte limits below are what bound memory.
    max_in_flight_per_connection: int = 4096
    #: Calls in flight on the whole server.
    max_in_flight: int = 16_384
    #: Request bytes held by calls in flight on one connection, and in total.
    max_in_flight_bytes_per_connection: int = 64 * MIB
    max_in_flight_bytes: int = 512 * MIB
    #: HTTP/2 streams one connection may open at once (set on the server's options).
    max_concurrent_streams: int = 512
    #: Connections held at once; more are closed as they arrive.  Never more than
    #: the open-files limit leaves beside ``ServerConfig.fd_reserve``.
    max_connections: int = 10_000
    #: A new connection that has not finished its handshake (TLS, the HTTP/2
    #: preface) within this long is closed.
    handshake_timeout_s: float = 10.0
    #: A connection without a call for this long is asked to go (GOAWAY; a
    #: client reconnects on its next call); None: never.
    max_connection_idle_s: float | None = 300.0
    #: A connection is asked to go after this long (None: never); its calls in
    #: flight get ``max_wait_s`` and half a minute more to finish.
    max_connection_age_s: float | None = None

    def __post_init__(self) -> None:
        for name in (
            "max_payload_bytes",
            "max_batch",
            "max_message_bytes",
            "max_id_chars",
            "max_queue_chars",
            "max_worker_chars",
            "max_key_chars",
            "max_error_chars",
            "max_queues_per_claim",
            "max_attempts",
            "max_in_flight_per_connection",
            "max_in_flight",
            "max_in_flight_bytes_per_connection",
            "max_in_flight_bytes",
            "max_concurrent_streams",
            "max_connections",
        ):
            if getattr(self, name) < 1:
                raise InvalidInput("must be >= 1", field=name)
        for name in ("max_wait_s", "max_delay_s"):
            value = getattr(self, name)
            if not math.isfinite(value) or value < 0:
                raise InvalidInput("must be a finite number of seconds >= 0", field=name)
        for name in ("handshake_timeout_s", "max_connection_idle_s", "max_connection_age_s"):
            value = getattr(self, name)
            if value is not None and not (math.isfinite(value) and value > 0):
                raise InvalidInput("must be a finite number of seconds > 0", field=name)
        if self.max_payload_bytes >= self.max_message_bytes:
            raise InvalidInput(
                "must be below max_message_bytes (a payload travels inside one message)",
                field="max_payload_bytes",
            )


class RequestChecker:
    """Checks requests against :class:`Limits`; each check raises ``InvalidInput``."""

    def __init__(self, limits: Limits) -> None:
        self.limits = limits

    # ---------------------------------------------------------------- pieces

    def batch(self, n: int, field: str) -> None:
        if n < 1:
            raise InvalidInput("is empty; send at least one item", field=field)
        if n > self.limits.max_batch:
            raise InvalidInput(
                f"has {n} items; at most {self.limits.max_batch} per request", field=field
            )

    @staticmethod
    def text(value: str, field: str, max_chars: int, *, allow_empty: bool = False) -> str:
        if not value and not allow_empty:
            raise InvalidInput("must not be empty", field=field)
        if len(value) > max_chars:
            raise InvalidInput(f"has {len(value)} characters; at most {max_chars}", field=field)
        return value

    @staticmethod
    def seconds(value: float, field: str, maximum: float) -> float:
        if not math.isfinite(value) or value < 0 or value > maximum:
            raise InvalidInput(f"{value!r} is not between 0 and {maximum:g} seconds", field=field)
        return value

    def job_id(self, value: str, field: str) -> str:
        self.text(value, field, self.limits.max_id_chars)
        return validate.job_id(value, field)

    def queue(self, value: str, field: str) -> str:
        self.text(value, field, self.limits.max_queue_chars)
        return validate.queue_name(value, field)

    def token(self, value: int, field: str) -> int:
        return validate.token(value, field)

    def dead(self, request: pb.DeadRequest) -> tuple[DeadFilter, int | None, frozenset[str]]:
        """Which dead jobs a RetryDead/PurgeDead request takes (its ids, else every
        dead job when ``all`` or a filter is set; none: no job), its page of dead
        segments (None: all), and the segments earlier pages passed."""
        if request.all and request.ids:
            raise InvalidInput("give ids or all, not both", field="ids")
        sent = from_pb(request, DeadFilter)  # the filters the wire carries (by the table)
        if sent.queue is not None:
            self.queue(sent.queue, "queue")
        if sent.error is not None:
            self.text(sent.error, "error", self.limits.max_error_chars, allow_empty=True)
        ids: tuple[str, ...] | None
        if request.ids:
            self.batch(len(request.ids), "ids")
            ids = tuple(self.job_id(job_id, f"ids[{i}]") for i, job_id in enumerate(request.ids))
        else:  # no ids: all (that the filters admit), or none at all
            ids = None if request.all or not sent.plain else ()
        f = make.dead_filter(
            ids, queue=sent.queue, error=sent.error, since=sent.since, until=sent.until
        )
        pages = request.max_segments if request.HasField("max_segments") else None
        passed = frozenset(check_key(k, f"passed[{i}]") for i, k in enumerate(request.passed))
        return f, make.max_segments(pages), passed

    # ---------------------------------------------------------------- items

    def schedule(self, request: pb.ScheduleRequest) -> pb.Schedule:
        """A Schedule request's bounds (the broker checks the rest, naming the field)."""
        if not request.HasField("schedule"):
            raise InvalidInput("is missing", field="schedule")
        spec = request.schedule
        lim = self.limits
        self.text(spec.name, "schedule.name", lim.max_id_chars)
        self.text(spec.queue, "schedule.queue", lim.max_queue_chars)
        if len(spec.payload) > lim.max_payload_bytes:
            raise InvalidInput(
                f"is {len(spec.payload)} bytes; at most {lim.max_payload_bytes}",
                field="schedule.payload",
            )
        for name in ("cron", "tz"):
            if spec.HasField(name):
                self.text(getattr(spec, name), f"schedule.{name}", 256)
        return spec

    def fail_item(self, item: pb.FailItem, field: str) -> float | None:
        """Check one failed job; return its ``retry_after_s`` (None: the broker's backoff)."""
        if not item.HasField("job"):
            raise InvalidInput("is missing", field=f"{field}.job")
        self.text(item.error, f"{field}.error", self.limits.max_error_chars, allow_empty=True)
        if not item.HasField("retry_after_s"):
            return None
        return self.seconds(item.retry_after_s, f"{field}.retry_after_s", self.limits.max_delay_s)

    # ---------------------------------------------------------------- whole requests

    def claim(self, request: pb.ClaimRequest) -> ClaimOp:
        """A claim's bounds (the worker and queue names are the state layer's to check)."""
        lim = self.limits
        self.text(request.worker, "worker", lim.max_worker_chars)
        if len(request.queues) > lim.max_queues_per_claim:
            raise InvalidInput(
                f"has {len(request.queues)} queues; at most {lim.max_queues_per_claim}",
                field="queues",
            )
        if not 1 <= request.max_jobs <= lim.max_batch:
            raise InvalidInput(
                f"{request.max_jobs} is outside [1, {lim.max_batch}]", field="max_jobs"
            )
        self.seconds(request.wait_s, "wait_s", lim.max_wait_s)
        return make.claim(request.worker, tuple(request.queues), request.max_jobs)


class Admission:
    """Counts calls and request bytes in flight, per connection and in total.

    Decisions are synchronous (one event loop), so there is no lock and no
    await between the check and the count.
    """

    def __init__(self, limits: Limits) -> None:
        self.limits = limits
        self._calls: dict[str, int] = {}
        self._bytes: dict[str, int] = {}
        self.calls = 0
        self.bytes = 0

    def in_flight(self, peer: str) -> int:
        return self._calls.get(peer, 0)

    @contextmanager
    def admit(self, peer: str, size: int) -> Iterator[None]:
        """Hold a slot for one call from ``peer`` carrying ``size`` request bytes."""
        self._check(peer, size)
        self._calls[peer] = self._calls.get(peer, 0) + 1
        self._bytes[peer] = self._bytes.get(peer, 0) + size
        self.calls += 1
        self.bytes += size
        try:
            yield
        finally:
            self.calls -= 1
            self.bytes -= size
            left = self._calls[peer] - 1
            if left:
                self._calls[peer] = left
                self._bytes[peer] -= size
            else:
                del self._calls[peer]
                del self._bytes[peer]

    def _check(self, peer: str, size: int) -> None:
        lim = self.limits
        if self._calls.get(peer, 0) >= lim.max_in_flight_per_connection:
            raise ResourceExhausted(
                f"this connection has {lim.max_in_flight_per_connection} calls in flight "
                "(the limit); back off and retry"
            )
        if self._bytes.get(peer, 0) + size > lim.max_in_flight_bytes_per_connection:
            raise ResourceExhausted(
                f"this connection's calls in flight hold more than "
                f"{lim.max_in_flight_bytes_per_connection} request bytes (the limit); "
                "back off and retry"
            )
        if self.calls >= lim.max_in_flight or self.bytes + size > lim.max_in_flight_bytes:
            raise ResourceExhausted("the broker is at its limit of calls in flight; back off")
