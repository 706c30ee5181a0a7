"""Dead letters out of the document: dead segments, their transitions and their plans.

A queue keeps its newest ``dead_keep_jobs`` dead jobs in the document (what
``RetryDead``/``PurgeDead`` and a listing of the document see at once).  Once
``dead_spill_jobs`` more have died, the broker writes the oldest of them, in
the order they died, to **dead segments**: immutable objects under
``dead/<queue>/`` of ``segment_jobs`` jobs at most, written with the segment
codec (:mod:`osqueue.state.segment_codec`, header status ``dead``, jobs in
seq order within an object), and referenced from the document by a
:class:`~osqueue.state.dead_letters.DeadRef` (count, size, SHA-256, seq and
id bounds, death-time bounds, payload objects).  Counts come from the
references; no commit reads an object.

The broker does the I/O between commits; these functions decide (pure):

* ``SpillDead(ref, jobs)``: every job must still be in the document as the
  snapshot saw it (dead, of ``ref``'s queue, seq order) and ``ref`` must
  describe exactly them.  The jobs leave the document; a retried push of one
  of them pushed with an id is recognised by ``ref``'s filter of those ids
  (:mod:`osqueue.state.dedupe_filter`), not by a tombstone each.
* ``SwapDead(old, keep, ready, first_seq)``: the one switch of a retry or a
  purge of a dead segment.  ``old`` must be referenced exactly as given (else
  ``Conflict``: it was retried or purged already), so a retry applied twice
  applies once; the ready segments' seqs must come from ``first_seq`` on and
  ``first_seq`` must not be behind ``next_seq`` (the commit reserves them).
  ``old``'s reference is replaced by ``keep`` (or dropped), the ready segments
  are referenced in their streams (claims load them in seq order like any
  spilled backlog), and ``old``'s object is deleted after the commit.  The
  filters follow the jobs: ``keep``'s and the ready segments' hold their own
  jobs' ids; a purged dedupe job still in its window leaves a tombstone.

A failed op changes nothing; an object it would have referenced is left to
the orphan sweep (``dead/`` and ``segments/`` are both swept).
"""

from __future__ import annotations

import hashlib
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import Any, Protocol

import msgspec

from osqueue.errors import Conflict, InvalidInput
from osqueue.state.dead_letters import DeadAside, DeadLetters, DeadRef
from osqueue.state.document import Document
from osqueue.state.model import SegmentRef, StoredJob, to_datetime
from osqueue.state.ops import Counted, Ok, OpResult, Policy, Readmit, SetAside, SpillDead, SwapDead
from osqueue.state.segment_codec import (
    SEGMENT_PREFIX,
    build_segment,
    decode_checked,
    dedupe_fields,
    encode_segment,
    object_key,
    priority_bounds,
)
from osqueue.storage.keys import check_key

#: where dead segments live (the orphan sweep lists it)
DEAD_PREFIX = "dead/"

_replace = msgspec.structs.replace


class Host(Protocol):
    """What the transitions need of the commit they ride in."""

    doc: Document
    now: float
    policy: Policy
    dropped_segments: list[str]


# --------------------------------------------------------------------------- references


def died_at(job: StoredJob) -> datetime:
    """When a dead job died (its creation for one written before that was recorded)."""
    return job.done_at if job.done_at is not None else job.created_at


def make_dead_ref(key: str, jobs: Sequence[StoredJob], size_bytes: int, sha256: str) -> DeadRef:
    """The reference to a dead segment ``key`` holding ``jobs`` (seq order)."""
    ids = [job.id for job in jobs]
    times = [died_at(job) for job in jobs]
    low, high = priority_bounds(jobs)
    return DeadRef(
        key=key,
        queue=jobs[0].queue,
        count=len(jobs),
        size_bytes=size_bytes,
        sha256=sha256,
        first_seq=jobs[0].seq,
        last_seq=jobs[-1].seq,
        min_id=min(ids),
        max_id=max(ids),
        died_from=min(times),
        died_to=max(times),
        payload_refs=tuple(job.payload_ref for job in jobs if job.payload_ref is not None),
        min_priority=low,
        max_priority=high,
        **dedupe_fields(jobs),
    )


def build_dead(
    jobs: Sequence[StoredJob], unique: str, lines: Sequence[bytes] | None = None
) -> tuple[DeadRef, bytes]:
    """The object for dead ``jobs`` (one queue, seq order) and its reference."""
    data = encode_segment(jobs, lines, status="dead")
    first_died = min(died_at(job) for job in jobs)
    key = object_key(
        DEAD_PREFIX, jobs[0].queue, f"{int(first_died.timestamp() * 1000):015d}", unique
    )
    return make_dead_ref(key, jobs, len(data), hashlib.sha256(data).hexdigest()), data


def read_dead(ref: DeadRef, data: bytes) -> list[StoredJob]:
    """``data``, read for ``ref``: checked (size, SHA-256, header, every line) and
    decoded; its jobs in seq order (CorruptDocument names what is wrong)."""
    jobs = decode_checked(ref, data)
    if jobs[0].status != "dead":  # (the codec checked every job has the header's status)
        raise Conflict(f"object {ref.key} holds {jobs[0].status} jobs, not dead ones")
    return jobs


# --------------------------------------------------------------------------- transitions


def spill_dead(tx: Host, op: SpillDead) -> OpResult:
    doc, ref, jobs = tx.doc, op.ref, op.jobs
    _check_ref(ref, "ref")
    if not isinstance(jobs, tuple | list) or not jobs:
        raise InvalidInput("a dead spill moves at least one job", field="jobs")
    previous = -1
    for i, job in enumerate(jobs):
        if not isinstance(job, StoredJob) or job.status != "dead" or job.queue != ref.queue:
            raise InvalidInput(f"must be a dead job of {ref.queue!r}", field=f"jobs[{i}]")
        if job.seq <= previous:
            raise InvalidInput(f"{job.seq} is not after {previous}", field=f"jobs[{i}].seq")
        previous = job.seq
    expected = make_dead_ref(ref.key, jobs, ref.size_bytes, ref.sha256)
    if ref != expected:
        wrong = next(n for n in ref.__struct_fields__ if getattr(ref, n) != getattr(expected, n))
        raise InvalidInput(
            f"does not describe the jobs ({getattr(expected, wrong)!r})", field=f"ref.{wrong}"
        )
    if doc.dead.holds(ref.key):
        raise Conflict(f"dead segment {ref.key} is referenced already")
    current = doc.jobs
    for job in jobs:
        now_job = current.get(job.id)
        if now_job is not job and now_job != job:
            raise Conflict(f"job {job.id} changed since the dead spill's snapshot")
    for job in jobs:  # their ids: the reference's filter (osqueue.state.dedupe_filter)
        doc.drop_job(job.id)
    doc.dead.append(ref)
    return Counted(len(jobs))


def swap_dead(tx: Host, op: SwapDead) -> OpResult:
    doc, old, keep = tx.doc, op.old, op.keep
    _check_ref(old, "old")
    if doc.dead.find(old.key) != old:
        raise Conflict(
            f"dead segment {old.key} is not referenced as the op saw it (retried or purged since)"
        )
    taken = old.count
    if keep is not None:
        _check_ref(keep, "keep")
        if keep.queue != old.queue or not 0 < keep.count < old.count or doc.dead.holds(keep.key):
            raise InvalidInput(
                "must hold fewer of the same queue's jobs, under a new key", field="keep"
            )
        taken -= keep.count
    ready = _check_ready(doc, op, taken)
    _forget_retried(doc, op, ready)
    _leave_purged(tx, op, taken - sum(ref.count for ref in ready))
    doc.dead.swap(old, keep)
    for ref in ready:
        doc.segments.append(ref)
    if ready:
        doc.next_seq = max(doc.next_seq, max(ref.last_seq for ref in ready) + 1)
    tx.dropped_segments.append(old.key)
    return Counted(taken)


def _forget_retried(doc: Document, op: SwapDead, ready: Sequence[SegmentRef]) -> None:
    """The retried jobs are live again: their ``dead`` entries in the record of
    finished jobs go, as ``RetryDead`` drops those of the document's dead jobs
    (``retried`` must name exactly as many jobs as ``ready`` holds, within
    ``old``'s id bounds)."""
    ids, old = op.retried, op.old
    if not isinstance(ids, tuple | list) or len(ids) != sum(ref.count for ref in ready):
        raise InvalidInput("must name each job the ready segments hold", field="retried")
    for i, job_id in enumerate(ids):
        if not isinstance(job_id, str) or not old.min_id <= job_id <= old.max_id:
            raise InvalidInput(f"{job_id!r} is not a job of {old.key}", field=f"retried[{i}]")
    record = doc.finished
    if record:
        for job_id in ids:
            entry = record.get(job_id)
            if entry is not None and entry.status == "dead":
                record.remove(job_id)


def _leave_purged(tx: Host, op: SwapDead, purged: int) -> None:
    """The purged dedupe jobs created within ``dedupe_window_s`` leave a tombstone
    each (``old``'s filter answered for them until now): ``purged`` names at most
    the ``purged`` jobs taken and not retried, within ``old``'s id bounds."""
    entries, old = op.purged, op.old
    if not isinstance(entries, tuple | list) or len(entries) > purged:
        raise InvalidInput(f"must name at most the {purged} jobs purged", field="purged")
    window_start = tx.now - tx.policy.dedupe_window_s
    for i, entry in enumerate(entries):
        job_id, created = entry if isinstance(entry, tuple | list) and len(entry) == 2 else ("", 0)
        if not isinstance(job_id, str) or not old.min_id <= job_id <= old.max_id:
            raise InvalidInput(f"{job_id!r} is not a job of {old.key}", field=f"purged[{i}]")
        if not isinstance(created, datetime):
            raise InvalidInput("must be (id, created_at)", field=f"purged[{i}]")
        if created.timestamp() >= window_start:
            tx.doc.add_tombstone(job_id, created)


def set_aside_dead(dead: DeadLetters, op: SetAside, now: float) -> Ok:
    """``SetAside`` of a dead segment (its key is under ``dead/``): its reference
    moves aside; its jobs are neither counted as dead nor listed, retried or
    purged until a readmit."""
    if not isinstance(op.reason, str) or not op.reason:
        raise InvalidInput("say why the dead segment is set aside", field="reason")
    ref = dead.find(check_key(op.key, "key"))
    if ref is None:
        raise Conflict(f"no dead segment {op.key} is referenced (swapped or set aside already)")
    dead.set_aside(DeadAside(ref, op.reason[:1000], to_datetime(now)))
    return Ok()


def readmit_dead(dead: DeadLetters, op: Readmit) -> Counted:
    """``Readmit`` of a dead segment set aside (the broker checked its object first)."""
    key = check_key(op.key, "key")
    if key not in dead.aside:
        raise InvalidInput(f"dead segment {key} is not set aside", field="key")
    return Counted(dead.readmit(key).count)


def _check_ready(doc: Document, op: SwapDead, taken: int) -> list[SegmentRef]:
    """The ready segments of a retry, checked: new keys, the old segment's queue,
    seqs in the reserved range from ``first_seq`` on, at most the jobs taken."""
    refs = op.ready
    if not isinstance(refs, tuple | list):
        raise InvalidInput("must be a list of segment references", field="ready")
    if not refs:
        return []
    first = op.first_seq
    if type(first) is not int or first < 1:
        raise InvalidInput("a retry reserves seqs from a positive first_seq", field="first_seq")
    if first < doc.next_seq:
        raise Conflict(f"seq {first} is behind next_seq {doc.next_seq} (reserve again)")
    count, end = 0, first - 1
    for i, ref in enumerate(sorted(refs, key=_first_seq)):
        where = f"ready[{i}]"
        if (
            not isinstance(ref, SegmentRef)
            or ref.queue != op.old.queue
            or ref.loaded
            or ref.cancelled
        ):
            raise InvalidInput(f"must be a new segment of {op.old.queue!r}", field=where)
        check_key(ref.key, f"{where}.key")
        if not ref.key.startswith(SEGMENT_PREFIX) or doc.segments.holds(ref.key):
            raise InvalidInput(
                f"{ref.key!r} is not a new key under {SEGMENT_PREFIX}", field=f"{where}.key"
            )
        if ref.first_seq <= end or ref.last_seq - ref.first_seq + 1 != ref.count:
            raise InvalidInput("seqs must be fresh and consecutive", field=f"{where}.first_seq")
        end = ref.last_seq
        count += ref.count
    if count > taken:
        raise InvalidInput(
            f"{count} jobs, more than the {taken} taken from the dead segment", field="ready"
        )
    _check_keys(doc, refs)
    return list(refs)


def _check_keys(doc: Document, refs: Sequence[SegmentRef]) -> None:
    """No retried job holds an idempotency key a live job took since it died."""
    for ref in refs:
        for job_id, key in ref.keyed.items():
            if key_holder(doc, key) not in (None, job_id):
                raise Conflict(f"key {key!r} of retried job {job_id} is held by a live job since")


def _first_seq(ref: SegmentRef) -> int:
    return ref.first_seq


def _check_ref(ref: DeadRef, field: str) -> None:
    if not isinstance(ref, DeadRef):
        raise InvalidInput(f"must be a DeadRef, not {type(ref).__name__}", field=field)
    key = check_key(ref.key, f"{field}.key")
    if not key.startswith(DEAD_PREFIX):
        raise InvalidInput(f"{key!r} is not under {DEAD_PREFIX}", field=f"{field}.key")
    if ref.count < 1:
        raise InvalidInput("a dead segment holds at least one job", field=f"{field}.count")


#: the ops of this module, as the transition dispatches them
DEAD_OPS: dict[type[Any], Callable[[Any, Any], OpResult]] = {
    SpillDead: spill_dead,
    SwapDead: swap_dead,
}


# --------------------------------------------------------------------------- plans (pure)


@dataclass(frozen=True, slots=True)
class DeadSpillPlan:
    """Dead jobs of one queue to move into a dead segment (a snapshot, seq order)."""

    jobs: tuple[StoredJob, ...]
    lines: tuple[bytes, ...]

    def build(self, unique: str) -> tuple[SpillDead, bytes]:
        """The ``SpillDead`` to submit once ``data`` is stored under ``op.ref.key``."""
        ref, data = build_dead(self.jobs, unique, self.lines)
        return SpillDead(ref, self.jobs), data


def plan_dead_spills(
    doc: Document, policy: Policy, exclude: frozenset[str] | set[str] = frozenset()
) -> list[DeadSpillPlan]:
    """The queues with ``dead_spill_jobs`` more dead jobs than ``dead_keep_jobs``:
    their oldest deaths beyond the newest ``dead_keep_jobs``, in segments of
    ``segment_jobs`` at most, oldest first.  Scans the document only for such
    a queue (once per ``dead_spill_jobs`` deaths)."""
    keep = policy.dead_keep_jobs
    if keep is None:
        return []
    over = [
        q
        for (q, status), n in doc.index.counts.items()
        if status == "dead" and n >= keep + max(1, policy.dead_spill_jobs) and q not in exclude
    ]
    plans: list[DeadSpillPlan] = []
    for queue in sorted(over):
        dead = [job for job in doc.jobs.values() if job.queue == queue and job.status == "dead"]
        dead.sort(key=_death_order)
        leaving = dead[: len(dead) - keep]
        per = max(1, policy.segment_jobs)
        for start in range(0, len(leaving), per):
            chunk = sorted(leaving[start : start + per], key=_seq)
            plans.append(DeadSpillPlan(tuple(chunk), tuple(doc.encoded_job(j.id) for j in chunk)))
    return plans


def dead_spill_room(
    doc: Document, policy: Policy, exclude: frozenset[str] | set[str] = frozenset()
) -> int | None:
    """How many more jobs must die before a queue (not in ``exclude``) can have a
    dead spill to plan: the queue nearest its mark sets it (0: one has one now;
    None: dead jobs never spill).  Jobs only enter the document's dead set by
    dying, and each death adds one to ``doc.stats.dead``, so until that counter
    has grown by this much :func:`plan_dead_spills` finds nothing: the broker
    checks a counter per commit instead of the queues' counts."""
    keep = policy.dead_keep_jobs
    if keep is None:
        return None
    mark = keep + max(1, policy.dead_spill_jobs)
    most = max(
        (n for (q, status), n in doc.index.counts.items() if status == "dead" and q not in exclude),
        default=0,
    )
    return max(0, mark - most)


def _death_order(job: StoredJob) -> tuple[datetime, int]:
    return (died_at(job), job.seq)


def _seq(job: StoredJob) -> int:
    return job.seq


@dataclass(frozen=True, slots=True)
class Swap:
    """A retry or purge of some (or all) jobs of one dead segment: the objects to
    write first, then the op whose commit is the switch."""

    op: SwapDead
    #: (key, bytes) of each new object
    objects: tuple[tuple[str, bytes], ...]
    #: the jobs taken out of the dead segment (retried or purged)
    taken: tuple[StoredJob, ...]


def plan_swap(
    old: DeadRef,
    jobs: Sequence[StoredJob],
    chosen: Callable[[StoredJob], bool] | None,
    *,
    retry: bool,
    first_seq: int,
    unique: Callable[[], str],
    holder: Callable[[str], str | None] = lambda key: None,
) -> Swap | None:
    """Take the ``chosen`` jobs (None: all) of ``old``'s object (``jobs``, as
    :func:`read_dead` gives them) out: retried (reset to queued, attempts 0,
    ``last_error`` kept, fresh seqs from ``first_seq``, one ready segment per
    priority) or purged.  None if none is chosen.  A retried job keeps its
    idempotency key unless ``holder`` names another live job holding it (or an
    earlier job of this retry took it): it then runs without one."""
    taken = [job for job in jobs if chosen is None or chosen(job)]
    if not taken:
        return None
    objects: list[tuple[str, bytes]] = []
    keep: DeadRef | None = None
    if len(taken) < len(jobs):
        ids = {job.id for job in taken}
        rest = [job for job in jobs if job.id not in ids]
        keep, data = build_dead(rest, unique())
        objects.append((keep.key, data))
    ready: list[SegmentRef] = []
    if retry:
        seq = first_seq
        keys: set[str] = set()
        for priority in sorted({job.priority for job in taken}):
            reset = []
            for job in taken:
                if job.priority == priority:
                    key = job.key
                    if key is not None and (key in keys or holder(key) not in (None, job.id)):
                        key = None
                    if key is not None:
                        keys.add(key)
                    reset.append(_requeued(job, seq, key))
                    seq += 1
            ref, data = build_segment(reset, unique())
            ready.append(ref)
            objects.append((ref.key, data))
    retried = tuple(job.id for job in taken) if retry else ()
    purged = () if retry else tuple((job.id, job.created_at) for job in taken if job.dedupe)
    op = SwapDead(old, keep, tuple(ready), first_seq if retry else 0, retried, purged)
    return Swap(op, tuple(objects), tuple(taken))


def _requeued(job: StoredJob, seq: int, key: str | None) -> StoredJob:
    """A dead job queued again (``last_error`` kept, so its history shows)."""
    return _replace(
        job,
        status="queued",
        seq=seq,
        attempts=0,
        run_at=None,
        done_at=None,
        claim=None,
        done_version=None,
        key=key,
    )


def key_holder(doc: Document, key: str) -> str | None:
    """The live job (in the document or a segment) that holds idempotency ``key``."""
    holder = doc.index.keys.get(key)
    return holder if holder is not None else doc.segments.keys.get(key)


def requeued_here(doc: Document, job: StoredJob) -> StoredJob:
    """A dead job of the document queued again by ``RetryDead`` (its seq kept): it
    keeps its idempotency key unless a live job took that key since it died (keys
    of live jobs stay unique; the retried job then runs without one)."""
    key = job.key
    if key is not None and key_holder(doc, key) not in (None, job.id):
        key = None
    return _replace(job, status="queued", attempts=0, run_at=None, done_at=None, key=key)


# --------------------------------------------------------------------------- filters


@dataclass(frozen=True, slots=True)
class DeadFilter:
    """Which dead jobs a listing, retry or purge takes (every field: no limit)."""

    queue: str | None = None
    #: a substring of the job's last error
    error: str | None = None
    #: died at or after / before (Unix seconds)
    since: float | None = None
    until: float | None = None
    ids: frozenset[str] | None = None

    def admits_ref(self, ref: DeadRef) -> bool:
        """``ref``'s object may hold a job this admits (bounds only: read to confirm)."""
        if self.queue is not None and ref.queue != self.queue:
            return False
        if self.since is not None and ref.died_to.timestamp() < self.since:
            return False
        if self.until is not None and ref.died_from.timestamp() >= self.until:
            return False
        return self.ids is None or any(ref.min_id <= i <= ref.max_id for i in self.ids)

    def admits(self, job: StoredJob) -> bool:
        if job.status != "dead" or (self.queue is not None and job.queue != self.queue):
            return False
        if self.ids is not None and job.id not in self.ids:
            return False
        if self.error is not None and self.error not in (job.last_error or ""):
            return False
        died = died_at(job).timestamp()
        if self.since is not None and died < self.since:
            return False
        return self.until is None or died < self.until

    @property
    def plain(self) -> bool:
        """No filter but (maybe) ``ids``: any queue, error and time of death."""
        return (
            self.queue is None and self.error is None and self.since is None and self.until is None
        )

    @property
    def everything(self) -> bool:
        return self.error is None and self.since is None and self.until is None and self.ids is None
