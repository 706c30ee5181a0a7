"""The remote client: ``osqueue.connect(url)``, the same interface as ``broker.client()``.

The client is given the queue's storage URL, never a broker address: it reads
the queue document (reads only) to find the broker the document names,
connects, and on ``UNAVAILABLE``, timeouts, lost connections and ``NotBroker``
it re-reads the document (or follows the address a stepping-down broker
gives) and tries again, with bounded backoff, until the call's overall
deadline.  Pushes are safe to retry: job ids are chosen here, before the first
send, so the broker applies a retried push once.

Calls of one kind made concurrently (pushes from many tasks, completions from
many handlers) coalesce into one batch RPC; see :mod:`osqueue.client.batcher`.

``connect(url, embedded=True)`` starts a broker in this process instead when
no live broker holds the queue's lease, and returns its in-process client.
``connect_sync`` is the blocking twin for scripts and Spark executors.
"""

from __future__ import annotations

import asyncio
import functools
import logging
import random
import time
from collections.abc import AsyncIterator, Awaitable, Callable, Generator, Sequence
from dataclasses import dataclass, field, replace
from enum import Enum
from pathlib import Path
from types import TracebackType
from typing import Any, TypeVar, Unpack, cast

import grpc

from osqueue.api import Job, NewJob, PushOptions, Stats
from osqueue.client.batcher import Batcher
from osqueue.client.discovery import BrokerLocation, Discovery
from osqueue.client.embedded import EmbeddedClient, start_embedded
from osqueue.client.loop_thread import LoopThread
from osqueue.errors import (
    BrokerUnavailable,
    InvalidInput,
    JobNotFound,
    LeaseLost,
    MaybeCommitted,
    OsqueueError,
    ResourceExhausted,
    ShuttingDown,
    StorageError,
    Unauthenticated,
)
from osqueue.ids import new_id
from osqueue.state import validate
from osqueue.storage.port import Storage
from osqueue.wire._pb import queue_pb2 as pb
from osqueue.wire._pb import queue_pb2_grpc as pb_grpc
from osqueue.wire.auth import bearer_metadata, check_token
from osqueue.wire.convert import job_from_pb, job_ref, new_job_to_pb, stats_from_pb
from osqueue.wire.status import (
    RETRY_ELSEWHERE,
    RETRY_LATER,
    broker_address_from,
    from_status,
    from_trailers,
)

log = logging.getLogger(__name__)

MIB = 1024 * 1024
R = TypeVar("R")
I = TypeVar("I")  # noqa: E741 (an item of a batch)


@dataclass(frozen=True, slots=True)
class RemoteConfig:
    """How a remote client reaches and talks to the broker.  Units are in the names."""

    #: Bearer token sent with every call.
    token: str | None = None
    #: PEM file of the CA that signed the broker's certificate (turns TLS on).
    tls_ca: str | None = None
    #: TLS with the system's trusted roots (implied by ``tls_ca``).
    tls: bool = False
    #: Host name to check the broker's certificate against, if not its address.
    tls_server_name: str | None = None
    #: Try this ``host:port`` first instead of reading the document.
    address: str | None = None
    #: How long one call keeps trying, failovers included, before it raises
    #: ``BrokerUnavailable`` (a claim's own wait is added on top).
    timeout_s: float = 30.0
    #: How long one attempt may take.
    rpc_timeout_s: float = 10.0
    #: While a call is open, ping the broker this often; no answer within as
    #: long fails the call over (a paused broker is left within 2x this).
    keepalive_s: float = 3.0
    backoff_base_s: float = 0.05
    backoff_cap_s: float = 1.0
    #: Client-side batching: items and bytes per RPC, RPCs of one kind in flight.
    max_batch: int = 500
    max_batch_bytes: int = 4 * MIB
    max_in_flight_batches: int = 4
    #: Refused here, before sending (the broker's default limit).
    max_payload_bytes: int = 4 * MIB
    max_message_bytes: int = 16 * MIB
    #: Longer error texts are cut before ``fail`` sends them.
    max_error_chars: int = validate.MAX_ERROR_CHARS
    #: A claim asks for at most this many jobs (the broker's default batch limit).
    max_claim_jobs: int = 1000

    def __post_init__(self) -> None:
        for name in (
            "timeout_s",
            "rpc_timeout_s",
            "keepalive_s",
            "backoff_base_s",
            "backoff_cap_s",
        ):
            value = getattr(self, name)
            if not isinstance(value, int | float) or not value > 0:
                raise InvalidInput(f"must be a number of seconds > 0, got {value!r}", field=name)
        for name in (
            "max_batch",
            "max_batch_bytes",
            "max_in_flight_batches",
            "max_payload_bytes",
            "max_message_bytes",
            "max_error_chars",
            "max_claim_jobs",
        ):
            if getattr(self, name) < 1:
                raise InvalidInput("must be >= 1", field=name)
        if self.token is not None:
            check_token(self.token)


# ---------------------------------------------------------------------- failures


class _Action(Enum):
    FOLLOW = "follow"  # go to the address the broker named
    REDISCOVER = "rediscover"  # read the document again
    BACKOFF = "backoff"  # same broker, later
    RAISE = "raise"  # the caller's problem


@dataclass(frozen=True, slots=True)
class _Failure:
    action: _Action
    error: OsqueueError
    #: The attempt may have been applied (its answer was lost).
    unknown: bool = False
    address: str | None = None


_TRANSPORT_CODES = frozenset(
    {
        grpc.StatusCode.UNAVAILABLE,
        grpc.StatusCode.DEADLINE_EXCEEDED,
        grpc.StatusCode.CANCELLED,
        grpc.StatusCode.ABORTED,
    }
)


def _from_status(status: pb.Status) -> _Failure:
    error = from_status(status)
    if status.reason in RETRY_ELSEWHERE:
        hint = status.broker_address or None
        action = _Action.FOLLOW if hint else _Action.REDISCOVER
        return _Failure(action, error, status.maybe_committed, hint)
    if status.reason in RETRY_LATER:
        return _Failure(_Action.BACKOFF, error)
    if status.reason == pb.REASON_STORAGE_ERROR:
        return _Failure(_Action.BACKOFF, error, unknown=True)
    return _Failure(_Action.RAISE, error)


def _classify(exc: grpc.aio.AioRpcError, address: str) -> _Failure:
    """What to do about a failed call."""
    trailers = exc.trailing_metadata()
    status = from_trailers(trailers)
    if status is not None and status.reason != pb.REASON_UNSPECIFIED:
        failure = _from_status(status)
        hint = failure.address or broker_address_from(trailers)
        return replace(failure, address=hint) if hint else failure
    code = exc.code()
    details = exc.details() or ""
    name = code.name.lower() if code is not None else "unknown"
    if code in _TRANSPORT_CODES:
        error = BrokerUnavailable(f"broker at {address}: {name}: {details}")
        return _Failure(_Action.REDISCOVER, error, unknown=True)
    if code == grpc.StatusCode.UNAUTHENTICATED:
        return _Failure(_Action.RAISE, Unauthenticated(details or None))
    if code == grpc.StatusCode.RESOURCE_EXHAUSTED:  # gRPC's own: a message too large
        return _Failure(_Action.RAISE, ResourceExhausted(f"broker at {address}: {details}"))
    if code == grpc.StatusCode.INVALID_ARGUMENT:
        return _Failure(_Action.RAISE, InvalidInput(details or None))
    if code == grpc.StatusCode.UNIMPLEMENTED:
        message = f"the server at {address} does not serve osqueue.v1 ({details})"
        return _Failure(_Action.RAISE, OsqueueError(message))
    return _Failure(_Action.RAISE, OsqueueError(f"broker at {address}: {name}: {details}"))


#: An item's final outcome: its Status (OK or an error the caller sees), or the
#: error that stopped the whole batch; and whether an earlier attempt may have
#: applied it.
ItemOutcome = tuple[pb.Status | OsqueueError, bool]

_OK = pb.CODE_OK


class _BatchRun:
    """The items of one batch still to send, and the outcomes of the others."""

    def __init__(self, n: int) -> None:
        self.todo = list(range(n))
        self.outcomes: list[pb.Status | OsqueueError | None] = [None] * n
        self.unknown = [False] * n

    def mark_unknown(self, sent: list[int]) -> None:
        for i in sent:
            self.unknown[i] = True

    def finish(self, indices: list[int], error: OsqueueError) -> None:
        for i in indices:
            self.outcomes[i] = error
        self.todo = []

    def take(self, sent: list[int], statuses: Sequence[pb.Status]) -> pb.Status | None:
        """Record the answers; keep the items to retry; return a retry's Status if any."""
        if len(statuses) != len(sent):
            self.finish(sent, OsqueueError(f"the broker answered {len(statuses)} of {len(sent)}"))
            return None
        self.todo, again = [], None
        for i, status in zip(sent, statuses, strict=True):
            if status.reason in RETRY_ELSEWHERE or status.reason in RETRY_LATER:
                self.todo.append(i)
                self.unknown[i] = self.unknown[i] or status.maybe_committed
                again = again or status
            else:
                self.outcomes[i] = status
        return again

    def results(self) -> list[ItemOutcome]:
        return [
            (outcome if outcome is not None else BrokerUnavailable(), maybe)
            for outcome, maybe in zip(self.outcomes, self.unknown, strict=True)
        ]


# ---------------------------------------------------------------------- connection


@dataclass(slots=True)
class _Conn:
    address: str
    channel: Any  # grpc.aio.Channel
    stub: pb_grpc.QueueAsyncStub
    opened_at: float = field(default_factory=time.monotonic)


def _channel_options(config: RemoteConfig) -> list[tuple[str, int | str]]:
    options: list[tuple[str, int | str]] = [
        ("grpc.max_receive_message_length", config.max_message_bytes),
        ("grpc.max_send_message_length", config.max_message_bytes),
        # Reconnect quickly: a restarted or new broker is back within a second.
        ("grpc.initial_reconnect_backoff_ms", 100),
        ("grpc.min_reconnect_backoff_ms", 100),
        ("grpc.max_reconnect_backoff_ms", 1000),
        # While a call is open, ping the broker: a paused or partitioned broker
        # (no answer within the timeout) fails the call, which then fails over,
        # instead of a long poll waiting out its whole wait.
        ("grpc.keepalive_time_ms", round(config.keepalive_s * 1000)),
        ("grpc.keepalive_timeout_ms", round(config.keepalive_s * 1000)),
        # gRPC core waits this long for a ping's answer (keepalive_timeout_ms
        # alone does not end the transport in current releases).
        ("grpc.http2.ping_timeout_ms", round(config.keepalive_s * 1000)),
        ("grpc.keepalive_permit_without_calls", 0),
        ("grpc.http2.max_pings_without_data", 0),
    ]
    if config.tls_server_name:
        options.append(("grpc.ssl_target_name_override", config.tls_server_name))
    return options


def _read_ca(path: str) -> bytes:
    try:
        return Path(path).read_bytes()
    except OSError as exc:
        raise InvalidInput(f"cannot read {path!r}: {exc}", field="tls_ca") from exc


# ---------------------------------------------------------------------- the client


class RemoteClient:
    """A :class:`~osqueue.api.QueueClient` over gRPC that finds and follows the broker."""

    def __init__(
        self, storage: Storage, config: RemoteConfig | None = None, *, owns_storage: bool = False
    ) -> None:
        self.config = config or RemoteConfig()
        self.storage = storage
        self.discovery = Discovery(storage)
        self._owns_storage = owns_storage
        self._metadata = bearer_metadata(self.config.token) if self.config.token else None
        self._credentials: Any = None
        if self.config.tls_ca is not None or self.config.tls:
            ca = _read_ca(self.config.tls_ca) if self.config.tls_ca is not None else None
            self._credentials = grpc.ssl_channel_credentials(root_certificates=ca)
        self._conn: _Conn | None = None
        self._next_address: str | None = self.config.address
        self._conn_lock = asyncio.Lock()
        self._closing_channels: set[asyncio.Task[None]] = set()
        self._accepting = True
        self._closed = False
        #: Connections opened (the first one included), for tests and monitoring.
        self.connects = 0
        cfg = self.config
        common: dict[str, Any] = {
            "max_items": cfg.max_batch,
            "max_bytes": cfg.max_batch_bytes,
            "max_in_flight": cfg.max_in_flight_batches,
        }
        self.pushes: Batcher[pb.NewJob, str] = Batcher(
            self._send_push, name="push", size_of=_new_job_size, **common
        )
        self.heartbeats: Batcher[pb.JobRef, None] = Batcher(
            self._holder_sender(lambda s: s.Heartbeat, "heartbeat", maybe_applies=False),
            name="heartbeat",
            **common,
        )
        self.completions: Batcher[pb.JobRef, None] = Batcher(
            self._holder_sender(lambda s: s.Complete, "complete"), name="complete", **common
        )
        self.releases: Batcher[pb.JobRef, None] = Batcher(
            self._holder_sender(lambda s: s.Release, "release"), name="release", **common
        )
        self.failures: Batcher[pb.FailItem, None] = Batcher(
            self._send_fail, name="fail", size_of=lambda item: len(item.error), **common
        )
        self.cancels: Batcher[str, None] = Batcher(self._send_cancel, name="cancel", **common)
        self._batchers: tuple[Batcher[Any, Any], ...] = (
            self.pushes,
            self.heartbeats,
            self.completions,
            self.releases,
            self.failures,
            self.cancels,
        )

    @property
    def address(self) -> str | None:
        """The broker address in use (None before the first connection)."""
        return self._conn.address if self._conn is not None else None

    # ------------------------------------------------------------------ lifecycle

    async def __aenter__(self) -> RemoteClient:
        return self

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        await self.close()

    async def close(self) -> None:
        """Send what is already queued, then close the connection (idempotent)."""
        if self._closed:
            return
        self._accepting = False
        try:
            for batcher in self._batchers:
                await batcher.close()
        finally:
            self._closed = True
            if self._conn is not None:
                self._retire(self._conn, grace_s=None)
                self._conn = None
            if self._closing_channels:
                await asyncio.gather(*self._closing_channels, return_exceptions=True)
            if self._owns_storage:
                await self.storage.close()

    def _check_open(self) -> None:
        if not self._accepting:
            raise ShuttingDown("the client is closed")

    @property
    def heartbeat_timeout_s(self) -> float | None:
        """The broker's heartbeat timeout, as the queue document last said (workers pace by it)."""
        last = self.discovery.last
        return last.heartbeat_timeout_s if last is not None else None

    async def locate(self) -> BrokerLocation | None:
        """Where the document says the broker is (reads the document once)."""
        return await self.discovery.locate()

    async def connect_now(self) -> None:
        """Open the connection now if the document names a broker (never waits).

        A storage error reading the document is not fatal here: the first call
        looks again, with backoff, until its deadline (a passing network fault
        must not kill a producer that is just starting).
        """
        async with self._conn_lock:
            if self._conn is None:
                try:
                    address = await self._find_address()
                except StorageError as exc:
                    log.warning(
                        "could not read the queue document yet; will retry: %s",
                        exc,
                        extra={"action": "discover"},
                    )
                    return
                if address is not None:
                    self._open(address)

    # ------------------------------------------------------------------ connection

    def _open(self, address: str) -> _Conn:
        options = _channel_options(self.config)
        if self._credentials is not None:
            channel = grpc.aio.secure_channel(address, self._credentials, options=options)
        else:
            channel = grpc.aio.insecure_channel(address, options=options)
        stub = cast("pb_grpc.QueueAsyncStub", pb_grpc.QueueStub(channel))
        self._conn = _Conn(address, channel, stub)
        self.connects += 1
        log.info("connected to broker", extra={"action": "connect", "address": address})
        return self._conn

    def _retire(self, conn: _Conn, grace_s: float | None) -> None:
        """Close ``conn``'s channel in the background, letting its calls finish for ``grace_s``."""
        task = asyncio.get_running_loop().create_task(conn.channel.close(grace_s))
        self._closing_channels.add(task)
        task.add_done_callback(self._closing_channels.discard)

    def _drop(self, conn: _Conn, next_address: str | None = None) -> None:
        """Stop using ``conn`` (unless someone already moved on from it)."""
        if self._conn is not conn:
            return
        self._conn = None
        self._next_address = next_address
        self._retire(conn, grace_s=self.config.rpc_timeout_s)

    async def _find_address(self) -> str | None:
        if self._next_address is not None:
            address, self._next_address = self._next_address, None
            return address
        location = await self.discovery.locate()
        if location is None:
            return None
        return location.address

    async def _connection(self, deadline: float) -> _Conn:
        conn = self._conn
        if conn is not None:
            return conn
        async with self._conn_lock:
            tries = 0
            while self._conn is None:
                why: OsqueueError
                try:
                    address = await self._find_address()
                except StorageError as exc:
                    address, why = None, exc
                else:
                    why = BrokerUnavailable(
                        "the queue document names no broker address (no broker running, "
                        "a broker stopping, or an embedded broker in another process)"
                    )
                if address is not None:
                    return self._open(address)
                await self._backoff(tries, deadline, why)
                tries += 1
            return self._conn

    async def _backoff(self, tries: int, deadline: float, why: OsqueueError) -> None:
        """Sleep before try ``tries + 1``; raise ``BrokerUnavailable`` past the deadline."""
        now = time.monotonic()
        if now >= deadline:
            raise BrokerUnavailable(
                f"no broker for {self.storage.url} answered within "
                f"{self.config.timeout_s:g}s; last error: {why}"
            ) from why
        cfg = self.config
        delay = min(cfg.backoff_cap_s, cfg.backoff_base_s * 2**tries) * random.uniform(0.5, 1.0)
        await asyncio.sleep(min(delay, deadline - now))

    def _deadline(self, extra_s: float = 0.0) -> float:
        return time.monotonic() + self.config.timeout_s + extra_s

    def _attempt_timeout(self, deadline: float, extra_s: float = 0.0) -> float:
        return max(0.001, min(self.config.rpc_timeout_s + extra_s, deadline - time.monotonic()))

    async def _recover(self, conn: _Conn, failure: _Failure, tries: int, deadline: float) -> None:
        if failure.action is _Action.FOLLOW and failure.address not in (None, conn.address):
            log.info(
                "following the broker to its new address",
                extra={"action": "follow", "old": conn.address, "new": failure.address},
            )
            self._drop(conn, next_address=failure.address)
            if time.monotonic() < deadline:
                return  # a fresh address: no need to wait
        elif failure.action in (_Action.FOLLOW, _Action.REDISCOVER):
            self._drop(conn)
        await self._backoff(tries, deadline, failure.error)

    async def _call(
        self,
        attempt: Callable[[_Conn, float], Awaitable[R]],
        *,
        deadline: float,
        on_unknown: Callable[[], None] | None = None,
    ) -> tuple[R, _Conn]:
        """Run ``attempt(conn, deadline)`` until it succeeds, failing over as needed."""
        tries = 0
        while True:
            self._check_open_or_flushing()
            conn = await self._connection(deadline)
            try:
                return await attempt(conn, deadline), conn
            except grpc.aio.AioRpcError as exc:
                failure = _classify(exc, conn.address)
                if failure.action is _Action.RAISE:
                    raise failure.error from exc
            if failure.unknown and on_unknown is not None:
                on_unknown()
            await self._recover(conn, failure, tries, deadline)
            tries += 1

    def _check_open_or_flushing(self) -> None:
        if self._closed:
            raise ShuttingDown("the client is closed")

    async def _batch_rpc(
        self,
        items: list[I],
        send: Callable[[_Conn, list[I], float], Awaitable[Sequence[pb.Status]]],
    ) -> list[ItemOutcome]:
        """Send ``items``; retry the ones the broker did not take (elsewhere or later)."""
        deadline = self._deadline()
        run = _BatchRun(len(items))
        tries = 0
        while run.todo:
            sent = run.todo

            async def attempt(
                conn: _Conn, deadline: float, sent: list[int] = sent
            ) -> Sequence[pb.Status]:
                return await send(conn, [items[i] for i in sent], self._attempt_timeout(deadline))

            try:
                statuses, conn = await self._call(
                    attempt, deadline=deadline, on_unknown=functools.partial(run.mark_unknown, sent)
                )
            except OsqueueError as exc:
                run.finish(sent, exc)
                break
            again = run.take(sent, statuses)
            if again is None:
                continue
            try:
                await self._recover(conn, _from_status(again), tries, deadline)
            except BrokerUnavailable as exc:
                run.finish(run.todo, exc)
                break
            tries += 1
        return run.results()

    # ------------------------------------------------------------------ push

    def _new_job_pb(self, job: NewJob) -> pb.NewJob:
        """The push message for ``job``: its id chosen now (before the first send), its
        fields checked by the document's rules (:func:`osqueue.state.validate.new_job`)
        so a bad push fails here, without a round trip."""
        payload: object = job.payload
        if isinstance(payload, bytearray | memoryview):
            payload = bytes(payload)
        if not isinstance(payload, bytes):
            raise InvalidInput(f"must be bytes, not {type(payload).__name__}", field="payload")
        if len(payload) > self.config.max_payload_bytes:
            raise InvalidInput(
                f"is {len(payload)} bytes; at most {self.config.max_payload_bytes}",
                field="payload",
            )
        job_id = validate.job_id(job.id, "id") if job.id is not None else new_id()
        delay_s = validate.new_job(job.queue, job.priority, job.delay_s, job.key, job.max_attempts)
        return new_job_to_pb(job, job_id, payload, delay_s)

    async def push(self, payload: bytes, **options: Unpack[PushOptions]) -> str:
        self._check_open()
        return await self.pushes.submit(self._new_job_pb(NewJob(payload, **options)))

    async def push_results(self, jobs: Sequence[NewJob]) -> list[str | OsqueueError]:
        """Push a batch; one result per job: its id, or the error that job got."""
        self._check_open()
        messages: list[pb.NewJob | OsqueueError] = []
        for job in jobs:
            try:
                messages.append(self._new_job_pb(job))
            except OsqueueError as exc:
                messages.append(exc)
        good = [m for m in messages if isinstance(m, pb.NewJob)]
        sent = iter(await self.pushes.submit_many(good))
        results: list[str | OsqueueError] = []
        for message in messages:
            if isinstance(message, OsqueueError):
                results.append(message)
                continue
            outcome = next(sent)
            if isinstance(outcome, OsqueueError):
                results.append(outcome)
            elif isinstance(outcome, BaseException):
                raise outcome
            else:
                results.append(outcome)
        return results

    async def push_many(self, jobs: Sequence[NewJob]) -> list[str]:
        """Push a batch; raises the first job's error (the other jobs are pushed)."""
        results = await self.push_results(jobs)
        for result in results:
            if isinstance(result, OsqueueError):
                raise result
        return cast("list[str]", results)

    async def _send_push(self, items: list[pb.NewJob]) -> list[str | BaseException]:
        async def send(conn: _Conn, batch: list[pb.NewJob], timeout: float) -> list[pb.Status]:
            response = await conn.stub.Push(
                pb.PushRequest(jobs=batch), timeout=timeout, metadata=self._metadata
            )
            return [result.status for result in response.results]

        out: list[str | BaseException] = []
        for item, (outcome, _) in zip(items, await self._batch_rpc(items, send), strict=True):
            if isinstance(outcome, OsqueueError):
                out.append(outcome)
            elif outcome.code == _OK:
                out.append(item.id)
            else:
                out.append(from_status(outcome))
        return out

    # ------------------------------------------------------------------ claim

    def _claim_request(
        self, worker: str, queues: Sequence[str] | str, max_jobs: int, wait_s: float
    ) -> tuple[pb.ClaimRequest, float]:
        if isinstance(queues, str):
            queues = (queues,)
        validate.worker_name(worker, "worker")
        if not queues:
            raise InvalidInput("name at least one queue", field="queues")
        for i, queue in enumerate(queues):
            validate.queue_name(queue, f"queues[{i}]")
        validate.count(max_jobs, "max_jobs", maximum=validate.MAX_CLAIM)
        wait = validate.seconds(wait_s, "wait_s") or 0.0
        request = pb.ClaimRequest(
            worker=worker, queues=list(queues), max_jobs=min(max_jobs, self.config.max_claim_jobs)
        )
        return request, wait

    async def claim(
        self,
        worker: str,
        queues: Sequence[str] = ("default",),
        *,
        max_jobs: int = 1,
        wait_s: float = 0.0,
    ) -> list[Job]:
        self._check_open()
        request, wait = self._claim_request(worker, queues, max_jobs, wait_s)
        start = time.monotonic()

        async def attempt(conn: _Conn, deadline: float) -> list[Job]:
            request.wait_s = max(0.0, wait - (time.monotonic() - start))
            response = await conn.stub.Claim(
                request,
                timeout=self._attempt_timeout(deadline, request.wait_s),
                metadata=self._metadata,
            )
            return [job_from_pb(job) for job in response.jobs]

        jobs, _ = await self._call(attempt, deadline=self._deadline(wait))
        return jobs

    async def complete_and_claim(
        self,
        jobs: Sequence[Job],
        worker: str,
        queues: Sequence[str] = ("default",),
        *,
        max_jobs: int = 1,
    ) -> tuple[list[OsqueueError | None], list[Job]]:
        """Complete ``jobs`` and claim up to ``max_jobs`` in one Claim call (one commit).

        A broker that predates this answers no completion results; the
        completions then go out with Complete.  Retried like a claim; a
        completion whose first answer was lost and that the broker then no
        longer knows is :class:`~osqueue.errors.MaybeCommitted`.  Completions
        beyond one request (``max_batch``) go out with Complete beside the
        call; the claim takes at most ``max_claim_jobs``, as :meth:`claim` does."""
        self._check_open()
        limit = self.config.max_batch
        if len(jobs) > limit:  # the rest go out with Complete, beside this call
            (errors, claimed), more = await asyncio.gather(
                self.complete_and_claim(jobs[:limit], worker, queues, max_jobs=max_jobs),
                self.complete_many(jobs[limit:]),
            )
            return errors + more, claimed
        request, _ = self._claim_request(worker, queues, max_jobs, 0.0)
        request.complete.extend(_ref(job) for job in jobs)
        maybe = False

        def lost_answer() -> None:
            nonlocal maybe
            maybe = True

        async def attempt(conn: _Conn, deadline: float) -> pb.ClaimResponse:
            response: pb.ClaimResponse = await conn.stub.Claim(
                request, timeout=self._attempt_timeout(deadline), metadata=self._metadata
            )
            return response

        response, _ = await self._call(attempt, deadline=self._deadline(), on_unknown=lost_answer)
        claimed = [job_from_pb(job) for job in response.jobs]
        if len(response.completed) != len(jobs):  # an older broker ignored `complete`
            return await self.complete_many(jobs), claimed
        outcomes = [
            _holder_result("complete", job.id, status, maybe)
            for job, status in zip(jobs, response.completed, strict=True)
        ]
        return _errors_of(outcomes), claimed

    async def claim_stream(
        self,
        worker: str,
        queues: Sequence[str] = ("default",),
        *,
        max_jobs: int = 1,
        wait_s: float = 0.0,
    ) -> AsyncIterator[list[Job]]:
        """Long poll: yield jobs as they become claimable until ``max_jobs`` or ``wait_s``.

        Fails over like every call until the first jobs arrive; a stream cut
        after that simply ends (the next call finds the broker again).
        """
        self._check_open()
        request, wait = self._claim_request(worker, queues, max_jobs, wait_s)
        start = time.monotonic()
        deadline = self._deadline(wait)
        tries = 0
        while True:
            self._check_open_or_flushing()
            conn = await self._connection(deadline)
            request.wait_s = max(0.0, wait - (time.monotonic() - start))
            call = conn.stub.ClaimStream(
                request,
                timeout=self._attempt_timeout(deadline, request.wait_s),
                metadata=self._metadata,
            )
            received = False
            try:
                async for response in call:
                    received = True
                    yield [job_from_pb(job) for job in response.jobs]
                return
            except grpc.aio.AioRpcError as exc:
                failure = _classify(exc, conn.address)
                if failure.action is _Action.RAISE:
                    raise failure.error from exc
                if received:
                    if failure.action is not _Action.BACKOFF:
                        self._drop(conn)
                    return
            finally:
                call.cancel()
            await self._recover(conn, failure, tries, deadline)
            tries += 1

    # ------------------------------------------------------------------ the holder's calls

    def _holder_sender(
        self,
        rpc: Callable[[pb_grpc.QueueAsyncStub], Any],
        what: str,
        *,
        maybe_applies: bool = True,
    ) -> Callable[[list[pb.JobRef]], Awaitable[list[BaseException | None]]]:
        async def send(conn: _Conn, batch: list[pb.JobRef], timeout: float) -> list[pb.Status]:
            response = await rpc(conn.stub)(
                pb.JobRefsRequest(jobs=batch), timeout=timeout, metadata=self._metadata
            )
            return list(response.results)

        async def run(items: list[pb.JobRef]) -> list[BaseException | None]:
            outcomes = await self._batch_rpc(items, send)
            return [
                _holder_result(what, ref.id, outcome, maybe and maybe_applies)
                for ref, (outcome, maybe) in zip(items, outcomes, strict=True)
            ]

        return run

    async def heartbeat(self, job: Job) -> None:
        self._check_open()
        await self.heartbeats.submit(_ref(job))

    async def complete(self, job: Job) -> None:
        self._check_open()
        await self.completions.submit(_ref(job))

    async def release(self, job: Job) -> None:
        self._check_open()
        await self.releases.submit(_ref(job))

    async def heartbeat_many(self, jobs: Sequence[Job]) -> list[OsqueueError | None]:
        self._check_open()
        return _errors_of(await self.heartbeats.submit_many([_ref(job) for job in jobs]))

    async def complete_many(self, jobs: Sequence[Job]) -> list[OsqueueError | None]:
        self._check_open()
        return _errors_of(await self.completions.submit_many([_ref(job) for job in jobs]))

    async def fail(self, job: Job, *, error: str = "", retry_after_s: float | None = None) -> None:
        self._check_open()
        if not isinstance(error, str):
            raise InvalidInput(f"must be text, not {type(error).__name__}", field="error")
        item = pb.FailItem(job=_ref(job), error=error[: self.config.max_error_chars])
        retry = validate.seconds(retry_after_s, "retry_after_s")
        if retry is not None:
            item.retry_after_s = retry
        await self.failures.submit(item)

    async def _send_fail(self, items: list[pb.FailItem]) -> list[BaseException | None]:
        async def send(conn: _Conn, batch: list[pb.FailItem], timeout: float) -> list[pb.Status]:
            response = await conn.stub.Fail(
                pb.FailRequest(items=batch), timeout=timeout, metadata=self._metadata
            )
            return list(response.results)

        outcomes = await self._batch_rpc(items, send)
        return [
            _holder_result("fail", item.job.id, outcome, maybe)
            for item, (outcome, maybe) in zip(items, outcomes, strict=True)
        ]

    # ------------------------------------------------------------------ administration

    async def cancel(self, job_id: str) -> None:
        self._check_open()
        await self.cancels.submit(validate.job_id(job_id, "job_id"))

    async def _send_cancel(self, items: list[str]) -> list[BaseException | None]:
        async def send(conn: _Conn, batch: list[str], timeout: float) -> list[pb.Status]:
            response = await conn.stub.Cancel(
                pb.CancelRequest(ids=batch), timeout=timeout, metadata=self._metadata
            )
            return list(response.results)

        outcomes = await self._batch_rpc(items, send)
        return [
            _holder_result("cancel", job_id, outcome, maybe)
            for job_id, (outcome, maybe) in zip(items, outcomes, strict=True)
        ]

    async def _unary(self, call: Callable[[_Conn, float], Awaitable[R]]) -> R:
        self._check_open()
        result, _ = await self._call(call, deadline=self._deadline())
        return result

    async def stats(self) -> Stats:
        async def attempt(conn: _Conn, deadline: float) -> Stats:
            response = await conn.stub.Stats(
                pb.StatsRequest(),
                timeout=self._attempt_timeout(deadline),
                metadata=self._metadata,
            )
            return stats_from_pb(response)

        return await self._unary(attempt)

    def _dead_request(self, ids: Sequence[str] | None) -> pb.DeadRequest:
        if ids is None:
            return pb.DeadRequest(all=True)
        return pb.DeadRequest(ids=[validate.job_id(i, f"ids[{n}]") for n, i in enumerate(ids)])

    async def retry_dead(self, ids: Sequence[str] | None = None) -> int:
        """Put dead jobs back in their queues (all of them when ``ids`` is None)."""
        return await self._dead_rpc(lambda stub: stub.RetryDead, ids)

    async def purge_dead(self, ids: Sequence[str] | None = None) -> int:
        """Delete dead jobs (all of them when ``ids`` is None)."""
        return await self._dead_rpc(lambda stub: stub.PurgeDead, ids)

    async def _dead_rpc(
        self, pick: Callable[[pb_grpc.QueueAsyncStub], Any], ids: Sequence[str] | None
    ) -> int:
        """One dead-letter RPC (``pick`` chooses the stub method), retried like every call."""
        request = self._dead_request(ids)

        async def attempt(conn: _Conn, deadline: float) -> int:
            response = await pick(conn.stub)(
                request, timeout=self._attempt_timeout(deadline), metadata=self._metadata
            )
            return int(response.count)

        return await self._unary(attempt)


# ---------------------------------------------------------------------- item helpers


def _ref(job: Job) -> pb.JobRef:
    if not isinstance(job, Job):
        raise InvalidInput(f"must be a claimed Job, not {type(job).__name__}", field="job")
    return job_ref(job)


def _new_job_size(job: pb.NewJob) -> int:
    return len(job.payload) + len(job.id) + len(job.queue) + len(job.key) + 32


def _holder_result(
    what: str, job_id: str, outcome: pb.Status | OsqueueError, maybe: bool
) -> BaseException | None:
    """None for success, else the error; LeaseLost/JobNotFound after a lost answer
    becomes MaybeCommitted (our own earlier attempt may be what moved the job)."""
    if isinstance(outcome, OsqueueError):
        return outcome
    if outcome.code == _OK:
        return None
    error = from_status(outcome)
    if maybe and isinstance(error, LeaseLost | JobNotFound):
        return MaybeCommitted(
            f"{what} of job {job_id}: an earlier attempt's answer was lost and it may have "
            f"been applied; the broker now says: {error}"
        )
    return error


def _errors_of(outcomes: Sequence[object]) -> list[OsqueueError | None]:
    out: list[OsqueueError | None] = []
    for outcome in outcomes:
        if isinstance(outcome, OsqueueError):
            out.append(outcome)
        elif isinstance(outcome, BaseException):
            raise outcome
        else:
            out.append(None)
    return out


# ---------------------------------------------------------------------- connect

AnyClient = RemoteClient | EmbeddedClient


class Connecting:
    """``await connect(...)`` gives the client; ``async with connect(...) as q`` closes it too."""

    def __init__(self, open_client: Callable[[], Awaitable[AnyClient]]) -> None:
        self._open_client = open_client
        self._client: AnyClient | None = None

    def __await__(self) -> Generator[Any, None, AnyClient]:
        return self._open_client().__await__()

    async def __aenter__(self) -> AnyClient:
        self._client = await self._open_client()
        return self._client

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        if self._client is not None:
            await self._client.close()


def connect(
    url: str,
    *,
    token: str | None = None,
    tls_ca: str | None = None,
    embedded: bool = False,
    timeout_s: float | None = None,
    config: RemoteConfig | None = None,
    broker_config: Any = None,
) -> Connecting:
    """Connect to the broker of the queue at ``url`` (a storage URL).

    ``token``, ``tls_ca`` and ``timeout_s`` override the same fields of
    ``config``.  With ``embedded=True``, when no live broker holds the queue's
    lease, a broker is started in this process (configured by
    ``broker_config``, an :class:`osqueue.BrokerConfig`) and its in-process
    client is returned; closing the client stops that broker.
    """
    cfg = config or RemoteConfig()
    overrides: dict[str, Any] = {}
    if token is not None:
        overrides["token"] = token
    if tls_ca is not None:
        overrides["tls_ca"] = tls_ca
    if timeout_s is not None:
        overrides["timeout_s"] = timeout_s
    cfg = replace(cfg, **overrides) if overrides else cfg

    async def open_client() -> AnyClient:
        from osqueue.storage import from_url

        storage = from_url(url)
        try:
            if embedded:
                local = await start_embedded(storage, broker_config)
                if local is not None:
                    return local
            client = RemoteClient(storage, cfg, owns_storage=True)
            await client.connect_now()
            return client
        except BaseException:
            await storage.close()
            raise

    return Connecting(open_client)


# ---------------------------------------------------------------------- sync twin


class SyncRemoteClient:
    """The blocking twin of :class:`RemoteClient` (or of an embedded client).

    Every call runs on a private event loop thread, so one connection and one
    set of batchers serve all the threads of the process: concurrent pushes
    from several threads still coalesce into batch RPCs.
    """

    def __init__(self, client: AnyClient, loop: LoopThread) -> None:
        self.client = client
        self._loop = loop

    def __enter__(self) -> SyncRemoteClient:
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.close()

    def push(self, payload: bytes, **options: Unpack[PushOptions]) -> str:
        return self._loop.run(self.client.push(payload, **options))

    def push_many(self, jobs: Sequence[NewJob]) -> list[str]:
        return self._loop.run(self.client.push_many(jobs))

    def push_results(self, jobs: Sequence[NewJob]) -> list[str | OsqueueError]:
        return self._loop.run(self.client.push_results(jobs))

    def claim(
        self,
        worker: str,
        queues: Sequence[str] = ("default",),
        *,
        max_jobs: int = 1,
        wait_s: float = 0.0,
    ) -> list[Job]:
        return self._loop.run(self.client.claim(worker, queues, max_jobs=max_jobs, wait_s=wait_s))

    def complete_and_claim(
        self,
        jobs: Sequence[Job],
        worker: str,
        queues: Sequence[str] = ("default",),
        *,
        max_jobs: int = 1,
    ) -> tuple[list[OsqueueError | None], list[Job]]:
        return self._loop.run(
            self.client.complete_and_claim(jobs, worker, queues, max_jobs=max_jobs)
        )

    def heartbeat(self, job: Job) -> None:
        self._loop.run(self.client.heartbeat(job))

    def complete(self, job: Job) -> None:
        self._loop.run(self.client.complete(job))

    def fail(self, job: Job, *, error: str = "", retry_after_s: float | None = None) -> None:
        self._loop.run(self.client.fail(job, error=error, retry_after_s=retry_after_s))

    def release(self, job: Job) -> None:
        self._loop.run(self.client.release(job))

    def cancel(self, job_id: str) -> None:
        self._loop.run(self.client.cancel(job_id))

    def stats(self) -> Stats:
        return self._loop.run(self.client.stats())

    def retry_dead(self, ids: Sequence[str] | None = None) -> int:
        return self._loop.run(self.client.retry_dead(ids))

    def purge_dead(self, ids: Sequence[str] | None = None) -> int:
        return self._loop.run(self.client.purge_dead(ids))

    def close(self) -> None:
        """Close the client, then stop its loop thread (idempotent)."""
        try:
            self._loop.run(self.client.close())
        except ShuttingDown:
            pass  # the loop is already closed
        finally:
            self._loop.close()


def connect_sync(
    url: str,
    *,
    token: str | None = None,
    tls_ca: str | None = None,
    embedded: bool = False,
    timeout_s: float | None = None,
    config: RemoteConfig | None = None,
    broker_config: Any = None,
) -> SyncRemoteClient:
    """The blocking twin of :func:`connect` (same arguments)."""
    loop = LoopThread()
    try:
        client = loop.run(
            _opened(
                connect(
                    url,
                    token=token,
                    tls_ca=tls_ca,
                    embedded=embedded,
                    timeout_s=timeout_s,
                    config=config,
                    broker_config=broker_config,
                )
            )
        )
    except BaseException:
        loop.close()
        raise
    return SyncRemoteClient(client, loop)


async def _opened(connecting: Connecting) -> AnyClient:
    return await connecting
