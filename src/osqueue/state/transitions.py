"""Every change to the queue document, as pure functions.

``apply(doc, ops, now, policy)`` applies a batch in order, then sweeps (stale
claims are reclaimed, old dedupe tombstones dropped), bumps ``version`` by one
and returns the new document with one result per op.  One bad op fails alone:
each op is validated before it changes anything, and its error becomes its
result.  No I/O, no clock: ``now`` is passed in.

Deep backlogs (:mod:`osqueue.state.segments`): a claim stops at the first segment in
claim order not loaded yet and reports its stream in :attr:`Transition.starved`;
``Spill``, ``Load``, a cancel in a segment: :mod:`.spill`; ``Compact``: :mod:`.compaction`;
waiting children's: :mod:`.cold_waiting`."""

from __future__ import annotations

import math
from collections import defaultdict
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field
from typing import Any

import msgspec

import osqueue.state.compaction as compaction
import osqueue.state.dedupe_filter as dedupe_filter
from osqueue.api import FinishedStatus
from osqueue.backoff import Backoff
from osqueue.errors import (
    DuplicateKey,
    InvalidInput,
    JobNotFound,
    LeaseLost,
    OsqueueError,
)
from osqueue.state import cold_waiting, deps, finished_objects, scheduling, spill, sweep, validate
from osqueue.state import results as finishing
from osqueue.state.admission import SizeBound
from osqueue.state.cold_dead import DEAD_OPS, requeued_here
from osqueue.state.delayed_ops import DELAYED_OPS, key_holder
from osqueue.state.document import Document, encode_job, totals
from osqueue.state.history import record, sampled
from osqueue.state.limits import Gate, gated
from osqueue.state.model import BrokerInfo, Claim, StoredJob, to_datetime
from osqueue.state.ops import (
    Cancel,
    Claimed,
    ClaimOp,
    Complete,
    Counted,
    Fail,
    Heartbeat,
    Load,
    MarkArchived,
    Ok,
    Op,
    OpResult,
    Policy,
    PurgeDead,
    Push,
    Pushed,
    PutSchedule,
    Readmit,
    Release,
    Removed,
    RemoveSchedule,
    RestartHeartbeats,
    Result,
    RetryDead,
    SetAside,
    SetQueue,
    Spill,
)
from osqueue.state.order import behind, next_in_order
from osqueue.state.segments import Stream
from osqueue.state.stats import depths

_replace = msgspec.structs.replace
_OK = Ok()

#: What a new known queue adds to the header besides its name (checked to need no
#: escapes): ``"":[1,0,0,0],``
_KNOWN_QUEUE_BYTES = 13


@dataclass(slots=True)
class Transition:
    """A commit's new document, its per-op results, and what the broker must follow up."""

    doc: Document
    results: list[Result]
    #: jobs that became ``done`` in this version (their archive object is due)
    completed: list[StoredJob] = field(default_factory=list)
    #: jobs that left the document (payload objects to delete)
    removed: list[StoredJob] = field(default_factory=list)
    #: ids reclaimed by the heartbeat sweep
    reclaimed: list[str] = field(default_factory=list)
    #: streams whose claims stopped at a segment not loaded yet (load them now)
    starved: set[Stream] = field(default_factory=set)
    #: segment objects no reference names any more (fully loaded, or compacted)
    dropped_segments: list[str] = field(default_factory=list)
    #: ids of jobs that finished in this version: done, dead or cancelled (their
    #: ``result()`` long polls are answered now)
    finished: list[str] = field(default_factory=list)
    #: jobs claimed in this version (the segment manager sizes its head by them)
    claimed_jobs: list[StoredJob] = field(default_factory=list)


def _check_digest(op: Push) -> None:
    """A push's recorded payload digest: for a payload object, 64 lowercase hex digits."""
    if op.payload_ref is None:
        raise InvalidInput("a digest is recorded for a payload object only", field="payload_sha256")
    digest = op.payload_sha256
    if not isinstance(digest, str) or len(digest) != 64 or digest.strip(_HEX):
        raise InvalidInput(f"{digest!r} is not a hex SHA-256", field="payload_sha256")


_HEX = "0123456789abcdef"


def _payload_size(op: Push, policy: Policy) -> int:
    """A push's payload, checked against the policy's limits; its size in bytes."""
    size = len(op.payload) if op.payload is not None else op.payload_size
    if size > policy.max_payload_bytes:
        raise InvalidInput(
            f"{size} bytes is above the limit of {policy.max_payload_bytes}", field="payload"
        )
    if op.payload is not None and len(op.payload) > policy.max_inline_payload_bytes:
        raise InvalidInput(
            f"{len(op.payload)} bytes is above the inline limit of "
            f"{policy.max_inline_payload_bytes}; store it as a payload object",
            field="payload",
        )
    if (op.payload is None) == (op.payload_ref is None):
        raise InvalidInput("a job needs exactly one of payload and payload_ref", field="payload")
    if op.payload_sha256 is not None:
        _check_digest(op)
    return size


def backoff_s(attempts: int, policy: Policy) -> float:
    """How long a job waits after its ``attempts``-th failed attempt (the one backoff
    policy, :class:`~osqueue.backoff.Backoff`, with the policy's base and cap)."""
    if attempts <= 0:
        return 0.0
    return Backoff(policy.backoff_base_s, policy.backoff_cap_s).delay_s(attempts - 1)


class _Tx:
    """One commit's working state: applies ops to a document it owns."""

    def __init__(self, doc: Document, now: float, policy: Policy) -> None:
        self.doc = doc
        self.now = now
        self.now_dt = to_datetime(now)
        self.policy = policy
        self.version = doc.version + 1
        self.stats: dict[str, int] = defaultdict(int)  # what this version adds to doc.stats
        self.completed: list[StoredJob] = []
        self.removed: list[StoredJob] = []
        self.reclaimed: list[str] = []
        self.starved: set[Stream] = set()
        self.dropped_segments: list[str] = []
        self.claimed_jobs: list[StoredJob] = []
        #: the document's size for its pushes, kept from one to the next
        self.size = SizeBound(doc, policy)
        #: jobs that finished in this version (done, dead, cancelled), in order:
        #: their waiting children are settled after the sweep
        #: (:mod:`osqueue.state.deps`) and their ``result()`` long polls answered
        #: (:attr:`Transition.finished`); :func:`osqueue.state.results.record`
        #: appends to it
        self.ended: list[tuple[str, FinishedStatus]] = []

    # -- helpers ------------------------------------------------------------------

    def _held(self, job_id: str, token: int) -> StoredJob:
        if type(job_id) is str and type(token) is int:  # the fast path: held as claimed
            job = self.doc.jobs.get(job_id)
            if job is not None and job.status == "claimed":
                claim = job.claim
                if claim is not None and claim.token == token:
                    return job
        validate.job_id(job_id, "job_id")
        validate.token(token)
        job = self.doc.jobs.get(job_id)
        if job is None or job.status != "claimed" or job.claim is None:
            raise LeaseLost(f"job {job_id} is no longer claimed under token {token}")
        if job.claim.token != token:
            raise LeaseLost(
                f"job {job_id}: token {token} is stale (the job was reclaimed; "
                f"current token {job.claim.token})"
            )
        return job

    def _leave(self, job: StoredJob) -> None:
        """Remove a job from the document, keeping a dedupe tombstone for its id (how
        a finished job ended was recorded when it finished: :func:`finishing.record`)."""
        self.doc.drop_job(job.id)
        self.removed.append(job)
        if job.dedupe and job.created_at.timestamp() >= self.now - self.policy.dedupe_window_s:
            self.doc.add_tombstone(job.id, job.created_at)

    # deps.Host: what settling a waiting job's parents needs
    def put_job(self, job: StoredJob) -> None:
        self._put(job)

    def cancel_child(self, job: StoredJob) -> None:
        finishing.record(self, job, "cancelled")
        self._leave(job)
        self.stats["cancelled"] += 1

    def _requeue(self, job: StoredJob, error: str, retry_after_s: float | None) -> StoredJob:
        if job.attempts >= job.max_attempts:
            self.stats["dead"] += 1
            totals(self.doc, job.queue).dead += 1
            finishing.record(self, job, "dead", error=error)
            return _replace(
                job, status="dead", claim=None, run_at=None, last_error=error, done_at=self.now_dt
            )
        delay = retry_after_s if retry_after_s is not None else backoff_s(job.attempts, self.policy)
        run_at = to_datetime(self.now + delay) if delay > 0 else None
        return _replace(job, status="queued", claim=None, run_at=run_at, last_error=error)

    def _put(self, job: StoredJob) -> None:
        self.doc.put_job(job, self.now)

    # -- ops ----------------------------------------------------------------------

    def push(self, op: Push) -> OpResult:
        # checked where it was made (osqueue.state.make.push), not again here
        delay = op.delay_s
        size = _payload_size(op, self.policy)
        ttl = finishing.ttl_of(op.result_ttl_s)
        doc = self.doc
        if op.id in doc.jobs or op.id in doc.recent:
            return Pushed(op.id, False)
        dedupe_filter.check(doc, op, self.now, self.policy)  # cold ids
        if op.key is not None:
            holder = key_holder(doc, op.key)  # in the document, a segment or a delayed object
            if holder is not None:
                raise DuplicateKey(
                    f"key {op.key!r} is held by live job {holder}", existing_id=holder
                )
        job = StoredJob(
            id=op.id,
            queue=op.queue,
            seq=doc.next_seq,
            status="queued",
            created_at=self.now_dt,
            priority=op.priority,
            payload=op.payload,
            payload_ref=op.payload_ref,
            run_at=to_datetime(self.now + delay) if delay > 0 else None,
            max_attempts=op.max_attempts,
            key=op.key,
            dedupe=op.dedupe is not False,
            result_ttl_s=ttl,
        )
        if op.payload_ref is not None:  # what a claim must find in the object
            job = _replace(job, payload_ref_bytes=size, payload_ref_sha256=op.payload_sha256)
        if op.group is not None or op.after:
            if op.after:  # placing it may record dependencies: measure afresh
                self.size.void()
            placed = scheduling.place_push(self, op, job)
            if placed is None:  # a failed parent cancelled it at once
                return Pushed(op.id, True)
            job = placed
        # the job's encoding, made here once and kept for the commit's encode
        frag = encode_job(job)
        if op.queue in doc.queue_totals:
            self.size.admit(len(frag), cache=not op.after)
        else:  # the header grows by the new queue's counters too: measured afresh next
            self.size.admit(len(frag) + len(op.queue) + _KNOWN_QUEUE_BYTES, cache=False)
        doc.next_seq += 1
        doc.put_encoded(job, frag, self.now)
        doc.finished.discard(op.id)  # pushed again after its dedupe window: a new job
        self.stats["pushed"] += 1
        totals(doc, op.queue).pushed += 1
        return Pushed(op.id, True)

    def claim(self, op: ClaimOp) -> OpResult:
        # checked where it was made (osqueue.state.make.claim), not again here
        queues, max_jobs = op.queues, op.max_jobs
        doc, index, jobs = self.doc, self.doc.index, self.doc.jobs
        if index.delayed:
            index.promote_due(jobs, self.now)
        if len(queues) > 1:
            queues = tuple(dict.fromkeys(queues))
        single = queues[0] if len(queues) == 1 else None
        barriers = doc.segments.barriers  # queues with segments: where claims stop
        gate = None  # the queues' settings (pause, rate, caps): osqueue.state.limits
        if gated(doc, queues):
            gate = Gate(doc, queues, self.now)
            queues, single = gate.open(queues), None
        out: list[StoredJob] = []
        while queues and len(out) < max_jobs:
            if single is not None:  # the fast path (next_in_order for one queue)
                best, best_queue = index.head(single, jobs), single
                barrier = barriers.get(single) if barriers else None
                if barrier is not None and behind(best, barrier):
                    self.starved.add((single, barrier[0]))  # the next job is in a segment
                    break
            else:
                best, best_queue, starved = next_in_order(doc, queues, barriers, gate)
                if starved is not None:
                    self.starved.add(starved)
                    break
            if best is None:
                break
            index.ready[best_queue].pop()
            job = jobs[best[2]]
            if job.run_at is not None and job.run_at.timestamp() > self.now:
                # Not due on this clock (an old entry, or the clock stepped back after
                # the job was promoted): back among the delayed, never dropped.
                index.defer(job)
                continue
            token = doc.next_token
            doc.next_token += 1
            claimed = _replace(
                job,
                status="claimed",
                claim=Claim(op.worker, token, self.now_dt, self.now_dt),
                attempts=job.attempts + 1,
                first_claimed_at=job.first_claimed_at or self.now_dt,
                run_at=None,
            )
            self._put(claimed)
            out.append(claimed)
            if gate is not None and not gate.took(claimed):
                queues = tuple(q for q in queues if q != claimed.queue)
        if gate is not None:
            gate.commit()
        self.claimed_jobs += out
        return Claimed(tuple(out))

    def heartbeat(self, op: Heartbeat) -> OpResult:
        job = self._held(op.job_id, op.token)
        assert job.claim is not None
        self._put(_replace(job, claim=_replace(job.claim, heartbeat_at=self.now_dt)))
        return _OK

    def complete(self, op: Complete) -> OpResult:
        job = self.doc.jobs.get(op.job_id)
        if (
            job is not None
            and job.status == "done"
            and job.claim is not None
            and job.claim.token == op.token
        ):
            return _OK  # the same holder retrying a completion that landed
        if op.result is not None:
            finishing.check_result(op.result, op.job_id, self.policy)
        job = self._held(op.job_id, op.token)
        finishing.record(self, job, "done", result=op.result)
        done = _replace(
            job, status="done", payload=None, done_version=self.version, done_at=self.now_dt
        )
        self._put(done)
        self.completed.append(done)
        self.stats["completed"] += 1
        totals(self.doc, job.queue).completed += 1
        return _OK

    def fail(self, op: Fail) -> OpResult:
        retry_after = validate.seconds(op.retry_after_s, "retry_after_s")
        job = self._held(op.job_id, op.token)
        error = str(op.error)[: self.policy.max_error_chars]
        self.stats["failed"] += 1
        totals(self.doc, job.queue).failed += 1
        self._put(self._requeue(job, error, retry_after))
        return _OK

    def release(self, op: Release) -> OpResult:
        job = self._held(op.job_id, op.token)
        self._put(
            _replace(
                job, status="queued", claim=None, run_at=None, attempts=max(0, job.attempts - 1)
            )
        )
        return _OK

    def cancel(self, op: Cancel) -> OpResult:
        validate.job_id(op.job_id, "job_id")
        job = self.doc.jobs.get(op.job_id)
        if job is None and op.segment is not None:
            removed = spill.cancel_spilled(self.doc, op)
            self.stats["cancelled"] += 1
            spilled = StoredJob(op.job_id, "", 0, "queued", self.now_dt)  # as far as known
            finishing.record(self, spilled, "cancelled")
            return removed
        if job is None or job.status == "done":
            raise JobNotFound(f"no live job {op.job_id}")
        # (a dead job's children were settled when it died: settling again is a no-op)
        finishing.record(self, job, "cancelled")
        self._leave(job)
        self.stats["cancelled"] += 1
        return Removed((job,))

    def _dead(self, ids: tuple[str, ...] | None) -> list[StoredJob]:
        jobs = self.doc.jobs
        if ids is None:
            return [j for j in jobs.values() if j.status == "dead"]
        out = []
        for i, job_id in enumerate(ids):
            validate.job_id(job_id, f"ids[{i}]")
            job = jobs.get(job_id)
            if job is None or job.status != "dead":
                raise JobNotFound(f"no dead job {job_id}")
            out.append(job)
        return out

    def retry_dead(self, op: RetryDead) -> OpResult:
        found = self._dead(op.ids)
        for job in found:
            self.doc.finished.remove(job.id)  # live again
            self._put(requeued_here(self.doc, job))  # (its key, if no live job took it)
        return Counted(len(found))

    def purge_dead(self, op: PurgeDead) -> OpResult:
        found = self._dead(op.ids)
        for job in found:
            self._leave(job)
        return Removed(tuple(found))

    def mark_archived(self, op: MarkArchived) -> OpResult:
        versions = set(op.versions)
        jobs = self.doc.jobs
        gone = [jobs[i] for i in sorted(self.doc.index.done) if jobs[i].done_version in versions]
        for job in gone:
            self._leave(job)
        pruned = [j.done_version for j in gone if j.done_version is not None]
        if pruned:
            self.doc.archived_through = max(self.doc.archived_through, *pruned)
        return Removed(tuple(gone))

    def restart_heartbeats(self, op: RestartHeartbeats) -> OpResult:
        for job_id in sorted(self.doc.index.claimed):
            job = self.doc.jobs[job_id]
            assert job.claim is not None
            self._put(_replace(job, claim=_replace(job.claim, heartbeat_at=self.now_dt)))
        return _OK

    def load(self, op: Load) -> OpResult:
        result, skipped, dropped = spill.load(self.doc, op, self.now, self.policy)
        self.removed.extend(skipped)
        if dropped is not None:
            self.dropped_segments.append(dropped)
        return result


_DISPATCH: dict[type[Any], Callable[[_Tx, Any], OpResult]] = {
    Push: _Tx.push,
    ClaimOp: _Tx.claim,
    Heartbeat: _Tx.heartbeat,
    Complete: _Tx.complete,
    Fail: _Tx.fail,
    Release: _Tx.release,
    Cancel: _Tx.cancel,
    RetryDead: _Tx.retry_dead,
    PurgeDead: _Tx.purge_dead,
    MarkArchived: _Tx.mark_archived,
    RestartHeartbeats: _Tx.restart_heartbeats,
    Spill: lambda tx, op: spill.spill(tx.doc, op, tx.now, tx.policy),
    Load: _Tx.load,
    SetAside: lambda tx, op: spill.set_aside(tx.doc, op, tx.now),
    Readmit: lambda tx, op: spill.readmit(tx.doc, op),
    compaction.Compact: lambda tx, op: compaction.compact(tx.doc, op, tx.dropped_segments),
    SetQueue: scheduling.set_queue,
    PutSchedule: scheduling.put_schedule,
    RemoveSchedule: scheduling.remove_schedule,
}
_DISPATCH.update(cold_waiting.dispatch(_DISPATCH[Cancel]) | finished_objects.DISPATCH)
_DISPATCH.update(DEAD_OPS | DELAYED_OPS)  # (osqueue.state.cold_dead, .delayed_ops)
_push = _DISPATCH[Push]
#: ops on held (or claimable) jobs: each changes the encodings of the jobs it
#: holds or takes and may add entries to the record of finished jobs, nothing
#: else a push's bound counts, so pushes after them keep the bound and add what
#: :func:`~osqueue.state.document.held_bytes` moved (a worker's completion and
#: its follow-up push in one commit, the common batch, measure the document once)
_HELD_OPS = frozenset(_DISPATCH[op] for op in (ClaimOp, Complete, Heartbeat, Fail, Release))


def transition(
    doc: Document,
    ops: Iterable[Op],
    now: float,
    policy: Policy | None = None,
    *,
    owner: BrokerInfo | None = None,
    in_place: bool = False,
) -> Transition:
    """Apply ``ops`` and the sweep as one new version of ``doc``.

    ``owner`` (the broker's identity and renewed lease) is written into the
    new version.  With ``in_place=True`` the given document is updated instead
    of copied: only for a caller that owns it and will not look at the old
    version again (the broker, which re-reads after any failed write)."""
    if not math.isfinite(now):
        raise InvalidInput("now must be a finite time", field="now")
    tx = _Tx(doc if in_place else doc.copy(), now, policy or Policy())
    if tx.doc.schedules.by_name:  # ticks that have come: pushed in this very version
        scheduling.fire(tx)
    results: list[Result] = []
    size = tx.size
    size.kept = True
    for op in ops:
        handler = _DISPATCH.get(type(op))
        if handler in _HELD_OPS:
            size.held_moved = True  # its job's encoding changes: the next push measures it
        elif handler is not _push:
            size.void()  # the op changes what a push would measure
        if handler is None:
            results.append(InvalidInput(f"unknown operation {type(op).__name__}", field="op"))
            continue
        try:
            results.append(handler(tx, op))
        except OsqueueError as exc:
            results.append(exc)
    size.kept, size.bound = False, None
    sweep.run(tx)
    if tx.ended and (tx.doc.index.children or tx.doc.waiting_cold):
        deps.settle(tx, tx.ended)
    new = tx.doc
    new.version = tx.version
    if tx.stats:
        stats = new.stats
        new.stats = _replace(stats, **{k: getattr(stats, k) + n for k, n in tx.stats.items()})
    if not sampled(new.history, now):  # the first commit of a minute adds its sample
        c = new.stats
        counters = (c.pushed, c.completed, c.failed, c.dead)
        new.set_history(record(new.history, now, counters, depths(new)))
    if owner is not None:
        new.broker = owner
    return Transition(
        new,
        results,
        tx.completed,
        tx.removed,
        tx.reclaimed,
        tx.starved,
        tx.dropped_segments,
        finished=[job_id for job_id, _ in tx.ended] if tx.ended else [],
        claimed_jobs=tx.claimed_jobs,
    )


def apply(
    doc: Document,
    ops: Sequence[Op],
    now: float,
    policy: Policy | None = None,
    *,
    owner: BrokerInfo | None = None,
) -> tuple[Document, list[Result]]:
    """The pure transition: ``(doc, ops, now) -> (new_doc, results)``."""
    t = transition(doc, ops, now, policy, owner=owner)
    return t.doc, t.results


__all__ = [
    "Transition",
    "apply",
    "backoff_s",
    "transition",
]
