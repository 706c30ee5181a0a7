"""The ``osqueue.v1.Queue`` gRPC service over any :class:`QueueClient`.

The service holds no queue state: it checks each request against
:class:`~osqueue.server.limits.Limits`, admits it past the in-flight bounds,
and calls the client it wraps (the broker's in-process client in production,
a fake in unit tests).  Items of a batch run concurrently, so the broker
group-commits them together, and each item gets its own result: one bad item
fails alone.  A call fails as a whole only when the request itself is refused
or when every item was refused for a reason that is about the broker, not the
item (not the broker any more, shutting down, overloaded); the client then
retries the call elsewhere or later.

Requests arrive undecoded: a request that is not a valid message is
``INVALID_ARGUMENT`` naming ``request``, never an internal error.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import AsyncIterator, Awaitable, Callable, Sequence
from typing import Any, NoReturn, Protocol, TypeVar, cast, runtime_checkable

import grpc
import msgspec
from google.protobuf.message import DecodeError, Message

from osqueue.api import (
    CompletesAndClaims,
    EncodedResult,
    Job,
    JobResult,
    NewJob,
    PushOptions,
    QueueClient,
)
from osqueue.errors import (
    BrokerMoved,
    BrokerUnavailable,
    InvalidInput,
    OsqueueError,
    Overloaded,
    Unauthenticated,
)
from osqueue.server.dead_letters import DeadLetterRpcs
from osqueue.server.limits import Admission, Limits, RequestChecker
from osqueue.server.scheduling import SchedulingRpcs
from osqueue.server.segment_admin import SegmentRpcs
from osqueue.state import validate
from osqueue.wire._pb import queue_pb2 as pb
from osqueue.wire.convert import (
    job_from_ref,
    job_result_to_pb,
    job_to_pb,
    result_from_pb,
    stats_to_pb,
)
from osqueue.wire.status import OK, grpc_code, to_status, trailers

log = logging.getLogger(__name__)

SERVICE_NAME: str = pb.DESCRIPTOR.services_by_name["Queue"].full_name

Context = Any  # grpc.aio.ServicerContext (grpc ships no type stubs)
RpcHandler = Any  # grpc.RpcMethodHandler
Req = TypeVar("Req", bound=Message)
Resp = TypeVar("Resp", bound=Message)
Item = TypeVar("Item")
Prepared = TypeVar("Prepared")

#: Errors about the broker rather than the item: when every item of a batch got
#: one of these, the whole call fails with it (the client retries the batch).
_CALL_LEVEL = (BrokerMoved, Overloaded, Unauthenticated)
#: Push options added after the first release, with their defaults.
_LATER_OPTIONS: tuple[tuple[str, object], ...] = (
    ("group", None),
    ("after", ()),
    ("on_parent_failure", "cancel"),
    ("result_ttl_s", None),
)
#: Bytes a job adds to a ClaimResponse beyond its payload (generous upper bound).
_JOB_OVERHEAD_BYTES = 1024

Outcomes = Sequence[object]  # per item: a value, None, or the exception it got


# Optional abilities a client may have beyond QueueClient (the in-process client
# has them): a whole batch in one call, and the dead-letter administration.
@runtime_checkable
class BatchPush(Protocol):
    async def push_results(self, jobs: Sequence[NewJob]) -> list[str | OsqueueError]: ...


@runtime_checkable
class BatchHolder(Protocol):
    async def heartbeat_many(self, jobs: Sequence[Job]) -> list[OsqueueError | None]: ...

    async def complete_many(
        self, jobs: Sequence[Job], results: Sequence[object] | None = None
    ) -> list[OsqueueError | None]: ...


@runtime_checkable
class EncodedResults(Protocol):
    async def encoded_result(
        self, job_id: str, *, wait_s: float = 0.0
    ) -> tuple[JobResult, EncodedResult | None]: ...


def _gathering(
    call: Callable[[Prepared], Awaitable[object]],
) -> Callable[[list[Prepared]], Awaitable[Outcomes]]:
    """Run ``call`` on every item concurrently (the broker commits them together)."""

    async def run(items: list[Prepared]) -> Outcomes:
        return await asyncio.gather(*(call(item) for item in items), return_exceptions=True)

    return run


class QueueService(SchedulingRpcs, DeadLetterRpcs, SegmentRpcs):
    """Serves ``osqueue.v1.Queue`` by calling ``client`` (the scheduling RPCs are in
    :mod:`osqueue.server.scheduling`)."""

    def __init__(self, client: QueueClient | None, limits: Limits | None = None) -> None:
        self.limits = limits or Limits()
        self.check = RequestChecker(self.limits)
        self.admission = Admission(self.limits)
        self._client: QueueClient | None = None
        self._push_all: Callable[[list[NewJob]], Awaitable[Outcomes]]
        self._heartbeat_all: Callable[[list[Job]], Awaitable[Outcomes]]
        self._complete_all: Callable[[list[Completion]], Awaitable[Outcomes]]
        if client is not None:
            self.attach(client)

    def attach(self, client: QueueClient) -> None:
        """Serve ``client`` from now on (a server may start before its broker does)."""
        if isinstance(client, BatchPush):
            self._push_all = client.push_results
        else:
            self._push_all = _gathering(self._push_one)
        if isinstance(client, BatchHolder):
            self._heartbeat_all = client.heartbeat_many
            self._complete_all = _completing_many(client)
        else:
            self._heartbeat_all = _gathering(client.heartbeat)
            self._complete_all = _gathering(_completing_one(client))
        self._client = client

    def _ensure_serving(self) -> None:
        if self._client is None:
            raise BrokerUnavailable("this broker is not serving yet (starting or standing by)")

    @property
    def client(self) -> QueueClient:
        """The client served; ``BrokerUnavailable`` (UNAVAILABLE) until one is attached."""
        if self._client is None:
            raise BrokerUnavailable("this broker is not serving yet (starting or standing by)")
        return self._client

    # ------------------------------------------------------------------ wiring

    def rpc_handler(self) -> Any:
        """The generic handler to add to a ``grpc.aio`` server."""
        table = {
            "Push": self._unary(pb.PushRequest, self.push, pb.PushResponse),
            "Claim": self._unary(pb.ClaimRequest, self.claim, pb.ClaimResponse),
            "ClaimStream": self._stream(pb.ClaimRequest, self.claim_stream, pb.ClaimResponse),
            "Heartbeat": self._unary(pb.JobRefsRequest, self.heartbeat, pb.ResultsResponse),
            "Complete": self._unary(pb.JobRefsRequest, self.complete, pb.ResultsResponse),
            "Fail": self._unary(pb.FailRequest, self.fail, pb.ResultsResponse),
            "Release": self._unary(pb.JobRefsRequest, self.release, pb.ResultsResponse),
            "Cancel": self._unary(pb.CancelRequest, self.cancel, pb.ResultsResponse),
            "Stats": self._unary(pb.StatsRequest, self.stats, pb.StatsResponse),
            "RetryDead": self._unary(pb.DeadRequest, self.retry_dead, pb.CountResponse),
            "PurgeDead": self._unary(pb.DeadRequest, self.purge_dead, pb.CountResponse),
            "Result": self._unary(pb.ResultRequest, self.result, pb.ResultResponse),
            "Schedule": self._unary(pb.ScheduleRequest, self.schedule, pb.ScheduleResponse),
            "Unschedule": self._unary(pb.UnscheduleRequest, self.unschedule, pb.UnscheduleResponse),
            "ListSchedules": self._unary(
                pb.ListSchedulesRequest, self.list_schedules, pb.ListSchedulesResponse
            ),
            "SetQueue": self._unary(pb.SetQueueRequest, self.set_queue, pb.SetQueueResponse),
            "ReadmitSegment": self._unary(
                pb.ReadmitSegmentRequest, self.readmit_segment, pb.CountResponse
            ),
        }
        return grpc.method_handlers_generic_handler(SERVICE_NAME, table)

    def _unary(
        self,
        request_type: type[Req],
        method: Callable[[Req, Context], Awaitable[Resp]],
        response_type: type[Resp],
    ) -> RpcHandler:
        async def handle(raw: bytes, context: Context) -> Resp:
            try:
                with self.admission.admit(context.peer(), len(raw)):
                    self._ensure_serving()
                    return await method(_parse(request_type, raw), context)
            except grpc.aio.AbortError:
                raise
            except OsqueueError as exc:
                await _abort(context, exc)
            except Exception as exc:
                await _internal(context, exc)

        return grpc.unary_unary_rpc_method_handler(
            handle, response_serializer=response_type.SerializeToString
        )

    def _stream(
        self,
        request_type: type[Req],
        method: Callable[[Req, Context], AsyncIterator[Resp]],
        response_type: type[Resp],
    ) -> RpcHandler:
        async def handle(raw: bytes, context: Context) -> AsyncIterator[Resp]:
            try:
                with self.admission.admit(context.peer(), len(raw)):
                    self._ensure_serving()
                    async for response in method(_parse(request_type, raw), context):
                        yield response
            except grpc.aio.AbortError:
                raise
            except OsqueueError as exc:
                await _abort(context, exc)
            except Exception as exc:
                await _internal(context, exc)

        return grpc.unary_stream_rpc_method_handler(
            handle, response_serializer=response_type.SerializeToString
        )

    # ------------------------------------------------------------------ batch items

    async def _each(
        self,
        field: str,
        items: Sequence[Item],
        prepare: Callable[[Item, str], Prepared],
        run: Callable[[list[Prepared]], Awaitable[Outcomes]],
    ) -> list[pb.Status]:
        """Check every item, run the good ones as one batch; one Status per item."""
        self.check.batch(len(items), field)
        statuses: list[pb.Status] = [OK] * len(items)
        positions: list[int] = []
        prepared: list[Prepared] = []
        for i, item in enumerate(items):
            try:
                prepared.append(prepare(item, f"{field}[{i}]"))
            except InvalidInput as exc:
                statuses[i] = to_status(exc)
            else:
                positions.append(i)
        if not prepared:
            return statuses
        outcomes = await run(prepared)
        for i, outcome in zip(positions, outcomes, strict=True):
            if isinstance(outcome, OsqueueError):
                statuses[i] = to_status(outcome, field_prefix=f"{field}[{i}]")
            elif isinstance(outcome, BaseException):
                log.error(
                    "the queue client raised an unexpected error",
                    exc_info=outcome,
                    extra={"action": "item_failed", "field": f"{field}[{i}]"},
                )
                statuses[i] = to_status(OsqueueError(f"internal error: {outcome!r}"))
        _raise_if_call_level(outcomes, len(positions) == len(items))
        return statuses

    # ------------------------------------------------------------------ RPCs

    async def push(self, request: pb.PushRequest, context: Context) -> pb.PushResponse:
        statuses = await self._each("jobs", request.jobs, self._new_job, self._push_all)
        return pb.PushResponse(
            results=[
                pb.PushResult(id=job.id, status=status)
                for job, status in zip(request.jobs, statuses, strict=True)
            ]
        )

    def _new_job(self, job: pb.NewJob, field: str) -> NewJob:
        new = self.check.new_job(job, field)
        if new.result_ttl_s is not None:
            validate.seconds(
                new.result_ttl_s, f"{field}.result_ttl_s", maximum=validate.MAX_RESULT_TTL_S
            )
        return new

    async def _push_one(self, job: NewJob) -> str:
        options = msgspec.structs.asdict(job)
        payload = options.pop("payload")
        # Options added later are passed only when set, so a client written
        # before them still serves the pushes that do not use them.
        for name, default in _LATER_OPTIONS:
            if options[name] == default:
                del options[name]
        return await self.client.push(payload, **cast(PushOptions, options))

    def _wait_budget_s(self, wait_s: float, context: Context) -> float:
        """``wait_s``, cut so the answer reaches the client before its deadline."""
        remaining: float | None = context.time_remaining()
        if remaining is None:
            return wait_s
        return max(0.0, min(wait_s, remaining - 0.5))

    async def claim(self, request: pb.ClaimRequest, context: Context) -> pb.ClaimResponse:
        self.check.claim(request)
        completed: list[pb.Status] = []
        if request.complete:
            jobs, completed = await self._complete_and_claim(request)
        else:
            jobs = await self.client.claim(
                request.worker,
                list(request.queues),
                max_jobs=request.max_jobs,
                wait_s=self._wait_budget_s(request.wait_s, context),
            )
        chunks = self._chunks(jobs)
        if len(chunks) > 1:  # more than one message holds: give the rest back
            await self._release_quietly([job for chunk in chunks[1:] for job in chunk])
        return pb.ClaimResponse(jobs=chunks[0] if chunks else [], completed=completed)

    async def _complete_and_claim(
        self, request: pb.ClaimRequest
    ) -> tuple[list[Job], list[pb.Status]]:
        """Complete ``request.complete`` and claim, in one commit when the client can."""
        if request.wait_s != 0:
            raise InvalidInput("must be 0 when the call also completes jobs", field="wait_s")
        client = self.client
        worker, queues, max_jobs = request.worker, list(request.queues), request.max_jobs
        claimed: list[Job] | None = None

        async def run(completions: list[Completion]) -> Outcomes:
            nonlocal claimed
            if isinstance(client, CompletesAndClaims):
                jobs, results = _split(completions)
                if results is None:  # a client that predates results takes this too
                    errors, claimed = await client.complete_and_claim(
                        jobs, worker, queues, max_jobs=max_jobs
                    )
                else:
                    errors, claimed = await client.complete_and_claim(
                        jobs, worker, queues, max_jobs=max_jobs, results=results
                    )
                return errors
            outcomes, claimed = await asyncio.gather(
                self._complete_all(completions), client.claim(worker, queues, max_jobs=max_jobs)
            )
            return outcomes

        statuses = await self._each("complete", request.complete, self._completion, run)
        if claimed is None:  # no completion was well-formed: the claim alone
            claimed = await client.claim(worker, queues, max_jobs=max_jobs)
        return claimed, statuses

    async def claim_stream(
        self, request: pb.ClaimRequest, context: Context
    ) -> AsyncIterator[pb.ClaimResponse]:
        self.check.claim(request)
        if request.complete:
            raise InvalidInput("is for Claim; a stream does not complete jobs", field="complete")
        loop = asyncio.get_running_loop()
        deadline = loop.time() + self._wait_budget_s(request.wait_s, context)
        remaining = request.max_jobs
        while remaining > 0:
            jobs = await self.client.claim(
                request.worker,
                list(request.queues),
                max_jobs=remaining,
                wait_s=max(0.0, deadline - loop.time()),
            )
            if not jobs:
                return
            remaining -= len(jobs)
            for chunk in self._chunks(jobs):
                yield pb.ClaimResponse(jobs=chunk)
            if loop.time() >= deadline:
                return

    def _chunks(self, jobs: Sequence[Job]) -> list[list[pb.Job]]:
        """Split jobs into groups that each fit in one message."""
        budget = self.limits.max_message_bytes - _JOB_OVERHEAD_BYTES
        chunks: list[list[pb.Job]] = []
        size = budget + 1
        for job in jobs:
            cost = len(job.payload) + _JOB_OVERHEAD_BYTES
            if size + cost > budget:
                chunks.append([])
                size = 0
            chunks[-1].append(job_to_pb(job))
            size += cost
        return chunks

    async def _release_quietly(self, jobs: Sequence[pb.Job]) -> None:
        refs = [pb.JobRef(id=j.id, token=j.token) for j in jobs]
        outcomes = await asyncio.gather(
            *(self.client.release(job_from_ref(r)) for r in refs), return_exceptions=True
        )
        failed = [r.id for r, o in zip(refs, outcomes, strict=True) if o is not None]
        if failed:
            log.warning(
                "could not give back claimed jobs that did not fit in the answer",
                extra={"action": "release_failed", "jobs": failed},
            )

    def _ref(self, ref: pb.JobRef, field: str) -> Job:
        self.check.job_ref(ref, field)
        return job_from_ref(ref)

    def _completion(self, ref: pb.JobRef, field: str) -> Completion:
        """A job to complete, with the result its reference carries (if any)."""
        job = self._ref(ref, field)
        if not ref.HasField("result"):
            return job, None
        return job, result_from_pb(ref.result, f"{field}.result")

    async def heartbeat(self, request: pb.JobRefsRequest, context: Context) -> pb.ResultsResponse:
        statuses = await self._each("jobs", request.jobs, self._ref, self._heartbeat_all)
        return pb.ResultsResponse(results=statuses)

    async def complete(self, request: pb.JobRefsRequest, context: Context) -> pb.ResultsResponse:
        statuses = await self._each("jobs", request.jobs, self._completion, self._complete_all)
        return pb.ResultsResponse(results=statuses)

    async def release(self, request: pb.JobRefsRequest, context: Context) -> pb.ResultsResponse:
        statuses = await self._each(
            "jobs", request.jobs, self._ref, _gathering(self.client.release)
        )
        return pb.ResultsResponse(results=statuses)

    def _fail_item(self, item: pb.FailItem, field: str) -> tuple[Job, str, float | None]:
        retry_after_s = self.check.fail_item(item, field)
        return job_from_ref(item.job), item.error, retry_after_s

    async def _fail_one(self, prepared: tuple[Job, str, float | None]) -> None:
        job, error, retry_after_s = prepared
        await self.client.fail(job, error=error, retry_after_s=retry_after_s)

    async def fail(self, request: pb.FailRequest, context: Context) -> pb.ResultsResponse:
        statuses = await self._each(
            "items", request.items, self._fail_item, _gathering(self._fail_one)
        )
        return pb.ResultsResponse(results=statuses)

    async def cancel(self, request: pb.CancelRequest, context: Context) -> pb.ResultsResponse:
        statuses = await self._each(
            "ids", request.ids, self.check.job_id, _gathering(self.client.cancel)
        )
        return pb.ResultsResponse(results=statuses)

    async def stats(self, request: pb.StatsRequest, context: Context) -> pb.StatsResponse:
        return stats_to_pb(await self.client.stats())

    async def result(self, request: pb.ResultRequest, context: Context) -> pb.ResultResponse:
        job_id = self.check.job_id(request.id, "id")
        wait_s = self.check.seconds(request.wait_s, "wait_s", validate.MAX_DELAY_S)
        wait_s = self._wait_budget_s(wait_s, context)
        client = self.client
        if isinstance(client, EncodedResults):  # the value as stored: not decoded here
            result, value = await client.encoded_result(job_id, wait_s=wait_s)
        else:
            result = await client.result(job_id, wait_s=wait_s)
            value = EncodedResult.of(result.value)
        return job_result_to_pb(result, value)


# ---------------------------------------------------------------------- helpers


#: A job to complete and its result (None: none).
Completion = tuple[Job, EncodedResult | None]


def _split(completions: Sequence[Completion]) -> tuple[list[Job], list[object] | None]:
    """The jobs, and their results (None when no completion carries one)."""
    jobs = [job for job, _ in completions]
    if all(result is None for _, result in completions):
        return jobs, None
    return jobs, [result for _, result in completions]


def _completing_many(client: BatchHolder) -> Callable[[list[Completion]], Awaitable[Outcomes]]:
    async def run(completions: list[Completion]) -> Outcomes:
        jobs, results = _split(completions)
        if results is None:
            return await client.complete_many(jobs)
        return await client.complete_many(jobs, results)

    return run


def _completing_one(client: QueueClient) -> Callable[[Completion], Awaitable[None]]:
    async def run(completion: Completion) -> None:
        job, result = completion
        if result is None:
            await client.complete(job)
        else:
            await client.complete(job, result=result)

    return run


def _parse(request_type: type[Req], raw: bytes) -> Req:
    request = request_type()
    try:
        request.ParseFromString(raw)
    except (DecodeError, ValueError) as exc:
        raise InvalidInput(
            f"is not a valid {request_type.DESCRIPTOR.full_name} message: {exc}", field="request"
        ) from exc
    return request


def _raise_if_call_level(outcomes: Sequence[object], all_ran: bool) -> None:
    """Fail the call when no item went through and every refusal was about the broker."""
    if not outcomes or not all_ran:
        return
    if all(isinstance(o, _CALL_LEVEL) for o in outcomes):
        first = outcomes[0]
        assert isinstance(first, OsqueueError)
        raise first


async def _abort(context: Context, exc: OsqueueError) -> NoReturn:
    status = to_status(exc)
    await context.abort(grpc_code(status), status.message, trailers(status))
    raise AssertionError("context.abort returned")  # pragma: no cover


async def _internal(context: Context, exc: Exception) -> NoReturn:
    log.error("a call failed unexpectedly", exc_info=exc, extra={"action": "internal_error"})
    await context.abort(grpc.StatusCode.INTERNAL, "internal error (see the broker's log)")
    raise AssertionError("context.abort returned")  # pragma: no cover
