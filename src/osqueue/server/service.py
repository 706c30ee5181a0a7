"""The ``osqueue.v1.Queue`` gRPC service: messages decoded into ops, submitted to the broker.

The service holds no queue state: it checks each request's bounds against
:class:`~osqueue.server.limits.Limits`, admits it past the in-flight bounds,
makes each item into its op with the state layer's own constructors
(:mod:`osqueue.state.make`, which check it and name the field, placed under
the item: ``jobs[3].priority``) and submits the ops to the broker through
:class:`~osqueue.broker.inproc.calls.BrokerCalls`, the entry the in-process client
uses too.  The items of a batch are submitted together, so the broker
group-commits them, and each item gets its own result: one bad item fails
alone.  A call fails as a whole only when the request itself is refused or
when every item was refused for a reason that is about the broker, not the
item (not the broker any more, shutting down, overloaded); the client then
retries the call elsewhere or later.

Requests arrive undecoded: a request that is not a valid message is
``INVALID_ARGUMENT`` naming ``request``, never an internal error.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import AsyncIterator, Awaitable, Callable, Sequence
from typing import Any, NoReturn, TypeVar

import grpc
from google.protobuf.message import DecodeError, Message

from osqueue.api import EncodedResult, Job, NewJob
from osqueue.broker.cold.dead import DeadPage
from osqueue.broker.inproc.calls import BrokerCalls
from osqueue.errors import (
    BrokerMoved,
    BrokerUnavailable,
    InvalidInput,
    OsqueueError,
    Overloaded,
    Unauthenticated,
)
from osqueue.server.limits import Admission, Limits, RequestChecker
from osqueue.state import (
    Counted,
    Fail,
    Heartbeat,
    Push,
    PutSchedule,
    QueueSet,
    Release,
    Scheduled,
    SetQueue,
    make,
    validate,
)
from osqueue.state.limits import settings_info
from osqueue.state.schedules import schedule_info
from osqueue.storage.keys import check_key
from osqueue.wire._pb import queue_pb2 as pb
from osqueue.wire.convert import (
    from_pb,
    job_from_ref,
    job_result_to_pb,
    result_from_pb,
    stats_to_pb,
    to_pb,
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
#: Bytes a job adds to a ClaimResponse beyond its payload (generous upper bound).
_JOB_OVERHEAD_BYTES = 1024

Outcomes = Sequence[object]  # per item: a value, None, or the exception it got
#: A job to complete and its result (None: none).
Completion = tuple[Job, EncodedResult | None]


class QueueService:
    """Serves ``osqueue.v1.Queue`` by submitting ops through ``calls``."""

    def __init__(self, calls: BrokerCalls | None, limits: Limits | None = None) -> None:
        self.limits = limits or Limits()
        self.check = RequestChecker(self.limits)
        self.admission = Admission(self.limits)
        self._calls = calls

    def attach(self, calls: BrokerCalls) -> None:
        """Serve ``calls`` from now on (a server may start before its broker does)."""
        self._calls = calls

    @property
    def calls(self) -> BrokerCalls:
        """The broker served; ``BrokerUnavailable`` (UNAVAILABLE) until one is attached."""
        if self._calls is None:
            raise BrokerUnavailable("this broker is not serving yet (starting or standing by)")
        return self._calls

    # ------------------------------------------------------------------ wiring

    def rpc_handler(self) -> Any:
        """The generic handler to add to a ``grpc.aio`` server."""
        unary, stream = self._unary, self._stream
        table = {
            "Push": unary(pb.PushRequest, self.push, pb.PushResponse),
            "Claim": unary(pb.ClaimRequest, self.claim, pb.ClaimResponse),
            "ClaimStream": stream(pb.ClaimRequest, self.claim_stream, pb.ClaimResponse),
            "Heartbeat": unary(pb.JobRefsRequest, self.heartbeat, pb.ResultsResponse),
            "Complete": unary(pb.JobRefsRequest, self.complete, pb.ResultsResponse),
            "Fail": unary(pb.FailRequest, self.fail, pb.ResultsResponse),
            "Release": unary(pb.JobRefsRequest, self.release, pb.ResultsResponse),
            "Cancel": unary(pb.CancelRequest, self.cancel, pb.ResultsResponse),
            "Stats": unary(pb.StatsRequest, self.stats, pb.StatsResponse),
            "RetryDead": unary(pb.DeadRequest, self.retry_dead, pb.DeadResponse),
            "PurgeDead": unary(pb.DeadRequest, self.purge_dead, pb.DeadResponse),
            "Result": unary(pb.ResultRequest, self.result, pb.ResultResponse),
            "Schedule": unary(pb.ScheduleRequest, self.schedule, pb.ScheduleResponse),
            "Unschedule": unary(pb.UnscheduleRequest, self.unschedule, pb.UnscheduleResponse),
            "ListSchedules": unary(
                pb.ListSchedulesRequest, self.list_schedules, pb.ListSchedulesResponse
            ),
            "SetQueue": unary(pb.SetQueueRequest, self.set_queue, pb.SetQueueResponse),
            "ReadmitSegment": unary(pb.ReadmitSegmentRequest, self.readmit, pb.CountResponse),
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
                    self.calls  # noqa: B018 (UNAVAILABLE until a broker is attached)
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
                    self.calls  # noqa: B018 (UNAVAILABLE until a broker is attached)
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
        """Make every item into its op, submit the good ones as one batch; one
        Status per item."""
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
                    "the broker raised an unexpected error",
                    exc_info=outcome,
                    extra={"action": "item_failed", "field": f"{field}[{i}]"},
                )
                statuses[i] = to_status(OsqueueError(f"internal error: {outcome!r}"))
        _raise_if_call_level(outcomes, len(positions) == len(items))
        return statuses

    # ------------------------------------------------------------------ push and claim

    async def push(self, request: pb.PushRequest, context: Context) -> pb.PushResponse:
        statuses = await self._each("jobs", request.jobs, self._push_op, self._push_all)
        return pb.PushResponse(
            results=[
                pb.PushResult(id=job.id, status=status)
                for job, status in zip(request.jobs, statuses, strict=True)
            ]
        )

    def _push_op(self, job: pb.NewJob, field: str) -> Push:
        if not job.id:  # required: a retried push is known by its id
            raise InvalidInput("must not be empty", field=f"{field}.id")
        return make.push(from_pb(job, NewJob), self.limits.max_payload_bytes, field)

    async def _push_all(self, ops: list[Push]) -> Outcomes:
        return await self.calls.push_many(ops)

    def _wait_budget_s(self, wait_s: float, context: Context) -> float:
        """``wait_s``, cut so the answer reaches the client before its deadline."""
        remaining: float | None = context.time_remaining()
        if remaining is None:
            return wait_s
        return max(0.0, min(wait_s, remaining - 0.5))

    async def claim(self, request: pb.ClaimRequest, context: Context) -> pb.ClaimResponse:
        op = self.check.claim(request)
        completed: list[pb.Status] = []
        if request.complete:
            if request.wait_s != 0:
                raise InvalidInput("must be 0 when the call also completes jobs", field="wait_s")
            claimed: list[Job] | None = None

            async def run(completions: list[Completion]) -> Outcomes:
                nonlocal claimed
                jobs, results = _split(completions)
                errors, claimed = await self.calls.complete_and_claim(jobs, results, op)
                return errors

            completed = await self._each("complete", request.complete, self._completion, run)
            jobs = claimed if claimed is not None else await self.calls.claim(op)
        else:
            jobs = await self.calls.claim(op, self._wait_budget_s(request.wait_s, context))
        chunks = self._chunks(jobs)
        if len(chunks) > 1:  # more than one message holds: give the rest back
            await self._release_quietly([job for chunk in chunks[1:] for job in chunk])
        return pb.ClaimResponse(jobs=chunks[0] if chunks else [], completed=completed)

    async def claim_stream(
        self, request: pb.ClaimRequest, context: Context
    ) -> AsyncIterator[pb.ClaimResponse]:
        op = self.check.claim(request)
        if request.complete:
            raise InvalidInput("is for Claim; a stream does not complete jobs", field="complete")
        loop = asyncio.get_running_loop()
        deadline = loop.time() + self._wait_budget_s(request.wait_s, context)
        remaining = op.max_jobs
        while remaining > 0:
            wait = max(0.0, deadline - loop.time())
            jobs = await self.calls.claim(make.claim(op.worker, op.queues, remaining), wait)
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
            chunks[-1].append(to_pb(job, pb.Job))
            size += cost
        return chunks

    async def _release_quietly(self, jobs: Sequence[pb.Job]) -> None:
        answers = await self.calls.submit([Release(j.id, j.token) for j in jobs])
        failed = [j.id for j, a in zip(jobs, answers, strict=True) if isinstance(a, OsqueueError)]
        if failed:
            log.warning(
                "could not give back claimed jobs that did not fit in the answer",
                extra={"action": "release_failed", "jobs": failed},
            )

    # ------------------------------------------------------------------ the holder's calls

    def _ref(self, ref: pb.JobRef, field: str) -> tuple[str, int]:
        return make.ref(ref.id, ref.token, field)

    def _completion(self, ref: pb.JobRef, field: str) -> Completion:
        """A job to complete, with the result its reference carries (if any)."""
        job = job_from_ref(ref)
        self._ref(ref, field)
        if not ref.HasField("result"):
            return job, None
        return job, result_from_pb(ref.result, f"{field}.result")

    async def _submitted(self, ops: Sequence[Any]) -> Outcomes:
        return await self.calls.submit(ops)

    async def heartbeat(self, request: pb.JobRefsRequest, context: Context) -> pb.ResultsResponse:
        def prepare(ref: pb.JobRef, field: str) -> Heartbeat:
            return Heartbeat(*self._ref(ref, field))

        return pb.ResultsResponse(
            results=await self._each("jobs", request.jobs, prepare, self._submitted)
        )

    async def complete(self, request: pb.JobRefsRequest, context: Context) -> pb.ResultsResponse:
        async def run(completions: list[Completion]) -> Outcomes:
            return await self.calls.complete(*_split(completions))

        statuses = await self._each("jobs", request.jobs, self._completion, run)
        return pb.ResultsResponse(results=statuses)

    async def release(self, request: pb.JobRefsRequest, context: Context) -> pb.ResultsResponse:
        def prepare(ref: pb.JobRef, field: str) -> Release:
            return Release(*self._ref(ref, field))

        return pb.ResultsResponse(
            results=await self._each("jobs", request.jobs, prepare, self._submitted)
        )

    async def fail(self, request: pb.FailRequest, context: Context) -> pb.ResultsResponse:
        def prepare(item: pb.FailItem, field: str) -> Fail:
            retry_after_s = self.check.fail_item(item, field)
            return Fail(*self._ref(item.job, f"{field}.job"), item.error, retry_after_s)

        return pb.ResultsResponse(
            results=await self._each("items", request.items, prepare, self._submitted)
        )

    async def cancel(self, request: pb.CancelRequest, context: Context) -> pb.ResultsResponse:
        async def run(ids: list[str]) -> Outcomes:
            calls = self.calls
            return await asyncio.gather(
                *(calls.cancel(make.cancel(i)) for i in ids), return_exceptions=True
            )

        return pb.ResultsResponse(
            results=await self._each("ids", request.ids, self.check.job_id, run)
        )

    # ------------------------------------------------------------------ reads

    async def stats(self, request: pb.StatsRequest, context: Context) -> pb.StatsResponse:
        return stats_to_pb(self.calls.stats())

    async def result(self, request: pb.ResultRequest, context: Context) -> pb.ResultResponse:
        job_id = self.check.job_id(request.id, "id")
        wait_s = self.check.seconds(request.wait_s, "wait_s", validate.MAX_DELAY_S)
        result, value = await self.calls.result(job_id, self._wait_budget_s(wait_s, context))
        return job_result_to_pb(result, value)

    # ------------------------------------------------------------------ administration

    async def retry_dead(self, request: pb.DeadRequest, context: Context) -> pb.DeadResponse:
        return await self._dead(request, retry=True)

    async def purge_dead(self, request: pb.DeadRequest, context: Context) -> pb.DeadResponse:
        return await self._dead(request, retry=False)

    async def _dead(self, request: pb.DeadRequest, *, retry: bool) -> pb.DeadResponse:
        f, pages, passed = self.check.dead(request)
        page = DeadPage(passed)
        count = await self.calls.dead.act(f, retry=retry, max_segments=pages, page=page)
        return pb.DeadResponse(count=count, passed=page.kept, segments_left=page.left)

    async def readmit(
        self, request: pb.ReadmitSegmentRequest, context: Context
    ) -> pb.CountResponse:
        if not request.key:
            raise InvalidInput("name the segment object's key", field="key")
        return pb.CountResponse(count=await self.calls.readmit(check_key(request.key, "key")))

    async def schedule(self, request: pb.ScheduleRequest, context: Context) -> pb.ScheduleResponse:
        op = from_pb(self.check.schedule(request), PutSchedule)
        result = await self.calls.one(op)
        assert isinstance(result, Scheduled)
        return pb.ScheduleResponse(schedule=to_pb(schedule_info(result.schedule), pb.Schedule))

    async def unschedule(
        self, request: pb.UnscheduleRequest, context: Context
    ) -> pb.UnscheduleResponse:
        self.check.text(request.name, "name", self.limits.max_id_chars)
        result = await self.calls.one(make.unschedule(request.name))
        assert isinstance(result, Counted)
        return pb.UnscheduleResponse(removed=result.n > 0)

    async def list_schedules(
        self, request: pb.ListSchedulesRequest, context: Context
    ) -> pb.ListSchedulesResponse:
        infos = self.calls.schedules()
        return pb.ListSchedulesResponse(schedules=[to_pb(i, pb.Schedule) for i in infos])

    async def set_queue(self, request: pb.SetQueueRequest, context: Context) -> pb.SetQueueResponse:
        self.check.queue(request.settings.queue, "queue")
        op = from_pb(request.settings, SetQueue, remove=request.remove)
        result = await self.calls.one(op)
        assert isinstance(result, QueueSet)
        info = settings_info(result.queue, result.settings)
        return pb.SetQueueResponse(settings=to_pb(info, pb.QueueSettings))


# ---------------------------------------------------------------------- helpers


def _split(completions: Sequence[Completion]) -> tuple[list[Job], list[object] | None]:
    """The jobs, and their results (None when no completion carries one)."""
    jobs = [job for job, _ in completions]
    if all(result is None for _, result in completions):
        return jobs, None
    return jobs, [result for _, result in completions]


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
