"""The in-process client: ``broker.client()``.

Turns calls into typed ops, submits them to the broker's next group commit and
raises the op's own error.  Payloads above the broker's inline limit are stored
as objects under ``payloads/`` before the push is submitted (and read back on
claim), so the document stays small (see :mod:`osqueue.broker.objects.payloads`: each
upload stays out of the payload sweep's reach until its push is answered).

The gRPC service serves remote clients through this client too, so every push
reaches the document here: checked by the document's rules when the broker
applies it (:func:`osqueue.state.validate.new_job`), committed by the broker's
group commit, and answered once that write is durable.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable, Sequence
from typing import TYPE_CHECKING, Unpack

import msgspec

from osqueue.api import EncodedResult, Job, JobResult, NewJob, PushOptions, Stats
from osqueue.broker.inproc.claimed import ClaimedJobs, raise_if_error
from osqueue.broker.inproc.dead import DeadCalls
from osqueue.broker.inproc.scheduling import SchedulingCalls
from osqueue.broker.inproc.segments import SegmentCalls
from osqueue.errors import (
    DuplicateKey,
    InvalidInput,
    JobNotFound,
    OsqueueError,
    Overloaded,
    QueueFull,
    ShuttingDown,
)
from osqueue.ids import new_id
from osqueue.state import (
    Cancel,
    ClaimOp,
    Complete,
    Fail,
    Heartbeat,
    Ok,
    Op,
    Push,
    Pushed,
    Release,
    Result,
    StoredJob,
    stats_of,
    validate,
)
from osqueue.state.results import Answer

if TYPE_CHECKING:
    from osqueue.broker.inproc.host import BrokerHost

log = logging.getLogger(__name__)


class LocalClient(SchedulingCalls, SegmentCalls, DeadCalls):
    """A :class:`~osqueue.api.QueueClient` talking to a broker in this process (and
    :class:`~osqueue.api.Scheduling`: periodic jobs and queue settings)."""

    def __init__(self, broker: BrokerHost) -> None:
        self.broker = broker
        config = broker.config
        #: payloads up to this size go inline (and within max_payload_bytes)
        self._inline_max = min(config.inline_payload_max_bytes, config.max_payload_bytes)
        #: a claim's answer made into the jobs handlers get (payload objects read)
        self._claimed = ClaimedJobs(broker)

    @property
    def heartbeat_timeout_s(self) -> float:
        """The broker's heartbeat timeout (workers beat at a third of it)."""
        return self.broker.config.heartbeat_timeout_s

    # -- push ---------------------------------------------------------------------

    async def _push_op(self, job: NewJob) -> Push:
        op = self._push_inline(job)
        return op if op.payload is not None else await self._uploaded(op, job)

    def _push_inline(self, job: NewJob) -> Push:
        """``job``'s ``Push``, its payload inline if it fits (no I/O: a batch of them
        needs no await per job); one too large for that has ``payload`` None and
        goes through :meth:`_uploaded`."""
        payload = job.payload
        if type(payload) is not bytes:
            if not isinstance(payload, bytearray | memoryview):
                raise InvalidInput(f"must be bytes, not {type(payload).__name__}", field="payload")
            payload = bytes(payload)
        size = len(payload)
        config = self.broker.config
        if size > config.max_payload_bytes:
            raise InvalidInput(
                f"{size} bytes is above the limit of {config.max_payload_bytes}",
                field="payload",
            )
        after = job.after
        # positional, in Push's field order (the per-job path of a large push_many)
        return Push(
            job.id or new_id(),
            payload if size <= config.inline_payload_max_bytes else None,
            job.queue,
            job.priority,
            job.delay_s,
            job.key,
            job.max_attempts,
            None,  # payload_ref: set by _uploaded
            0,  # payload_size
            None,  # payload_sha256
            bool(job.id),  # dedupe: a caller-chosen id may be sent again: keep a tombstone
            job.group,
            after if type(after) is tuple else tuple(after),
            job.on_parent_failure,
            job.result_ttl_s,
        )

    async def _uploaded(self, op: Push, job: NewJob) -> Push:
        """``op`` with ``job``'s payload stored as its own object (uploaded here)."""
        # until the push is answered (_submit_pushes), the sweep leaves the object alone
        stored = await self.broker.payloads.upload(op.id, bytes(job.payload))
        return msgspec.structs.replace(
            op, payload_ref=stored.ref, payload_size=stored.size_bytes, payload_sha256=stored.sha256
        )

    async def push_results(self, jobs: Sequence[NewJob]) -> list[str | OsqueueError]:
        """Push a batch; one result per job: its id, or the error that job got."""
        ops: list[Push | OsqueueError] = []
        clashing = _clashing_ids(jobs)
        try:
            for job in jobs:
                try:
                    if job.id in clashing:
                        raise _clash(job.id)
                    op = self._push_inline(job)
                    ops.append(op if op.payload is not None else await self._uploaded(op, job))
                except OsqueueError as exc:
                    ops.append(exc)
        except BaseException:  # cancelled mid-upload: nothing was submitted
            self._uploads_answered([op for op in ops if isinstance(op, Push)])
            raise
        return await self._submit_pushes(ops)

    async def _submit_pushes(self, ops: Sequence[Push | OsqueueError]) -> list[str | OsqueueError]:
        real = [op for op in ops if isinstance(op, Push)]
        answered: Awaitable[list[Result]] = self.broker.submit_many(real)
        if any(op.payload_ref is not None for op in real):
            # The uploads stay out of the sweep's reach until the broker answers, even
            # if this caller is cancelled first (its ops are committed all the same).
            submitted = asyncio.ensure_future(answered)
            submitted.add_done_callback(lambda _: self._uploads_answered(real))
            answered = asyncio.shield(submitted)
        try:
            answers = await answered
        except OsqueueError:  # refused before anything was queued: none was applied
            await self._discard_payloads(real)
            raise
        results = iter(answers)
        out: list[str | OsqueueError] = []
        unused: list[Push] = []
        for op in ops:
            if isinstance(op, OsqueueError):
                out.append(op)
                continue
            result = next(results)
            out.append(result.id if isinstance(result, Pushed) else _as_error(result))
            if op.payload_ref is not None and self._payload_unused(op, result):
                unused.append(op)
        await self._discard_payloads(unused)
        return out

    def _uploads_answered(self, ops: Sequence[Push]) -> None:
        self.broker.payloads.answered(op.payload_ref for op in ops)

    def _payload_unused(self, op: Push, result: Result) -> bool:
        """No job will ever read this push's payload object: the push was refused, or
        it repeated a job that exists (with the object of an earlier upload) or has
        already left the document.  An outcome that is not known (the broker stopped
        mid-write) keeps its object."""
        if isinstance(result, _NOT_APPLIED):
            return True
        # exact type checks: results are final structs, and this is the per-push path
        if type(result) is Pushed and not result.created:
            job = self.broker.document.jobs.get(op.id)
            return job is None or job.payload_ref != op.payload_ref
        return False

    async def _discard_payloads(self, ops: Sequence[Push]) -> None:
        await self.broker.payloads.discard(op.payload_ref for op in ops)

    async def push_many(self, jobs: Sequence[NewJob]) -> list[str]:
        """Push a batch; raises the first job's error (the others are committed)."""
        out: list[str] = []
        for result in await self.push_results(jobs):
            if isinstance(result, OsqueueError):
                raise result.with_traceback(None)
            out.append(result)
        return out

    async def push(self, payload: bytes, **options: Unpack[PushOptions]) -> str:
        job = NewJob(payload, **options)
        if type(payload) is bytes and len(payload) <= self._inline_max:  # the common case
            # An id made up here is known to nobody else, so this push is never re-sent
            # and its job needs no dedupe tombstone; a caller's id may be sent again.
            op = Push(
                job.id or new_id(),
                payload,
                job.queue,
                job.priority,
                job.delay_s,
                job.key,
                job.max_attempts,
                dedupe=bool(job.id),
                group=job.group,
                after=job.after,
                on_parent_failure=job.on_parent_failure,
                result_ttl_s=job.result_ttl_s,
            )
        else:
            op = await self._push_op(job)
        if op.payload_ref is not None:  # the slow path: an object under payloads/
            (answer,) = await self._submit_pushes([op])
            if isinstance(answer, OsqueueError):
                raise answer.with_traceback(None)
            return answer
        result = await self.broker.add_op(op)
        if type(result) is Pushed:  # the hot path: one type check, not an isinstance
            return result.id
        raise _as_error(result)

    # -- claim --------------------------------------------------------------------

    async def claim(
        self,
        worker: str,
        queues: Sequence[str] = ("default",),
        *,
        max_jobs: int = 1,
        wait_s: float = 0.0,
    ) -> list[Job]:
        if type(queues) is not tuple:  # a tuple (the worker's) is used as it is
            queues = (queues,) if isinstance(queues, str) else tuple(queues)
        op = ClaimOp(worker, queues, max_jobs)
        self.broker.heard(worker, queues)
        if type(wait_s) is not float or wait_s != 0.0:  # the default needs no check
            wait_s = validate.seconds(wait_s, "wait_s") or 0.0
        if wait_s > 0:  # parks until a commit makes a job claimable
            result = await self.broker.claim(op, wait_s)
        else:
            result = await self.broker.add_op(op)
        return await self._claimed.jobs(result)

    async def complete_and_claim(
        self,
        jobs: Sequence[Job],
        worker: str,
        queues: Sequence[str] = ("default",),
        *,
        max_jobs: int = 1,
        results: Sequence[object] | None = None,
    ) -> tuple[list[OsqueueError | None], list[Job]]:
        """Complete ``jobs`` and claim up to ``max_jobs`` in one commit (see
        :class:`~osqueue.api.CompletesAndClaims`)."""
        queues = (queues,) if isinstance(queues, str) else tuple(queues)
        # Checked first, so the claim can only fail with the whole commit.
        validate.worker_name(worker)
        validate.queue_names(queues)
        validate.count(max_jobs, "max_jobs", maximum=validate.MAX_CLAIM)
        self.broker.heard(worker, queues)
        ops = await self.broker.results.completions(jobs, results)
        answers = await self._submit_completions([*ops, ClaimOp(worker, queues, max_jobs)])
        errors = [r if isinstance(r, OsqueueError) else None for r in answers[:-1]]
        return errors, await self._claimed.jobs(answers[-1])

    # -- the holder's calls -------------------------------------------------------

    async def heartbeat(self, job: Job) -> None:
        raise_if_error(await self.broker.add_op(Heartbeat(job.id, job.token)))

    async def complete(self, job: Job, *, result: object = None) -> None:
        if result is None:  # the common case: one op, no upload
            raise_if_error(await self.broker.add_op(Complete(job.id, job.token)))
            return
        (op,) = await self.broker.results.completions([job], [result])
        (answer,) = await self._submit_completions([op])
        raise_if_error(answer)

    async def fail(self, job: Job, *, error: str = "", retry_after_s: float | None = None) -> None:
        raise_if_error(await self.broker.add_op(Fail(job.id, job.token, error, retry_after_s)))

    async def release(self, job: Job) -> None:
        raise_if_error(await self.broker.add_op(Release(job.id, job.token)))

    async def heartbeat_many(self, jobs: Sequence[Job]) -> list[OsqueueError | None]:
        results = await self.broker.submit_many([Heartbeat(j.id, j.token) for j in jobs])
        return [r if isinstance(r, OsqueueError) else None for r in results]

    async def complete_many(
        self, jobs: Sequence[Job], results: Sequence[object] | None = None
    ) -> list[OsqueueError | None]:
        """Complete ``jobs`` (with ``results``, one per job, None for none)."""
        if results is None or all(r is None for r in results):
            answers = await self.broker.submit_many([Complete(j.id, j.token) for j in jobs])
        else:
            answers = await self._submit_completions(
                await self.broker.results.completions(jobs, results)
            )
        return [r if isinstance(r, OsqueueError) else None for r in answers]

    # -- results --------------------------------------------------------------------

    async def _submit_completions(self, ops: Sequence[Op | OsqueueError]) -> list[Result]:
        broker = self.broker
        return await broker.results.submit(ops, broker.submit_many, lambda: broker.document)

    async def result(self, job_id: str, *, wait_s: float = 0.0) -> JobResult:
        """How ``job_id`` finished (see :meth:`osqueue.api.QueueClient.result`)."""
        found = await self._finished(job_id, wait_s)
        if not found.unread:
            return found.result
        encoded = await self._read(job_id, found)
        return msgspec.structs.replace(found.result, value=encoded.decode())

    async def encoded_result(
        self, job_id: str, *, wait_s: float = 0.0
    ) -> tuple[JobResult, EncodedResult | None]:
        """:meth:`result`, with the value as stored (encoded) instead of decoded (the
        gRPC service sends it on as it is)."""
        found = await self._finished(job_id, wait_s)
        result = msgspec.structs.replace(found.result, value=None)
        data = found.data
        if data is None:
            return result, None
        if data.value is not None:
            return result, EncodedResult(data.kind, data.value)
        return result, await self._read(job_id, found)

    async def _finished(self, job_id: str, wait_s: float) -> Answer:
        validate.job_id(job_id, "job_id")
        wait = validate.seconds(wait_s, "wait_s") or 0.0
        found = await self.broker.finished(job_id, wait)
        if found is None:
            raise JobNotFound(
                f"no job {job_id}: never pushed, finished longer than its result_ttl_s ago, "
                "or kept no answer (a job finishing without a result keeps one only with a "
                "result_ttl_s set on its push, its queue or the broker; 0 keeps none)"
            )
        return found

    async def _read(self, job_id: str, found: Answer) -> EncodedResult:
        assert found.data is not None
        encoded = await self.broker.results.read(found.data)
        if encoded is None:
            raise JobNotFound(f"the result object of job {job_id} is gone (expired)")
        return encoded

    # -- administration -----------------------------------------------------------

    async def cancel(self, job_id: str) -> None:
        result = await self.broker.add_op(Cancel(job_id))
        doc = self.broker.document
        if isinstance(result, JobNotFound) and (doc.segments or doc.waiting_cold):
            result = await self._cancel_spilled(job_id, result)
        raise_if_error(result)

    async def _cancel_spilled(self, job_id: str, missing: Result) -> Result:
        """Cancel ``job_id`` where it sits in a segment (found by reading its
        candidates); a load may bring it back meanwhile, so look again a few times."""
        result = missing
        for _ in range(3):
            op = await self.broker.segments.locate(job_id)
            if op is None:
                if job_id not in self.broker.document.jobs:
                    return result  # nowhere: JobNotFound
                op = Cancel(job_id)  # loaded since
            result = await self.broker.add_op(op)
            if not isinstance(result, JobNotFound):
                return result
        return result

    async def jobs(self, queue: str | None = None, status: str | None = None) -> list[StoredJob]:
        """The document's jobs, optionally filtered (a snapshot, no commit)."""
        return [
            j
            for j in self.broker.document.jobs.values()
            if (queue is None or j.queue == queue) and (status is None or j.status == status)
        ]

    async def stats(self) -> Stats:
        return stats_of(self.broker.document, self.broker.clock.now())

    async def close(self) -> None:
        return None


#: Errors that mean the push was not applied (refused before or by its commit).
_NOT_APPLIED = (InvalidInput, QueueFull, DuplicateKey, Overloaded, ShuttingDown)


def _as_error(result: Result) -> OsqueueError:
    if isinstance(result, OsqueueError):
        return result
    if isinstance(result, Ok):
        return InvalidInput("unexpected result for a push", field="op")
    return InvalidInput(f"unexpected result {type(result).__name__} for a push", field="op")


def _clash(job_id: str) -> InvalidInput:
    return InvalidInput(
        f"job {job_id!r} is named twice in this push with different payloads or options; "
        "neither is pushed",
        field="id",
    )


def _clashing_ids(jobs: Sequence[NewJob]) -> set[str]:
    """The ids a push names twice with different jobs (payload or any field): which
    one the caller meant is unknown, so both are refused.  The same job twice is a
    repeat, applied once as any repeat is."""
    first: dict[str, NewJob] = {}
    clashing: set[str] = set()
    for job in jobs:
        if job.id:
            seen = first.setdefault(job.id, job)
            if seen is not job and seen != job:
                clashing.add(job.id)
    return clashing
