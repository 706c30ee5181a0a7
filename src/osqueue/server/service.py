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
from typing import Any, NoReturn, TypeVar

import grpc
from google.protobuf.message import DecodeError, Message

from osqueue.client.api import Job, NewJob, QueueClient, Stats
from osqueue.errors import (
    BrokerUnavailable,
    InvalidInput,
    NotBroker,
    OsqueueError,
    ResourceExhausted,
    ShuttingDown,
    Unauthenticated,
)
from osqueue.server._pb import queue_pb2 as pb
from osqueue.server.limits import Admission, Limits, RequestChecker
from osqueue.server.status import OK, grpc_code, to_status, trailers

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
_CALL_LEVEL: tuple[type[OsqueueError], ...] = (
    NotBroker,
    ShuttingDown,
    BrokerUnavailable,
    ResourceExhausted,
    Unauthenticated,
)
#: Bytes a job adds to a ClaimResponse beyond its payload (generous upper bound).
_JOB_OVERHEAD_BYTES = 1024


def job_to_pb(job: Job) -> pb.Job:
    msg = pb.Job(
        id=job.id,
        queue=job.queue,
        payload=job.payload,
        attempts=job.attempts,
        max_attempts=job.max_attempts,
        token=job.token,
        priority=job.priority,
        created_at=job.created_at,
    )
    if job.key is not None:
        msg.key = job.key
    return msg


def job_from_ref(ref: pb.JobRef) -> Job:
    """A :class:`Job` that names a claim: its id and token (all later calls use)."""
    return Job(id=ref.id, queue="", payload=b"", attempts=0, max_attempts=1, token=ref.token)


def stats_to_pb(stats: Stats) -> pb.StatsResponse:
    msg = pb.StatsResponse(
        version=stats.version,
        pushed=stats.pushed,
        completed=stats.completed,
        dead=stats.dead,
        claimed=stats.claimed,
        broker_epoch=stats.broker_epoch,
        document_bytes=stats.document_bytes,
    )
    for name, q in stats.queues.items():
        entry = msg.queues[name]
        entry.depth, entry.claimed, entry.dead, entry.delayed = (
            q.depth,
            q.claimed,
            q.dead,
            q.delayed,
        )
        if q.oldest_age_s is not None:
            entry.oldest_age_s = q.oldest_age_s
    if stats.broker_id is not None:
        msg.broker_id = stats.broker_id
    if stats.broker_address is not None:
        msg.broker_address = stats.broker_address
    if stats.lease_until is not None:
        msg.lease_until = stats.lease_until
    return msg


class QueueService:
    """Serves ``osqueue.v1.Queue`` by calling ``client``."""

    def __init__(self, client: QueueClient, limits: Limits | None = None) -> None:
        self.client = client
        self.limits = limits or Limits()
        self.check = RequestChecker(self.limits)
        self.admission = Admission(self.limits)

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
        call: Callable[[Prepared], Awaitable[object]],
    ) -> list[pb.Status]:
        """Check, then run, every item; one Status per item in order."""
        self.check.batch(len(items), field)
        statuses: list[pb.Status] = [OK] * len(items)
        runs: list[tuple[int, Awaitable[object]]] = []
        for i, item in enumerate(items):
            try:
                prepared = prepare(item, f"{field}[{i}]")
            except InvalidInput as exc:
                statuses[i] = to_status(exc)
            else:
                runs.append((i, call(prepared)))
        outcomes = await asyncio.gather(*(run for _, run in runs), return_exceptions=True)
        for (i, _), outcome in zip(runs, outcomes, strict=True):
            if isinstance(outcome, OsqueueError):
                statuses[i] = to_status(outcome, field_prefix=f"{field}[{i}]")
            elif isinstance(outcome, BaseException):
                log.error(
                    "the queue client raised an unexpected error",
                    exc_info=outcome,
                    extra={"action": "item_failed", "field": f"{field}[{i}]"},
                )
                statuses[i] = to_status(OsqueueError(f"internal error: {outcome!r}"))
        _raise_if_call_level(outcomes, len(runs) == len(items))
        return statuses

    # ------------------------------------------------------------------ RPCs

    async def push(self, request: pb.PushRequest, context: Context) -> pb.PushResponse:
        statuses = await self._each("jobs", request.jobs, self.check.new_job, self._push_one)
        return pb.PushResponse(
            results=[
                pb.PushResult(id=job.id, status=status)
                for job, status in zip(request.jobs, statuses, strict=True)
            ]
        )

    async def _push_one(self, job: NewJob) -> str:
        return await self.client.push(
            job.payload,
            queue=job.queue,
            priority=job.priority,
            delay_s=job.delay_s,
            key=job.key,
            max_attempts=job.max_attempts,
            id=job.id,
        )

    def _wait_budget_s(self, wait_s: float, context: Context) -> float:
        """``wait_s``, cut so the answer reaches the client before its deadline."""
        remaining: float | None = context.time_remaining()
        if remaining is None:
            return wait_s
        return max(0.0, min(wait_s, remaining - 0.5))

    async def claim(self, request: pb.ClaimRequest, context: Context) -> pb.ClaimResponse:
        self.check.claim(request)
        jobs = await self.client.claim(
            request.worker,
            list(request.queues),
            max_jobs=request.max_jobs,
            wait_s=self._wait_budget_s(request.wait_s, context),
        )
        chunks = self._chunks(jobs)
        if len(chunks) > 1:  # more than one message holds: give the rest back
            await self._release_quietly([job for chunk in chunks[1:] for job in chunk])
        return pb.ClaimResponse(jobs=chunks[0] if chunks else [])

    async def claim_stream(
        self, request: pb.ClaimRequest, context: Context
    ) -> AsyncIterator[pb.ClaimResponse]:
        self.check.claim(request)
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

    async def heartbeat(self, request: pb.JobRefsRequest, context: Context) -> pb.ResultsResponse:
        statuses = await self._each("jobs", request.jobs, self._ref, self.client.heartbeat)
        return pb.ResultsResponse(results=statuses)

    async def complete(self, request: pb.JobRefsRequest, context: Context) -> pb.ResultsResponse:
        statuses = await self._each("jobs", request.jobs, self._ref, self.client.complete)
        return pb.ResultsResponse(results=statuses)

    async def release(self, request: pb.JobRefsRequest, context: Context) -> pb.ResultsResponse:
        statuses = await self._each("jobs", request.jobs, self._ref, self.client.release)
        return pb.ResultsResponse(results=statuses)

    def _fail_item(self, item: pb.FailItem, field: str) -> tuple[Job, str, float | None]:
        retry_after_s = self.check.fail_item(item, field)
        return job_from_ref(item.job), item.error, retry_after_s

    async def _fail_one(self, prepared: tuple[Job, str, float | None]) -> None:
        job, error, retry_after_s = prepared
        await self.client.fail(job, error=error, retry_after_s=retry_after_s)

    async def fail(self, request: pb.FailRequest, context: Context) -> pb.ResultsResponse:
        statuses = await self._each("items", request.items, self._fail_item, self._fail_one)
        return pb.ResultsResponse(results=statuses)

    async def cancel(self, request: pb.CancelRequest, context: Context) -> pb.ResultsResponse:
        statuses = await self._each("ids", request.ids, self.check.job_id, self.client.cancel)
        return pb.ResultsResponse(results=statuses)

    async def stats(self, request: pb.StatsRequest, context: Context) -> pb.StatsResponse:
        return stats_to_pb(await self.client.stats())


# ---------------------------------------------------------------------- helpers


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
