"""The one entry both the in-process client and the gRPC service submit ops through.

:class:`BrokerCalls` takes the ops of :mod:`osqueue.state.ops`, already made
and checked by :mod:`osqueue.state.make`, and does what the broker must do
around them before answering:

* a push whose payload is above the inline limit has it stored as an object
  under ``payloads/`` first (:mod:`osqueue.broker.objects.payloads`: each upload stays
  out of the payload sweep's reach until its push is answered, and one no job
  will read is deleted);
* a completion's result is encoded, checked and, if large, stored as a result
  object first (:mod:`osqueue.broker.objects.results`);
* a claim may park until a commit makes a job claimable, and its jobs' payload
  objects are read and checked (:mod:`osqueue.broker.inproc.claimed`);
* a cancel finds a job that sits in a segment by reading the segment.

Every answer is the op's own :class:`~osqueue.state.Result` (or a value made
of it); nothing here raises for one op's error except the single-op calls.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Sequence
from typing import TYPE_CHECKING

import msgspec

from osqueue.api import EncodedResult, Job, JobResult, QueueSettings, ScheduleInfo, Stats
from osqueue.broker.cold.dedupe import confirm_pushes
from osqueue.broker.inproc.claimed import ClaimedJobs, raise_if_error
from osqueue.broker.inproc.dead import DeadCalls
from osqueue.errors import NOT_APPLIED, InvalidInput, JobNotFound, OsqueueError
from osqueue.state import (
    Cancel,
    ClaimOp,
    Complete,
    Counted,
    Op,
    Push,
    Pushed,
    Readmit,
    Result,
    StoredJob,
    stats_of,
    validate,
)
from osqueue.state.cold_dead import DEAD_PREFIX
from osqueue.state.dedupe_filter import ReadToConfirm
from osqueue.state.limits import settings_info
from osqueue.state.results import Answer
from osqueue.state.schedules import schedule_info
from osqueue.state.waiting_refs import WAITING_PREFIX

if TYPE_CHECKING:
    from osqueue.broker.inproc.host import BrokerHost


class BrokerCalls:
    """Ops in, answers out, for one broker in this process (see the module docstring)."""

    def __init__(self, broker: BrokerHost) -> None:
        self.broker = broker
        config = broker.config
        #: payloads up to this size go inline in the document
        self.inline_max = config.inline_payload_max_bytes
        self.max_payload_bytes = config.max_payload_bytes
        self._claimed = ClaimedJobs(broker)
        #: dead letters, in the document and in dead segments
        self.dead = DeadCalls(broker)

    @property
    def heartbeat_timeout_s(self) -> float:
        """The broker's heartbeat timeout (workers beat at a third of it)."""
        return self.broker.config.heartbeat_timeout_s

    # -- push ---------------------------------------------------------------------

    async def push(self, op: Push) -> str:
        """Push one job; its id once the write that holds it is durable."""
        payload = op.payload
        if payload is not None and len(payload) <= self.inline_max:  # the common case
            result = await self.broker.add_op(op)
            if type(result) is ReadToConfirm:  # a cold object may hold the id: read it
                (result,) = await confirm_pushes(self.broker, [op], [result])
            if type(result) is Pushed:  # the hot path: one type check, not an isinstance
                return result.id
            raise _as_error(result)
        (answer,) = await self.push_many([op])
        if isinstance(answer, OsqueueError):
            raise answer.with_traceback(None)
        return answer

    async def push_many(self, ops: Sequence[Push | OsqueueError]) -> list[str | OsqueueError]:
        """Push a batch; one answer per op: its id, or the error it got (an error in
        ``ops`` is its own answer).  A job named twice with different contents is
        refused both times."""
        clashing = _clashing_ids(ops)
        prepared: list[Push | OsqueueError] = []
        try:
            for op in ops:
                if isinstance(op, Push) and op.id in clashing:
                    prepared.append(_clash(op.id))
                elif isinstance(op, Push) and op.payload is not None:
                    size = len(op.payload)
                    if size > self.max_payload_bytes:  # the broker's own bound, before I/O
                        prepared.append(_too_large(size, self.max_payload_bytes))
                    elif size > self.inline_max:
                        prepared.append(await self._uploaded(op))
                    else:
                        prepared.append(op)
                else:
                    prepared.append(op)
        except BaseException:  # cancelled mid-upload: nothing was submitted
            self._uploads_answered([op for op in prepared if isinstance(op, Push)])
            raise
        return await self._submit_pushes(prepared)

    async def _uploaded(self, op: Push) -> Push:
        """``op`` with its payload stored as its own object (uploaded here)."""
        assert op.payload is not None
        # until the push is answered (_submit_pushes), the sweep leaves the object alone
        stored = await self.broker.payloads.upload(op.id, op.payload)
        return msgspec.structs.replace(
            op,
            payload=None,
            payload_ref=stored.ref,
            payload_size=stored.size_bytes,
            payload_sha256=stored.sha256,
        )

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
        results = iter(await confirm_pushes(self.broker, real, answers))
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
        if isinstance(result, NOT_APPLIED):
            return True
        # exact type checks: results are final structs, and this is the per-push path
        if type(result) is Pushed and not result.created:
            job = self.broker.document.jobs.get(op.id)
            return job is None or job.payload_ref != op.payload_ref
        return False

    async def _discard_payloads(self, ops: Sequence[Push]) -> None:
        await self.broker.payloads.discard(op.payload_ref for op in ops)

    # -- claim --------------------------------------------------------------------

    async def claim(self, op: ClaimOp, wait_s: float = 0.0) -> list[Job]:
        """Claim (parking up to ``wait_s`` until a commit makes a job claimable);
        the jobs with their payloads."""
        self.broker.heard(op.worker, op.queues)
        if wait_s > 0:
            result = await self.broker.claim(op, wait_s)
        else:
            result = await self.broker.add_op(op)
        return await self._claimed.jobs(result)

    async def complete(
        self, jobs: Sequence[Job], results: Sequence[object] | None = None
    ) -> list[Result]:
        """Complete ``jobs`` (with ``results``, one per job, None for none)."""
        if results is None or all(r is None for r in results):
            return await self.broker.submit_many([Complete(j.id, j.token) for j in jobs])
        return await self._submit_completions(await self.broker.results.completions(jobs, results))

    async def complete_and_claim(
        self, jobs: Sequence[Job], results: Sequence[object] | None, claim: ClaimOp
    ) -> tuple[list[OsqueueError | None], list[Job]]:
        """Complete ``jobs`` and make ``claim`` in one commit."""
        self.broker.heard(claim.worker, claim.queues)
        if results is not None and all(r is None for r in results):
            results = None  # plain completions: nothing to encode or store
        ops = await self.broker.results.completions(jobs, results)
        answers = await self._submit_completions([*ops, claim])
        errors = [r if isinstance(r, OsqueueError) else None for r in answers[:-1]]
        return errors, await self._claimed.jobs(answers[-1])

    async def _submit_completions(self, ops: Sequence[Op | OsqueueError]) -> list[Result]:
        broker = self.broker
        return await broker.results.submit(ops, broker.submit_many, lambda: broker.document)

    # -- any other op -------------------------------------------------------------

    async def submit(self, ops: Sequence[Op]) -> list[Result]:
        """Ops that need nothing around them (heartbeat, fail, release, dead letters,
        schedules, settings), committed together; one answer each."""
        return await self.broker.submit_many(ops)

    async def one(self, op: Op) -> Result:
        """One such op's answer, its error raised."""
        return raise_if_error(await self.broker.add_op(op))

    def add(self, op: Op) -> asyncio.Future[Result]:
        """One such op, as a future (the per-job path: no coroutine of its own)."""
        return self.broker.add_op(op)

    async def cancel(self, op: Cancel) -> Result:
        """Cancel a live job, where it sits in a segment too; its error raised."""
        result = await self.broker.add_op(op)
        doc = self.broker.document
        if isinstance(result, JobNotFound) and (doc.segments or doc.waiting_cold or doc.delayed):
            result = await self._cancel_spilled(op.job_id, result)
        return raise_if_error(result)

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

    async def readmit(self, key: str) -> int:
        """Put the set-aside segment ``key`` back once its object checks out."""
        segments = self.broker.segments
        if key.startswith(DEAD_PREFIX):  # a dead segment (osqueue.broker.cold.dead)
            await segments.dead.check_restored(key)
        elif key.startswith(WAITING_PREFIX):  # waiting children (osqueue.broker.cold.waiting)
            await segments.waiting.check_restored(key)
        else:
            await segments.check_restored(key)
        result = await self.one(Readmit(key))
        assert isinstance(result, Counted)
        return result.n

    # -- reads --------------------------------------------------------------------

    async def result(
        self, job_id: str, wait_s: float = 0.0
    ) -> tuple[JobResult, EncodedResult | None]:
        """How ``job_id`` finished (waiting up to ``wait_s``), its value as stored."""
        validate.job_id(job_id, "job_id")
        found = await self.broker.finished(job_id, wait_s)
        if found is None:
            raise JobNotFound(
                f"no job {job_id}: never pushed, finished longer than its result_ttl_s ago, "
                "or kept no answer (a job finishing without a result keeps one only with a "
                "result_ttl_s set on its push, its queue or the broker; 0 keeps none)"
            )
        result = msgspec.structs.replace(found.result, value=None)
        data = found.data
        if data is None:
            return result, None
        if data.value is not None:
            return result, EncodedResult(data.kind, data.value)
        return result, await self._read(job_id, found)

    async def _read(self, job_id: str, found: Answer) -> EncodedResult:
        assert found.data is not None
        encoded = await self.broker.results.read(found.data)
        if encoded is None:
            raise JobNotFound(f"the result object of job {job_id} is gone (expired)")
        return encoded

    def stats(self) -> Stats:
        return stats_of(self.broker.document, self.broker.clock.now())

    def schedules(self) -> list[ScheduleInfo]:
        """Every schedule, by name."""
        doc = self.broker.document
        return [schedule_info(s) for s in sorted(doc.schedules, key=lambda s: s.name)]

    def queue_settings(self) -> list[QueueSettings]:
        """Every queue that has settings in force, by name."""
        doc = self.broker.document
        return [settings_info(q, s) for q, s in sorted(doc.queue_settings.items())]

    def jobs(self, queue: str | None = None, status: str | None = None) -> list[StoredJob]:
        """The document's jobs, optionally filtered (a snapshot, no commit)."""
        return [
            j
            for j in self.broker.document.jobs.values()
            if (queue is None or j.queue == queue) and (status is None or j.status == status)
        ]


def _as_error(result: Result) -> OsqueueError:
    if isinstance(result, OsqueueError):
        return result
    return InvalidInput(f"unexpected result {type(result).__name__} for a push", field="op")


def _too_large(size: int, limit: int) -> InvalidInput:
    return InvalidInput(f"{size} bytes is above the limit of {limit}", field="payload")


def _clash(job_id: str) -> InvalidInput:
    return InvalidInput(
        f"job {job_id!r} is named twice in this push with different payloads or options; "
        "neither is pushed",
        field="id",
    )


def _clashing_ids(ops: Sequence[Push | OsqueueError]) -> set[str]:
    """The ids a push names twice with different jobs (payload or any field): which
    one the caller meant is unknown, so both are refused.  The same job twice is a
    repeat, applied once as any repeat is.  (An id made up by a client is never
    named twice.)"""
    first: dict[str, Push] = {}
    clashing: set[str] = set()
    for op in ops:
        if isinstance(op, Push) and op.dedupe:
            seen = first.setdefault(op.id, op)
            if seen is not op and seen != op:
                clashing.add(op.id)
    return clashing
