"""The remote client: ``osqueue.connect(url)``, the same interface as ``broker.client()``.

The client is given the queue's storage URL, never a broker address: it reads
the queue document (reads only) to find the broker the document names,
connects, and on ``UNAVAILABLE``, timeouts, lost connections and ``NotBroker``
it re-reads the document (or follows the address a stepping-down broker
gives) and tries again, with bounded backoff, until the call's overall
deadline.  Pushes are safe to retry: job ids are chosen here, before the first
send, so the broker applies a retried push once.

:class:`RemoteClient` is the RPC surface only: each method checks its
arguments and builds its message (:mod:`.requests`), then sends it through
one of the parts it wires together:

* :mod:`.connection`: the channel to the broker, found through the document;
* :mod:`.failover`: retries, following and rediscovery, deadlines, backoff
  (all timed by the injected clock);
* :mod:`.batches`: calls of one kind made concurrently (pushes from many
  tasks, completions from many handlers) coalesce into one batch RPC;
* :mod:`.failures`: what a failed attempt means.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Sequence
from contextlib import aclosing
from functools import partial
from types import TracebackType
from typing import Any, TypeVar, Unpack, cast

from google.protobuf.message import Message

from osqueue.api import (
    ClaimOptions,
    DeadOptions,
    Job,
    JobResult,
    NewJob,
    PushOptions,
    QueueSettings,
    ScheduleInfo,
    ScheduleSpec,
    SettingsChange,
    Stats,
)
from osqueue.client.discovery import BrokerLocation
from osqueue.client.remote.batches import Batches
from osqueue.client.remote.config import RemoteConfig
from osqueue.client.remote.connection import Conn, Connection
from osqueue.client.remote.dead import dead_run
from osqueue.client.remote.failover import Attempt, Failover, StreamCall
from osqueue.client.remote.failures import errors_of, holder_result
from osqueue.client.remote.requests import (
    claim_request,
    completion_ref,
    completion_refs,
    fail_item,
    holder_ref,
    push_message,
)
from osqueue.clock import Clock, SystemClock
from osqueue.errors import InvalidInput, OsqueueError, ShuttingDown
from osqueue.state import make, validate
from osqueue.storage.port import Storage
from osqueue.wire._pb import queue_pb2 as pb
from osqueue.wire.auth import bearer_metadata
from osqueue.wire.convert import from_pb, job_result_from_pb, stats_from_pb, to_pb

R = TypeVar("R")


class RemoteClient:
    """A :class:`~osqueue.api.QueueClient` over gRPC that finds and follows the broker
    (and :class:`~osqueue.api.Scheduling`: periodic jobs and queue settings).

    ``clock`` times every deadline and backoff wait (a
    :class:`~osqueue.clock.ManualClock` makes them instant in tests).
    """

    def __init__(
        self,
        storage: Storage,
        config: RemoteConfig | None = None,
        *,
        owns_storage: bool = False,
        clock: Clock | None = None,
    ) -> None:
        self.config = config or RemoteConfig()
        self.storage = storage
        self.clock: Clock = clock or SystemClock()
        self.connection = Connection(storage, self.config, self.clock)
        self.discovery = self.connection.discovery
        self.failover = Failover(self.connection, self.config, self.clock, storage.url)
        self._owns_storage = owns_storage
        self._metadata = bearer_metadata(self.config.token) if self.config.token else None
        self._accepting = True
        self._batches = Batches(self.failover, self.config, self._metadata)
        self.pushes = self._batches.pushes
        self.heartbeats = self._batches.heartbeats
        self.completions = self._batches.completions
        self.releases = self._batches.releases
        self.failures = self._batches.failures
        self.cancels = self._batches.cancels

    @property
    def address(self) -> str | None:
        """The broker address in use (None before the first connection)."""
        return self.connection.address

    @property
    def connects(self) -> int:
        """Connections opened (the first one included), for tests and monitoring."""
        return self.connection.connects

    @property
    def heartbeat_timeout_s(self) -> float | None:
        """The broker's heartbeat timeout, as the queue document last said (workers pace by it)."""
        last = self.discovery.last
        return last.heartbeat_timeout_s if last is not None else None

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
        if self.connection.closed:
            return
        self._accepting = False
        try:
            await self._batches.close()
        finally:
            await self.connection.close()
            if self._owns_storage:
                await self.storage.close()

    def _check_open(self) -> None:
        if not self._accepting:
            raise ShuttingDown("the client is closed")

    async def locate(self) -> BrokerLocation | None:
        """Where the document says the broker is (reads the document once)."""
        return await self.discovery.locate()

    async def connect_now(self) -> None:
        """Open the connection now if the document names a broker (never waits; an
        unreadable document is looked at again by the first call)."""
        await self.connection.connect_now()

    # ------------------------------------------------------------------ push

    async def push(self, payload: bytes, **options: Unpack[PushOptions]) -> str:
        self._check_open()
        message = push_message(NewJob(payload, **options), self.config.max_payload_bytes)
        return await self.pushes.submit(message)

    async def push_results(self, jobs: Sequence[NewJob]) -> list[str | OsqueueError]:
        """Push a batch; one result per job: its id, or the error that job got."""
        self._check_open()
        messages: list[pb.NewJob | OsqueueError] = []
        for job in jobs:
            try:
                messages.append(push_message(job, self.config.max_payload_bytes))
            except OsqueueError as exc:
                messages.append(exc)
        sent = iter(
            await self.pushes.submit_many([m for m in messages if isinstance(m, pb.NewJob)])
        )
        results = [m if isinstance(m, OsqueueError) else next(sent) for m in messages]
        for outcome in results:
            if isinstance(outcome, BaseException) and not isinstance(outcome, OsqueueError):
                raise outcome
        return cast("list[str | OsqueueError]", results)

    async def push_many(self, jobs: Sequence[NewJob]) -> list[str]:
        """Push a batch; raises the first job's error (the other jobs are pushed)."""
        results = await self.push_results(jobs)
        for result in results:
            if isinstance(result, OsqueueError):
                raise result
        return cast("list[str]", results)

    # ------------------------------------------------------------------ claim

    async def claim(
        self, worker: str, queues: Sequence[str] = ("default",), **options: Unpack[ClaimOptions]
    ) -> list[Job]:
        self._check_open()
        request, wait = claim_request(worker, queues, options, self.config.max_claim_jobs)
        response = await self._waiting("Claim", request, wait)
        return [from_pb(job, Job) for job in response.jobs]

    async def _waiting(self, rpc: str, request: Any, wait: float) -> Any:
        """One call of ``rpc`` that may wait up to ``wait`` seconds (a claim, a result),
        retried like every call; the wait is counted once across attempts."""
        failover = self.failover
        start = self.clock.monotonic()

        async def attempt(conn: Conn, deadline: float) -> Any:
            request.wait_s = max(0.0, wait - (self.clock.monotonic() - start))
            return await getattr(conn.stub, rpc)(
                request,
                timeout=failover.attempt_timeout(deadline, request.wait_s),
                metadata=self._metadata,
            )

        response, _ = await failover.call(attempt, deadline=failover.deadline(wait))
        return response

    async def complete_and_claim(
        self,
        jobs: Sequence[Job],
        worker: str,
        queues: Sequence[str] = ("default",),
        *,
        max_jobs: int = 1,
        results: Sequence[object] | None = None,
    ) -> tuple[list[OsqueueError | None], list[Job]]:
        """Complete ``jobs`` (with ``results``, one per job) and claim up to
        ``max_jobs`` in one Claim call (one commit).

        Retried like a claim; a
        completion whose first answer was lost and that the broker then no
        longer knows is :class:`~osqueue.errors.MaybeCommitted`.  Completions
        beyond one request (``max_batch``) go out with Complete beside the
        call; the claim takes at most ``max_claim_jobs``, as :meth:`claim` does."""
        self._check_open()
        limit = self.config.max_batch
        refs = completion_refs(jobs, results, self.config.max_payload_bytes)
        if len(jobs) > limit:  # the rest go out with Complete, beside this call
            (errors, claimed), more = await asyncio.gather(
                self._complete_and_claim(jobs[:limit], refs[:limit], worker, queues, max_jobs),
                self._complete_refs(refs[limit:]),
            )
            return errors + more, claimed
        return await self._complete_and_claim(jobs, refs, worker, queues, max_jobs)

    async def _complete_and_claim(
        self,
        jobs: Sequence[Job],
        refs: list[pb.JobRef],
        worker: str,
        queues: Sequence[str],
        max_jobs: int,
    ) -> tuple[list[OsqueueError | None], list[Job]]:
        options: ClaimOptions = {"max_jobs": max_jobs}
        request, _ = claim_request(worker, queues, options, self.config.max_claim_jobs)
        request.complete.extend(refs)
        maybe = False

        def lost_answer() -> None:
            nonlocal maybe
            maybe = True

        failover = self.failover

        async def attempt(conn: Conn, deadline: float) -> pb.ClaimResponse:
            response: pb.ClaimResponse = await conn.stub.Claim(
                request, timeout=failover.attempt_timeout(deadline), metadata=self._metadata
            )
            return response

        response, _ = await failover.call(
            attempt, deadline=failover.deadline(), on_unknown=lost_answer
        )
        claimed = [from_pb(job, Job) for job in response.jobs]
        outcomes = [
            holder_result("complete", job.id, status, maybe)
            for job, status in zip(jobs, response.completed, strict=True)
        ]
        return errors_of(outcomes), claimed

    async def claim_stream(
        self, worker: str, queues: Sequence[str] = ("default",), **options: Unpack[ClaimOptions]
    ) -> AsyncIterator[list[Job]]:
        """Long poll: yield jobs as they become claimable until ``max_jobs`` or ``wait_s``.

        Fails over like every call until the first jobs arrive; a stream cut
        after that simply ends (the next call finds the broker again).
        """
        self._check_open()
        request, wait = claim_request(worker, queues, options, self.config.max_claim_jobs)
        failover = self.failover
        start = self.clock.monotonic()

        def open_stream(conn: Conn, deadline: float) -> StreamCall[pb.ClaimResponse]:
            request.wait_s = max(0.0, wait - (self.clock.monotonic() - start))
            call: StreamCall[pb.ClaimResponse] = conn.stub.ClaimStream(
                request,
                timeout=failover.attempt_timeout(deadline, request.wait_s),
                metadata=self._metadata,
            )
            return call

        stream = failover.stream(open_stream, deadline=failover.deadline(wait))
        async with aclosing(stream) as responses:
            async for response in responses:
                yield [from_pb(job, Job) for job in response.jobs]

    # ------------------------------------------------------------------ the holder's calls

    async def heartbeat(self, job: Job) -> None:
        self._check_open()
        await self.heartbeats.submit(holder_ref(job))

    async def complete(self, job: Job, *, result: object = None) -> None:
        self._check_open()
        await self.completions.submit(completion_ref(job, result, self.config.max_payload_bytes))

    async def release(self, job: Job) -> None:
        self._check_open()
        await self.releases.submit(holder_ref(job))

    async def heartbeat_many(self, jobs: Sequence[Job]) -> list[OsqueueError | None]:
        self._check_open()
        return errors_of(await self.heartbeats.submit_many([holder_ref(job) for job in jobs]))

    async def complete_many(
        self, jobs: Sequence[Job], results: Sequence[object] | None = None
    ) -> list[OsqueueError | None]:
        """Complete ``jobs`` (with ``results``, one per job, None for none)."""
        self._check_open()
        return await self._complete_refs(
            completion_refs(jobs, results, self.config.max_payload_bytes)
        )

    async def _complete_refs(self, refs: list[pb.JobRef]) -> list[OsqueueError | None]:
        return errors_of(await self.completions.submit_many(refs))

    async def fail(self, job: Job, *, error: str = "", retry_after_s: float | None = None) -> None:
        self._check_open()
        await self.failures.submit(
            fail_item(job, error, retry_after_s, self.config.max_error_chars)
        )

    # ------------------------------------------------------------------ administration

    async def cancel(self, job_id: str) -> None:
        self._check_open()
        await self.cancels.submit(make.cancel(job_id).job_id)

    async def result(self, job_id: str, *, wait_s: float = 0.0) -> JobResult:
        """How ``job_id`` finished, waiting up to ``wait_s`` (see
        :meth:`osqueue.api.QueueClient.result`); retried and failed over like a
        claim, the wait counted once across attempts."""
        self._check_open()
        wait = make.wait(wait_s)
        request = pb.ResultRequest(id=validate.job_id(job_id, "job_id"), wait_s=wait)
        return job_result_from_pb(await self._waiting("Result", request, wait))

    async def _unary(self, attempt: Attempt[R]) -> R:
        """One unary call, retried like every call until the default deadline."""
        self._check_open()
        result, _ = await self.failover.call(attempt, deadline=self.failover.deadline())
        return result

    async def _rpc(self, rpc: str, request: Message) -> Any:
        """One unary call of ``rpc``, retried like every call until the default deadline."""

        async def attempt(conn: Conn, deadline: float) -> Any:
            return await getattr(conn.stub, rpc)(
                request, timeout=self.failover.attempt_timeout(deadline), metadata=self._metadata
            )

        return await self._unary(attempt)

    async def stats(self) -> Stats:
        return stats_from_pb(await self._rpc("Stats", pb.StatsRequest()))

    async def retry_dead(
        self, ids: Sequence[str] | None = None, **options: Unpack[DeadOptions]
    ) -> int:
        """Put dead jobs back in their queues: ``ids``, or those the filters admit
        (:class:`~osqueue.api.DeadOptions`; none: all of them)."""
        return await dead_run(partial(self._rpc, "RetryDead"), ids, options)

    async def purge_dead(
        self, ids: Sequence[str] | None = None, **options: Unpack[DeadOptions]
    ) -> int:
        """Delete dead jobs: ``ids``, or those the filters admit (none: all)."""
        return await dead_run(partial(self._rpc, "PurgeDead"), ids, options)

    async def readmit_segment(self, key: str) -> int:
        """Put the set-aside segment ``key`` back once its object is restored (the
        broker checks it first); returns the jobs readmitted."""
        request = pb.ReadmitSegmentRequest(key=key)
        return int((await self._rpc("ReadmitSegment", request)).count)

    # ------------------------------------------------------------------ schedules, settings
    # A schedule or a setting is safe to send again: applied twice, it is the same state.

    async def schedule(self, name: str, **spec: Unpack[ScheduleSpec]) -> ScheduleInfo:
        request = pb.ScheduleRequest(schedule=to_pb(make.schedule(name, spec), pb.Schedule))
        response = await self._rpc("Schedule", request)
        if not response.HasField("schedule"):
            raise InvalidInput("the broker answered no schedule", field="schedule")
        return from_pb(response.schedule, ScheduleInfo)

    async def unschedule(self, name: str) -> bool:
        request = pb.UnscheduleRequest(name=make.unschedule(name).name)
        return bool((await self._rpc("Unschedule", request)).removed)

    async def schedules(self) -> list[ScheduleInfo]:
        response = await self._rpc("ListSchedules", pb.ListSchedulesRequest())
        return [from_pb(s, ScheduleInfo) for s in response.schedules]

    async def set_queue(
        self, queue: str, *, remove: bool = False, **change: Unpack[SettingsChange]
    ) -> QueueSettings:
        op = make.set_queue(queue, change, remove)
        request = pb.SetQueueRequest(settings=to_pb(op, pb.QueueSettings), remove=op.remove)
        return from_pb((await self._rpc("SetQueue", request)).settings, QueueSettings)
