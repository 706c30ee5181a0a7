"""The transitions of cold delayed jobs: ``SpillDelayed`` and ``LoadDelayed``
(:mod:`osqueue.state.cold_delayed` describes the objects and references).

The broker writes an object before the ``SpillDelayed`` that references it, and
reads one before the ``LoadDelayed`` that takes its jobs back; these only check
that what the op says still holds in the document, and apply it.  A stale op
fails alone with ``Conflict``, a malformed one with ``InvalidInput`` naming the
field; nothing changes, and an object no reference names is the orphan sweep's.

* ``SpillDelayed(ref, jobs)``: every job is still in the document unchanged,
  queued with a ``run_at``, of ``ref``'s queue, sorted by ``(run_at, seq)``, and
  ``ref`` describes exactly them.  The jobs leave the document (not as
  ``removed``: their payload objects stay, the reference lists them), a retried
  push of one is recognised by the reference's id filter (no tombstones), their
  keys stay held through the reference, and the delayed heap drops their entries.
* ``LoadDelayed(key, from_loaded, jobs, next_run_at, lines)``: the reference has
  loaded exactly ``from_loaded`` jobs; ``jobs`` are the object's next ones (the
  first due at its ``next_run_at``).  Each keeps its ``run_at``, so a job not due
  yet waits in the delayed heap: **never claimable early**.  Cancelled ones are
  skipped (reported as removed, so their payload objects go); an id already in the
  document keeps the document's job.  The last chunk drops the reference.
"""

from __future__ import annotations

import heapq
from collections.abc import Callable, Sequence
from datetime import datetime
from typing import Any, Protocol

import msgspec

from osqueue.errors import Conflict, InvalidInput
from osqueue.state.cold_delayed import DELAYED_PREFIX, make_delayed_ref, order_key
from osqueue.state.dedupe_filter import leave_tombstone
from osqueue.state.document import Document
from osqueue.state.model import DelayedRef, StoredJob
from osqueue.state.ops import Counted, LoadDelayed, OpResult, Policy, SpillDelayed
from osqueue.state.spill import check_lines
from osqueue.storage.keys import check_key

_replace = msgspec.structs.replace


def _check_key(value: object, field: str) -> str:
    key = check_key(value, field)
    if not key.startswith(DELAYED_PREFIX):
        raise InvalidInput(f"{key!r} is not under {DELAYED_PREFIX}", field=field)
    return key


def _check_job(job: object, queue: str, where: str) -> StoredJob:
    if not isinstance(job, StoredJob):
        raise InvalidInput(f"must be a StoredJob, not {type(job).__name__}", field=where)
    if job.queue != queue:
        raise InvalidInput(
            f"{job.queue!r} is not the object's queue {queue!r}", field=f"{where}.queue"
        )
    if job.status != "queued" or job.run_at is None or job.claim is not None:
        raise InvalidInput("only delayed queued jobs spill or load", field=f"{where}.status")
    return job


def _check_order(jobs: Sequence[StoredJob], queue: str) -> None:
    previous: tuple[datetime, int] | None = None
    for i, job in enumerate(jobs):
        _check_job(job, queue, f"jobs[{i}]")
        at = order_key(job)
        if previous is not None and at <= previous:
            raise InvalidInput("not after the job before (run_at, seq)", field=f"jobs[{i}].run_at")
        previous = at


def spill_delayed(doc: Document, op: SpillDelayed, now: float, policy: Policy) -> Counted:
    ref, jobs = op.ref, op.jobs
    if not isinstance(ref, DelayedRef):
        raise InvalidInput(f"must be a DelayedRef, not {type(ref).__name__}", field="ref")
    _check_key(ref.key, "ref.key")
    if not isinstance(jobs, tuple | list) or not jobs:
        raise InvalidInput("a spill moves at least one job", field="jobs")
    _check_order(jobs, ref.queue)
    expected = make_delayed_ref(ref.key, jobs, ref.window_at, ref.size_bytes, ref.sha256)
    if ref != expected:
        wrong = next(n for n in ref.__struct_fields__ if getattr(ref, n) != getattr(expected, n))
        raise InvalidInput(
            f"{getattr(ref, wrong)!r} does not describe the jobs ({getattr(expected, wrong)!r})",
            field=f"ref.{wrong}",
        )
    cold = doc.delayed
    if cold.find(ref.key) is not None:
        raise Conflict(f"delayed object {ref.key} is referenced already")
    current = doc.jobs
    for job in jobs:
        now_job = current.get(job.id)
        if now_job is not job and now_job != job:
            raise Conflict(f"job {job.id} changed since the spill's snapshot")
    doc.drop_ready(jobs)  # their ids: the reference's filter (osqueue.state.dedupe_filter)
    _compact_delayed(doc)
    cold.add(ref)
    return Counted(len(jobs))


def _compact_delayed(doc: Document) -> None:
    """Drop the delayed heap's stale entries at once (a spill's jobs would
    otherwise stay there until they fell due: a deep pile's worth of memory)."""
    jobs = doc.jobs
    heap = doc.index.delayed
    live = []
    for entry in heap:
        job = jobs.get(entry[2])
        if job is not None and job.status == "queued" and job.seq == entry[1]:
            live.append(entry)
    heap[:] = live
    heapq.heapify(heap)
    doc.delayed.scanned = None


def load_delayed(
    doc: Document, op: LoadDelayed, now: float, policy: Policy
) -> tuple[Counted, list[StoredJob], str | None]:
    """Apply ``op``; returns its result, the cancelled jobs it skipped (their payload
    objects may go), and the key of the reference it dropped (the object is garbage
    after the commit) if it took the last jobs."""
    key = _check_key(op.key, "key")
    cold = doc.delayed
    ref = cold.find(key)
    if ref is None:
        raise Conflict(f"no delayed object {key} is referenced (loaded already, or never spilled)")
    if op.from_loaded != ref.loaded:
        raise Conflict(f"delayed object {key} has loaded {ref.loaded} jobs, not {op.from_loaded}")
    jobs = op.jobs
    left = ref.count - ref.loaded
    if not isinstance(jobs, tuple | list) or not 0 < len(jobs) <= left:
        raise InvalidInput(f"must be 1 to {left} jobs (the ones not loaded yet)", field="jobs")
    _check_order(jobs, ref.queue)
    if jobs[0].run_at != ref.next_run_at:
        raise InvalidInput("the chunk does not start at the object's next_run_at", field="jobs[0]")
    final = len(jobs) == left
    after = op.next_run_at
    if final != (after is None) or (after is not None and not jobs[-1].run_at <= after):  # type: ignore[operator]
        raise InvalidInput(
            "names the next job's run_at exactly when the chunk does not end the object",
            field="next_run_at",
        )
    lines = check_lines(op.lines, len(jobs)) if op.lines else None
    cancelled = set(ref.cancelled)
    skipped: list[StoredJob] = []
    inserted = 0
    for i, job in enumerate(jobs):
        if job.id in cancelled:  # it leaves: its tombstone (its filter answered so far)
            skipped.append(job)
            leave_tombstone(doc, job, now, policy)
        elif job.id not in doc.jobs:
            if lines is not None:
                doc.put_encoded(job, lines[i], now)
            else:
                doc.put_job(job, now)
            inserted += 1
    if final:
        cold.remove(ref)
        return Counted(inserted), skipped, ref.key
    assert after is not None
    ids = {job.id for job in jobs}
    gone = {job.payload_ref for job in jobs if job.payload_ref is not None}
    cold.replace(
        _replace(
            ref,
            loaded=ref.loaded + len(jobs),
            next_run_at=after,
            cancelled=tuple(i for i in ref.cancelled if i not in ids),
            keyed={i: k for i, k in ref.keyed.items() if i not in ids},
            payload_refs=tuple(p for p in ref.payload_refs if p not in gone),
        )
    )
    return Counted(inserted), skipped, None


def key_holder(doc: Document, key: str) -> str | None:
    """The live job holding idempotency key ``key``: in the document, or spilled (a
    ready segment's, a delayed object's)."""
    return doc.index.keys.get(key) or doc.segments.keys.get(key) or doc.delayed.keys.get(key)


class _Tx(Protocol):
    """What the commit's working state (``osqueue.state.transitions._Tx``) offers."""

    doc: Document
    now: float
    policy: Policy
    removed: list[StoredJob]
    dropped_segments: list[str]


def _spill_tx(tx: _Tx, op: SpillDelayed) -> OpResult:
    return spill_delayed(tx.doc, op, tx.now, tx.policy)


def _load_tx(tx: _Tx, op: LoadDelayed) -> OpResult:
    result, skipped, dropped = load_delayed(tx.doc, op, tx.now, tx.policy)
    tx.removed.extend(skipped)
    if dropped is not None:
        tx.dropped_segments.append(dropped)
    return result


#: the transitions' entries for these ops (``osqueue.state.transitions._DISPATCH``)
DELAYED_OPS: dict[type[Any], Callable[[Any, Any], OpResult]] = {
    SpillDelayed: _spill_tx,
    LoadDelayed: _load_tx,
}
