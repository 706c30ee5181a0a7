"""What the broker should spill, load and read ahead: pure helpers it calls between
commits (they read the document it holds; no I/O, nothing written).

The broker's rhythm (phase 2 does the I/O)::

    after each commit:
      for plan in plan_spills(doc, policy):       # a stream's tail passed spill_above_jobs
          ref, data = plan.build(new_id())        # the object and its reference
          await storage.put(ref.key, data)        # whole, under a key of its own
          submit(Spill(ref, plan.jobs))           # the next commit references it
      for plan in plan_loads(doc, policy, t.starved):
          jobs = cached object of plan.ref, else read it (prefetch: start the read now)
          if plan.due: submit(load_op(plan.ref, jobs, policy.load_jobs))
      delete t.dropped_segments (fully loaded objects)

Thresholds (:class:`~osqueue.state.ops.Policy`):

* ``spill_above_jobs``: a stream spills once this many of its ready jobs sit in
  the document behind its segments (with none: behind its first ``head_jobs``).
  The spill takes that tail, oldest first, in segments of up to
  ``segment_jobs`` jobs (the broker takes the whole tail, in as many segments
  as it needs, so a fast load makes few large segments while a steady trickle
  makes small ones, and a burst never outgrows the spills), and never the
  head that claims read.
* ``head_jobs``: a load is due once fewer ready jobs than this come before the
  stream's barrier in claim order (and at once when a claim starved); the
  object is read ahead once fewer than twice this are left.
* ``load_jobs``: jobs one ``Load`` puts back, so the document holds about
  ``head_jobs`` to ``head_jobs + load_jobs`` of a deep stream's jobs.

:func:`plan_spills` counts cheaply first (a queue's queued jobs) and scans a
queue's ready jobs only when that count could hold a tail to spill.  A scan
is remembered (``Document.spill_scanned``) with how many more jobs the
largest tail needs (after the spills it planned, if any): a tail grows by at
most one per job pushed (``next_seq``), or, in a queue without references,
put back (the queued count; with references, loads add to the count, and a
job put back lies before the barrier, or waits for the next scan), so the
queue is not scanned again before that has grown that much, or a stream's
last reference is not where the scan left it (a delayed job coming due is
counted at the next scan).  A steady trickle costs one scan per spill, and a
queue of delayed jobs is not scanned on every commit.
"""

from __future__ import annotations

from collections.abc import Collection, Sequence
from dataclasses import dataclass
from itertools import groupby
from operator import attrgetter, eq, itemgetter

from osqueue.state.document import Document
from osqueue.state.index import ReadyEntry
from osqueue.state.model import SegmentRef, StoredJob
from osqueue.state.ops import Cancel, Load, Policy, Spill
from osqueue.state.segment_codec import build_segment
from osqueue.state.segments import Barrier, Stream

_PRIORITY = itemgetter(0)
_SEQ = itemgetter(1)
_JOB_PRIORITY = attrgetter("priority")


@dataclass(frozen=True, slots=True)
class SpillPlan:
    """Ready jobs of one stream to move into a segment object (a snapshot)."""

    queue: str
    priority: int
    jobs: tuple[StoredJob, ...]
    #: their encodings, from the document's cache (the object reuses them)
    lines: tuple[bytes, ...]

    def build(self, unique: str) -> tuple[Spill, bytes]:
        """The ``Spill`` op to submit once ``data`` is stored under ``op.ref.key``."""
        ref, data = build_segment(self.jobs, unique, self.lines)
        return Spill(ref, self.jobs), data


@dataclass(frozen=True, slots=True)
class LoadPlan:
    """A stream whose first segment is needed soon (read it) or now (``due``: load)."""

    ref: SegmentRef
    due: bool


def plan_spills(
    doc: Document, policy: Policy, exclude: Collection[str] = (), segments: int = 1
) -> list[SpillPlan]:
    """The streams whose tail passed ``spill_above_jobs``, each with its oldest
    tail jobs in up to ``segments`` segments of ``segment_jobs`` at most (the
    plans of a stream are in seq order: their ``Spill`` ops apply in that
    order).  ``exclude``: queues not to plan now (a spill of theirs is in
    flight)."""
    above = policy.spill_above_jobs
    if above is None:
        return []
    index = doc.index
    plans: list[SpillPlan] = []
    for queue, heap in index.ready.items():
        # (a tail spills from the ready heap's entries, never more than it holds:
        # a queue of fewer entries costs one len() however many queues there are)
        if len(heap) < above or queue in exclude:
            continue
        queued = index.count(queue, "queued")
        if queued < above:
            continue
        lasts = _lasts(doc, queue)
        memo = doc.spill_scanned.get(queue)
        if (
            memo is not None
            and doc.next_seq - memo[0] < memo[2]
            and (lasts or queued - memo[1] < memo[2])
            and memo[3] == lasts
        ):
            continue  # no tail can have grown to spill_above_jobs since the last scan
        found, need = _plan_queue(doc, queue, policy, above, segments)
        if need <= 0:  # a tail is left that could spill now: plan again next time
            doc.spill_scanned.pop(queue, None)
            plans.extend(found)
        elif found:
            # As the document will be once the spills apply (if one fails, its
            # stream's last reference is not what this says, and the queue is
            # scanned again).
            ends = dict(lasts)
            ends.update((plan.priority, plan.jobs[-1].seq) for plan in found)
            spilled = sum(len(plan.jobs) for plan in found)
            memo = (doc.next_seq, queued - spilled, need, tuple(sorted(ends.items())))
            doc.spill_scanned[queue] = memo
            plans.extend(found)
        else:
            doc.spill_scanned[queue] = (doc.next_seq, queued, need, lasts)
    return plans


def sizes_changed(doc: Document, old: Policy, new: Policy) -> None:
    """The spill sizes went from ``old`` to ``new`` (the broker's claim demand):
    forget the scans :func:`plan_spills` remembered that may now say a tail needs
    more jobs than it does.  A memo's count came from ``spill_above_jobs`` and,
    in a queue with no references, ``head_jobs`` (its tail starts after the
    head): a lower threshold, or a smaller head there, may let a tail spill
    sooner; a higher one only makes a scan come sooner than needed.  (A demand
    that rises and falls by a commit's claims changes the head back and forth,
    and forgetting every scan then rescanned a deep queue's tail each time.)"""
    memos = doc.spill_scanned
    if not memos:
        return
    before, after = old.spill_above_jobs, new.spill_above_jobs
    if before is None or after is None or after < before:
        memos.clear()
    elif new.head_jobs < old.head_jobs:
        for queue in [q for q in memos if q not in doc.segments.barriers]:
            del memos[queue]


def _lasts(doc: Document, queue: str) -> tuple[tuple[int, int], ...]:
    """(priority, last seq of its last reference) of ``queue``'s streams with
    references: what their tails start after."""
    return tuple(
        sorted(
            (p, refs[-1].last_seq) for (q, p), refs in doc.segments.streams.items() if q == queue
        )
    )


def _plan_queue(
    doc: Document, queue: str, policy: Policy, above: int, segments: int
) -> tuple[list[SpillPlan], int]:
    """The queue's spill plans, and how many more ready jobs its largest tail
    needs, after them, before it spills (a tail grows by at most one per job
    pushed or put back in the queue, so no scan is needed before then; 0 or
    less: a tail could spill now)."""
    jobs = doc.jobs
    # A stream with references spills only jobs after its last one: the entries
    # before it (the head, most of the heap) are passed over by their seq.
    cuts = dict(_lasts(doc, queue))
    entries_of = doc.index.ready[queue]
    if len(cuts) == 1 and entries_of.one_priority() == next(iter(cuts)):
        # one stream, with references (a deep queue): its tail is the run's end
        ((priority, cut),) = cuts.items()
        entries = entries_of.after((priority, cut + 1))
    else:
        entries = entries_of.entries()
        if len(cuts) == 1:  # (one stream with references: no lookup per entry)
            ((priority, cut),) = cuts.items()
            entries = [e for e in entries if e[1] > cut or e[0] != priority]
        elif cuts:
            entries = [e for e in entries if e[1] > cuts.get(e[0], -1)]
        if entries_of.heap:
            # By priority, then seq: each stream's jobs in seq order (the run's come
            # so; the heap's do not).  Two stable sorts on int keys, seq then
            # priority, give that order at a fifth of the cost of comparing the
            # tuples (a live job's (priority, seq) names it: ids never decide).
            entries.sort(key=_SEQ)
            entries.sort(key=_PRIORITY)
    streams = _ready_streams(entries, jobs)
    plans: list[SpillPlan] = []
    need = above
    for priority, ready in sorted(streams.items()):
        last = doc.segments.last((queue, priority))
        size = len(ready) if last is not None else len(ready) - policy.head_jobs
        if size < above:
            need = min(need, above - max(0, size))
            continue
        tail = ready[policy.head_jobs :] if last is None else ready
        per = policy.segment_jobs
        taken = min(len(tail), per * segments)
        for start in range(0, taken, per):
            chosen = tuple(tail[start : min(start + per, taken)])
            lines = doc.encoded_jobs(chosen)
            plans.append(SpillPlan(queue, priority, chosen, lines))
        need = min(need, above - (len(tail) - taken))
    return plans, need


def _ready_streams(
    entries: list[ReadyEntry], jobs: dict[str, StoredJob]
) -> dict[int, list[StoredJob]]:
    """The ready queued jobs of sorted heap ``entries``, by priority (stale entries,
    and a job's entry that a lazy heap holds twice, passed over)."""
    if any(map(eq, entries, entries[1:])):  # the same job's entry twice: keep one
        entries = [e for i, e in enumerate(entries) if i == 0 or e != entries[i - 1]]
    get = jobs.get
    ready = [
        job
        for e in entries
        if (job := get(e[2])) is not None
        and job.seq == e[1]
        and job.status == "queued"
        and job.run_at is None
    ]
    if not ready:
        return {}
    if ready[0].priority == ready[-1].priority:  # one priority (the common case)
        return {ready[0].priority: ready}
    return {p: list(group) for p, group in groupby(ready, key=_JOB_PRIORITY)}


def plan_loads(doc: Document, policy: Policy, starved: Collection[Stream] = ()) -> list[LoadPlan]:
    """Every stream whose first segment is needed: ``due`` when fewer than
    ``head_jobs`` ready jobs come before its barrier in claim order (or a claim
    starved on it), read-ahead only when fewer than twice that."""
    plans: list[LoadPlan] = []
    for stream, refs in doc.segments.streams.items():
        first = refs[0]
        if stream in starved:
            plans.append(LoadPlan(first, due=True))
            continue
        ahead = jobs_ahead(doc, stream[0], (stream[1], first.next_seq), 2 * policy.head_jobs)
        if ahead < 2 * policy.head_jobs:
            plans.append(LoadPlan(first, due=ahead < policy.head_jobs))
    return plans


def jobs_ahead(doc: Document, queue: str, barrier: Barrier, limit: int) -> int:
    """How many ready jobs of ``queue`` come before ``barrier`` in claim order
    (counted up to ``limit``): the front of its ready entries, up to the
    barrier (stale ones passed over)."""
    ready = doc.index.ready.get(queue)
    if not ready:
        return 0
    get = doc.jobs.get
    count = 0
    for entry in ready.before(barrier):
        job = get(entry[2])
        if job is not None and job.status == "queued" and job.seq == entry[1]:
            count += 1
            if count >= limit:
                break
    return count


def load_op(ref: SegmentRef, jobs: Sequence[StoredJob], load_jobs: int) -> Load:
    """The ``Load`` of the next ``load_jobs`` jobs of ``ref``'s object (``jobs``: all of
    the object's jobs, as :func:`~osqueue.state.segment_codec.decode_segment` gives
    them)."""
    start = ref.loaded
    end = min(start + max(1, load_jobs), ref.count)
    return Load(ref.key, start, tuple(jobs[start:end]), jobs[end] if end < ref.count else None)


# --------------------------------------------------------------------------- reading spilled jobs


def candidates(doc: Document, job_id: str) -> list[SegmentRef]:
    """The references whose id bounds admit ``job_id`` (read them to confirm)."""
    return [ref for ref in doc.segments if ref.min_id <= job_id <= ref.max_id]


def live_jobs(ref: SegmentRef, jobs: Sequence[StoredJob]) -> list[StoredJob]:
    """The jobs of ``ref``'s object that are still spilled and live (not loaded,
    not cancelled): what ``osqueue jobs`` and the Spark reader list."""
    cancelled = set(ref.cancelled)
    return [job for job in jobs[ref.loaded :] if job.id not in cancelled]


def cancel_op(ref: SegmentRef, jobs: Sequence[StoredJob], job_id: str) -> Cancel | None:
    """The ``Cancel`` of ``job_id`` if ``ref``'s object holds it live, else None."""
    for job in live_jobs(ref, jobs):
        if job.id == job_id:
            return Cancel(job_id, segment=ref.key, seq=job.seq)
    return None


def cold_idle(doc: Document, policy: Policy) -> bool:
    """No cold reference to load from, and ``doc`` below every spill and seal
    threshold: after its commit no kind of cold state has anything to plan
    (each kind's own first check, in one place, so a queue that uses none of
    them pays this look per commit and not a call into every kind).  Ready
    segments, delayed objects, waiting children, dead letters, the finished
    record."""
    if doc.segments or doc.delayed:
        return False
    index = doc.index
    if index.children or doc.waiting_cold.due:  # (objects still waiting: nothing to do)
        return False
    if (above := policy.spill_above_jobs) is not None and index.queued >= above:
        return False
    if (above := policy.delay_spill_above_jobs) is not None and len(index.delayed) > above:
        return False
    keep = policy.dead_keep_jobs
    if keep is not None and index.dead >= keep + max(1, policy.dead_spill_jobs):
        return False
    above = policy.finished_seal_above_entries
    return above is None or len(doc.finished.entries) < above
