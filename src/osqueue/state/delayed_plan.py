"""What the broker should spill and load of the delayed jobs: pure helpers it calls
between commits (they read the document; no I/O, nothing written).

The broker's rhythm (:mod:`osqueue.broker.cold.delayed` does the I/O)::

    after each commit (and when a timer set for the next load fires):
      for plan in plan_delayed_spills(doc, policy, now):  # too many delayed jobs held
          ref, data = build_delayed(...)                  # the object and its reference
          await storage.put(ref.key, data)                # whole, under a key of its own
          submit(SpillDelayed(ref, plan.jobs))            # the next commit references it
      for ref in loads_due(doc, policy, now):             # next jobs due within the lead
          read the object (through the segment cache)
          submit(delayed_load_op(ref, lines, policy.delay_load_jobs))

Costs: with no reference and fewer delayed-heap entries than
``delay_spill_above_jobs``, a commit's check is two comparisons.  A scan of the
heap that found too few jobs to spill is remembered (``DelayedCold.scanned``),
so the heap is not scanned again before it grew by what was missing (a job
only comes nearer its time, so only new entries can make more spillable).
"""

from __future__ import annotations

from collections.abc import Collection, Sequence
from dataclasses import dataclass
from datetime import datetime

from osqueue.state.cold_delayed import build_delayed, order_key
from osqueue.state.document import Document
from osqueue.state.model import DelayedRef, StoredJob, to_datetime
from osqueue.state.ops import Cancel, LoadDelayed, Policy, SpillDelayed
from osqueue.state.segment_codec import SegmentLines


@dataclass(frozen=True, slots=True)
class DelayedSpillPlan:
    """Delayed jobs of one queue, due in one window, to move into an object (a snapshot)."""

    queue: str
    window_at: datetime
    jobs: tuple[StoredJob, ...]
    #: their encodings, from the document's cache (the object reuses them)
    lines: tuple[bytes, ...]

    def build(self, unique: str) -> tuple[SpillDelayed, bytes]:
        """The op to submit once ``data`` is stored under ``op.ref.key``."""
        ref, data = build_delayed(self.jobs, self.window_at, unique, self.lines)
        return SpillDelayed(ref, self.jobs), data


def window_of(run_at: datetime, window_s: float) -> datetime:
    """The start of the due-time window ``run_at`` falls in."""
    ts = run_at.timestamp()
    return to_datetime(ts - ts % window_s)


def plan_delayed_spills(
    doc: Document,
    policy: Policy,
    now: float,
    exclude: Collection[str] = (),
    objects: int = 64,
) -> list[DelayedSpillPlan]:
    """Once more than ``delay_spill_above_jobs`` delayed jobs sit in the document:
    those due later than ``delay_horizon_s`` from ``now``, per queue (but the
    ``exclude``d ones, whose spill is in flight), in objects by window of
    ``delay_window_s`` of at most ``segment_jobs`` (``objects`` at most)."""
    above = policy.delay_spill_above_jobs
    heap = doc.index.delayed
    if above is None or len(heap) <= above:
        return []
    cold = doc.delayed
    memo = cold.scanned
    if memo is not None and len(heap) - memo[0] < memo[1]:
        return []
    horizon = now + policy.delay_horizon_s
    jobs = doc.jobs
    by_queue: dict[str, list[StoredJob]] = {}
    found = 0
    for run_at, seq, job_id in heap:
        if run_at <= horizon:
            continue
        job = jobs.get(job_id)
        if job is None or job.status != "queued" or job.seq != seq or job.run_at is None:
            continue
        found += 1
        if job.queue not in exclude:
            by_queue.setdefault(job.queue, []).append(job)
    if found <= above:
        cold.scanned = (len(heap), above + 1 - found)
        return []
    cold.scanned = None
    plans: list[DelayedSpillPlan] = []
    budget = objects * policy.segment_jobs
    for queue in sorted(by_queue):
        chosen = sorted({job.id: job for job in by_queue[queue]}.values(), key=order_key)
        for start, end, window_at in _cuts(chosen[:budget], policy):
            part = tuple(chosen[start:end])
            lines = tuple(doc.encoded_job(job.id) for job in part)
            plans.append(DelayedSpillPlan(queue, window_at, part, lines))
        budget -= min(budget, len(chosen))
        if budget <= 0:
            break
    return plans


def _cuts(jobs: Sequence[StoredJob], policy: Policy) -> list[tuple[int, int, datetime]]:
    """``jobs`` (sorted) cut by window and at most ``segment_jobs``: (start, end, window)."""
    cuts: list[tuple[int, int, datetime]] = []
    start = 0
    while start < len(jobs):
        first = jobs[start].run_at
        assert first is not None
        window_at = window_of(first, policy.delay_window_s)
        window_end = window_at.timestamp() + policy.delay_window_s
        end = start + 1
        limit = min(len(jobs), start + policy.segment_jobs)
        while end < limit:
            at = jobs[end].run_at
            assert at is not None
            if at.timestamp() >= window_end:
                break
            end += 1
        cuts.append((start, end, window_at))
        start = end
    return cuts


def load_at(doc: Document, policy: Policy) -> float | None:
    """When the next load of a delayed object is due (``delay_lead_s`` before its
    next job is), or None without references."""
    first = doc.delayed.next_run_at()
    return None if first is None else first - policy.delay_lead_s


def loads_due(
    doc: Document, policy: Policy, now: float, busy: Collection[str] = ()
) -> list[DelayedRef]:
    """The references whose next job is due within ``delay_lead_s`` of ``now``
    (but those in ``busy``), earliest first."""
    at = load_at(doc, policy)
    if at is None or at > now:
        return []
    until = now + policy.delay_lead_s
    due = [
        ref
        for ref in doc.delayed.refs.values()
        if ref.next_run_at.timestamp() <= until and ref.key not in busy
    ]
    return sorted(due, key=lambda ref: (ref.next_run_at, ref.key))


def delayed_load_op(ref: DelayedRef, obj: SegmentLines, load_jobs: int) -> LoadDelayed:
    """The ``LoadDelayed`` of the next ``load_jobs`` jobs of ``ref``'s object (split
    into lines; the chunk's jobs and the one after it are decoded)."""
    start = ref.loaded
    end = min(start + max(1, load_jobs), ref.count)
    jobs = obj.jobs(start, end + 1)
    after = jobs[end - start].run_at if end < ref.count and len(jobs) > end - start else None
    return LoadDelayed(
        ref.key, start, tuple(jobs[: end - start]), after, tuple(obj.lines[start:end])
    )


def delayed_candidates(doc: Document, job_id: str) -> list[DelayedRef]:
    """The references whose id bounds admit ``job_id`` (read them to confirm)."""
    return [ref for ref in doc.delayed if ref.min_id <= job_id <= ref.max_id]


def live_delayed(ref: DelayedRef, jobs: Sequence[StoredJob]) -> list[StoredJob]:
    """The jobs of ``ref``'s object still spilled and live (not loaded, not cancelled)."""
    cancelled = set(ref.cancelled)
    return [job for job in jobs[ref.loaded :] if job.id not in cancelled]


def delayed_cancel_op(ref: DelayedRef, obj: SegmentLines, job_id: str) -> Cancel | None:
    """The ``Cancel`` of ``job_id`` if ``ref``'s object holds it live, else None."""
    at = obj.find(job_id)
    if at is None or at < ref.loaded or job_id in ref.cancelled:
        return None
    return Cancel(job_id, segment=ref.key, seq=at)
