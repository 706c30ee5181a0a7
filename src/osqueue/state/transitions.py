"""Every change to the queue document, as pure functions.

``apply(doc, ops, now, policy)`` applies a batch in order, then sweeps (stale
claims are reclaimed, old dedupe tombstones dropped), bumps ``version`` by one
and returns the new document with one result per op.  One bad op fails alone:
each op is validated before it changes anything, and its error becomes its
result.  No I/O, no clock: ``now`` is passed in.

Deep backlogs (:mod:`osqueue.state.segments`): a claim stops at the first
segment in claim order that is not loaded yet and reports its stream in
:attr:`Transition.starved`; ``Spill``, ``Load`` and a cancel in a segment are
applied by :mod:`osqueue.state.spill`.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any

import msgspec

from osqueue.backoff import Backoff
from osqueue.errors import (
    DuplicateKey,
    InvalidInput,
    JobNotFound,
    LeaseLost,
    OsqueueError,
    QueueFull,
)
from osqueue.state import spill, validate
from osqueue.state.document import Document, encode_job
from osqueue.state.history import HistorySample, minute_of, record
from osqueue.state.index import ReadyEntry
from osqueue.state.model import BrokerInfo, Claim, Counters, StoredJob, to_datetime
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
    Release,
    Removed,
    RestartHeartbeats,
    Result,
    RetryDead,
    Spill,
)
from osqueue.state.segments import Barrier, Stream
from osqueue.state.stats import depths

_replace = msgspec.structs.replace
_OK = Ok()

#: What a claim and its completion add to a queued job at most (the claim record,
#: attempts, first_claimed_at, done_version, done_at; for a worker name of up to
#: 24 characters and tokens and versions of up to 12 digits).  A push is
#: admitted only if the document stays under ``max_document_bytes`` with every
#: queued job grown by this, so claims and completions never take a written
#: document past the cap (a failure's error text still can).
CLAIM_RESERVE_BYTES = 280


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
    #: segment objects no reference names any more (fully loaded: delete them)
    dropped_segments: list[str] = field(default_factory=list)


def _check_digest(op: Push) -> None:
    """A push's recorded payload digest: for a payload object, 64 lowercase hex digits."""
    if op.payload_ref is None:
        raise InvalidInput("a digest is recorded for a payload object only", field="payload_sha256")
    digest = op.payload_sha256
    if not isinstance(digest, str) or len(digest) != 64 or digest.strip(_HEX):
        raise InvalidInput(f"{digest!r} is not a hex SHA-256", field="payload_sha256")


_HEX = "0123456789abcdef"


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
        self.stats = msgspec.structs.asdict(doc.stats)
        self.completed: list[StoredJob] = []
        self.removed: list[StoredJob] = []
        self.reclaimed: list[str] = []
        self.starved: set[Stream] = set()
        self.dropped_segments: list[str] = []

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
        """Remove a job from the document, keeping a dedupe tombstone for its id."""
        self.doc.drop_job(job.id)
        self.removed.append(job)
        if job.dedupe and job.created_at.timestamp() >= self.now - self.policy.dedupe_window_s:
            self.doc.add_tombstone(job.id, job.created_at)

    def _requeue(self, job: StoredJob, error: str, retry_after_s: float | None) -> StoredJob:
        if job.attempts >= job.max_attempts:
            self.stats["dead"] += 1
            return _replace(job, status="dead", claim=None, run_at=None, last_error=error)
        delay = retry_after_s if retry_after_s is not None else backoff_s(job.attempts, self.policy)
        run_at = to_datetime(self.now + delay) if delay > 0 else None
        return _replace(job, status="queued", claim=None, run_at=run_at, last_error=error)

    def _put(self, job: StoredJob) -> None:
        self.doc.put_job(job, self.now)

    # -- ops ----------------------------------------------------------------------

    def push(self, op: Push) -> OpResult:
        validate.job_id(op.id)
        delay = validate.new_job(op.queue, op.priority, op.delay_s, op.key, op.max_attempts)
        size = len(op.payload) if op.payload is not None else op.payload_size
        if size > self.policy.max_payload_bytes:
            raise InvalidInput(
                f"{size} bytes is above the limit of {self.policy.max_payload_bytes}",
                field="payload",
            )
        if op.payload is not None and len(op.payload) > self.policy.max_inline_payload_bytes:
            raise InvalidInput(
                f"{len(op.payload)} bytes is above the inline limit of "
                f"{self.policy.max_inline_payload_bytes}; store it as a payload object",
                field="payload",
            )
        if (op.payload is None) == (op.payload_ref is None):
            raise InvalidInput(
                "a job needs exactly one of payload and payload_ref", field="payload"
            )
        if op.payload_sha256 is not None:
            _check_digest(op)
        doc = self.doc
        if op.id in doc.jobs or op.id in doc.recent:
            return Pushed(op.id, False)
        if op.key is not None:
            holder = doc.index.keys.get(op.key)
            if holder is None and doc.segments.keys:
                holder = doc.segments.keys.get(op.key)
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
        )
        if op.payload_ref is not None:  # what a claim must find in the object
            job = _replace(job, payload_ref_bytes=size, payload_ref_sha256=op.payload_sha256)
        # The bound is the written size (tombstones and references count too) with
        # room for every queued job to be claimed and completed; the job's encoding
        # is made here once and kept for the commit's encode.
        frag = encode_job(job)
        room = CLAIM_RESERVE_BYTES * (doc.index.queued + 1)
        if doc.size_upper() + len(frag) + 1 + room > self.policy.max_document_bytes:
            raise QueueFull(
                f"the queue document would exceed max_document_bytes="
                f"{self.policy.max_document_bytes} once its queued jobs are claimed; "
                "retry when workers have caught up"
            )
        doc.next_seq += 1
        doc.put_encoded(job, frag, self.now)
        self.stats["pushed"] += 1
        return Pushed(op.id, True)

    def claim(self, op: ClaimOp) -> OpResult:
        validate.worker_name(op.worker)
        queues = validate.queue_names(op.queues)
        max_jobs = op.max_jobs
        # the fast path: a plain int in range needs no full check (bool is not int here)
        if type(max_jobs) is not int or not 0 < max_jobs <= validate.MAX_CLAIM:
            validate.count(max_jobs, "max_jobs", maximum=validate.MAX_CLAIM)
        doc, index, jobs = self.doc, self.doc.index, self.doc.jobs
        if index.delayed:
            index.promote_due(jobs, self.now)
        if len(queues) > 1:
            queues = tuple(dict.fromkeys(queues))
        single = queues[0] if len(queues) == 1 else None
        barriers = doc.segments.barriers  # queues with segments: where claims stop
        out: list[StoredJob] = []
        while len(out) < max_jobs:
            if single is not None and not barriers:  # the fast path
                best, best_queue = index.head(single, jobs), single
            else:
                best, best_queue, starved = _next_in_order(doc, queues, barriers)
                if starved is not None:
                    self.starved.add(starved)
                    break
            if best is None:
                break
            index.pop(best_queue)
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
        job = self._held(op.job_id, op.token)
        done = _replace(
            job, status="done", payload=None, done_version=self.version, done_at=self.now_dt
        )
        self._put(done)
        self.completed.append(done)
        self.stats["completed"] += 1
        return _OK

    def fail(self, op: Fail) -> OpResult:
        retry_after = validate.seconds(op.retry_after_s, "retry_after_s")
        job = self._held(op.job_id, op.token)
        error = str(op.error)[: self.policy.max_error_chars]
        self.stats["failed"] += 1
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
            return removed
        if job is None or job.status == "done":
            raise JobNotFound(f"no live job {op.job_id}")
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
            self._put(_replace(job, status="queued", attempts=0, run_at=None))
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

    def spill(self, op: Spill) -> OpResult:
        return spill.spill(self.doc, op, self.now, self.policy)

    def load(self, op: Load) -> OpResult:
        result, skipped, dropped = spill.load(self.doc, op, self.now)
        self.removed.extend(skipped)
        if dropped is not None:
            self.dropped_segments.append(dropped)
        return result

    # -- the sweep that rides along with every commit ------------------------------

    def sweep(self) -> None:
        index = self.doc.index
        if not index.claimed:
            self._prune_recent()
            return
        timeout = self.policy.heartbeat_timeout_s
        # Compare datetimes (no float conversion per claimed job) to find candidates
        # (1 ms of slack over the exact test below), and sort only those.
        cutoff = _datetime_at(self.now - timeout + 0.001)
        floor = index.heartbeat_floor
        if floor is None or floor < cutoff:  # one may have expired: walk the claims
            self._reclaim_expired(cutoff, timeout)
        self._prune_recent()

    def _reclaim_expired(self, cutoff: datetime, timeout: float) -> None:
        jobs, index = self.doc.jobs, self.doc.index
        expired: list[str] = []
        floor: datetime | None = None  # the oldest heartbeat among the live claims
        for job_id in index.claimed:
            heartbeat_at = jobs[job_id].claim.heartbeat_at  # type: ignore[union-attr]
            if heartbeat_at < cutoff:
                expired.append(job_id)
            elif floor is None or heartbeat_at < floor:
                floor = heartbeat_at
        for job_id in sorted(expired):
            job = jobs[job_id]
            assert job.claim is not None
            if job.claim.heartbeat_at.timestamp() + timeout < self.now:
                error = (
                    f"reclaimed: worker {job.claim.worker!r} stopped heartbeating "
                    f"(token {job.claim.token}, timeout {timeout:g}s)"
                )
                self.stats["reclaimed"] += 1
                self._put(self._requeue(job, error, None))
                self.reclaimed.append(job_id)
            elif floor is None or job.claim.heartbeat_at < floor:
                floor = job.claim.heartbeat_at  # within the slack: still claimed
        index.heartbeat_floor = floor

    def _prune_recent(self) -> None:
        recent = self.doc.recent
        if not recent:
            return
        window = self.policy.dedupe_window_s
        oldest = next(iter(recent.values()))  # seconds never decrease in insertion order
        # Rebuild only once the oldest is well past the window: O(n) per window/4.
        # A tombstone's second is its job's creation time rounded down, so "+ 1"
        # keeps it at least dedupe_window_s after its job was created.
        if oldest + 1 < self.now - 1.25 * window:
            cutoff = self.now - window
            self.doc.set_recent({k: v for k, v in recent.items() if v + 1 >= cutoff})


def _datetime_at(ts: float) -> datetime:
    return datetime.fromtimestamp(ts, UTC)


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
    Spill: _Tx.spill,
    Load: _Tx.load,
}


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
    version again (the broker, which re-reads after any failed write).
    """
    if not math.isfinite(now):
        raise InvalidInput("now must be a finite time", field="now")
    tx = _Tx(doc if in_place else doc.copy(), now, policy or Policy())
    results: list[Result] = []
    for op in ops:
        handler = _DISPATCH.get(type(op))
        if handler is None:
            results.append(InvalidInput(f"unknown operation {type(op).__name__}", field="op"))
            continue
        try:
            results.append(handler(tx, op))
        except OsqueueError as exc:
            results.append(exc)
    tx.sweep()
    new = tx.doc
    new.version = tx.version
    new.stats = Counters(**tx.stats)
    new.set_history(_record_history(new, now))
    if owner is not None:
        new.broker = owner
    return Transition(
        new, results, tx.completed, tx.removed, tx.reclaimed, tx.starved, tx.dropped_segments
    )


def _record_history(doc: Document, now: float) -> tuple[HistorySample, ...]:
    """The document's history with this minute's sample (one comparison when the
    minute already has one)."""
    history = doc.history
    if history and history[-1].at.timestamp() >= minute_of(now):
        return history
    c = doc.stats
    return record(history, now, (c.pushed, c.completed, c.failed, c.dead), depths(doc))


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


def claimable(doc: Document, queues: Sequence[str], now: float) -> bool:
    """Would a claim on ``queues`` at ``now`` get a job?  (Not while the next job in
    claim order sits in a segment: it becomes claimable when a load commits.)"""
    index = doc.index
    index.promote_due(doc.jobs, now)
    barriers = doc.segments.barriers
    if not barriers:
        return any(index.head(q, doc.jobs) is not None for q in queues)
    return _next_in_order(doc, queues, barriers)[0] is not None


def _next_in_order(
    doc: Document, queues: Sequence[str], barriers: dict[str, Barrier]
) -> tuple[ReadyEntry | None, str, Stream | None]:
    """The next job in claim order across ``queues``, and its queue; or, when that
    job sits in a segment, ``(None, "", its stream)``: the claim stops there."""
    index, jobs = doc.index, doc.jobs
    best: ReadyEntry | None = None
    best_queue = ""
    stop: Barrier | None = None  # the first barrier in claim order
    stop_queue = ""
    for q in queues:
        entry = index.head(q, jobs)
        barrier = barriers.get(q) if barriers else None
        if barrier is not None and (entry is None or entry > barrier):
            if stop is None or barrier < stop:
                stop, stop_queue = barrier, q
        elif entry is not None and (best is None or entry < best):
            best, best_queue = entry, q
    if stop is not None and (best is None or stop < best):
        return None, "", (stop_queue, stop[0])
    return best, best_queue, None


def next_wakeup(doc: Document, policy: Policy) -> float | None:
    """The earliest time a delayed job becomes due or a claim may expire."""
    times: list[float] = []
    due = doc.index.next_due(doc.jobs)
    if due is not None:
        times.append(due)
    for job_id in doc.index.claimed:
        claim = doc.jobs[job_id].claim
        if claim is not None:
            times.append(claim.heartbeat_at.timestamp() + policy.heartbeat_timeout_s)
    return min(times) if times else None
