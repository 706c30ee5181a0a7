"""Waiting children out of the document: the transitions and the plans (pure).

The broker moves waiting jobs (``after=[...]``) into immutable objects under
``waiting/`` and references them from the document
(:mod:`osqueue.state.waiting_refs`); this module decides what moves and
applies the ops, never doing I/O:

* :func:`plan_spills`: once ``waiting_spill_above_jobs`` waiting jobs sit in
  the document, the groups of waiting jobs of one queue with the same parents
  (``after``) of at least that many jobs, or whose one job waits for at least
  that many parents, go to objects of up to ``waiting_object_jobs`` jobs.
  A job with an idempotency key stays (its key must be answered from the
  document).
* ``SpillWaiting(ref, jobs)`` (:func:`spill`): every job must be in the
  document unchanged; they leave it (a dedupe tombstone each, as for any job
  that leaves), the reference joins.  A stale snapshot fails alone
  (``Conflict``) and the object is the orphan sweep's.
* :func:`settle`: a parent that ended in this commit is struck from the
  ``after`` of every reference waiting for it (an index lookup, no job is
  touched); ``dead`` or ``cancelled`` also lands in ``failed``.
* :func:`plan_loads`: a reference is *due* once ``after`` is empty or a parent
  failed; one object is loaded at a time, while fewer than
  ``waiting_load_below_queued`` queued jobs of its queue sit in the document (the ready
  segments spill what a large fan-in puts back).
* ``LoadWaiting(key, jobs)`` (:func:`load`): the object's jobs come back,
  each as its own ``on_parent_failure`` says: cancelled (a failed parent and
  ``"cancel"``; it joins the commit's finished jobs, so its own children
  follow), queued (no parent pending), or waiting for the parents still
  pending.  Jobs cancelled while cold are skipped; the reference goes, in the
  same commit, so nothing is in two places.
* ``Cancel(job_id, segment="waiting/...")`` (:func:`cancel`): the broker found
  the job in the object; it is struck (``cancelled``) and recorded as
  cancelled now.

A takeover reads no object: the references carry the counts and the parents.
"""

from __future__ import annotations

import hashlib
from collections.abc import Callable, Sequence
from datetime import datetime
from typing import Any, Protocol

import msgspec

from osqueue.api import FinishedStatus
from osqueue.errors import Conflict, CorruptDocument, InvalidInput, JobNotFound
from osqueue.state import results as finishing
from osqueue.state.dedupe_filter import leave_tombstone
from osqueue.state.document import Document
from osqueue.state.model import StoredJob, to_datetime
from osqueue.state.ops import (
    Cancel,
    Counted,
    LoadWaiting,
    Ok,
    OpResult,
    Policy,
    Readmit,
    Removed,
    SetAside,
    SpillWaiting,
)
from osqueue.state.segment_codec import (
    SegmentLines,
    check_segment,
    dedupe_fields,
    encode_segment,
    priority_bounds,
)
from osqueue.state.waiting_refs import WAITING_PREFIX, WaitingAside, WaitingRef
from osqueue.storage.keys import check_key

_replace = msgspec.structs.replace


class Host(Protocol):
    """What these transitions need of a commit in progress (the transitions' ``_Tx``)."""

    doc: Document
    now: float
    now_dt: datetime
    policy: Policy
    stats: dict[str, int]
    ended: list[tuple[str, FinishedStatus]]
    removed: list[StoredJob]
    dropped_segments: list[str]


def waiting_key(unique: str) -> str:
    """The key of a new object of waiting children."""
    return check_key(f"{WAITING_PREFIX}{unique}.jsonl", "key")


def make_ref(key: str, jobs: Sequence[StoredJob], size_bytes: int, sha256: str) -> WaitingRef:
    """The reference to a new object ``key`` holding ``jobs`` (one queue, same ``after``)."""
    ids = [job.id for job in jobs]
    low, high = priority_bounds(jobs)
    return WaitingRef(
        key=key,
        count=len(jobs),
        size_bytes=size_bytes,
        sha256=sha256,
        min_id=min(ids),
        max_id=max(ids),
        queue=jobs[0].queue,
        after=jobs[0].after,
        payload_refs=tuple(j.payload_ref for j in jobs if j.payload_ref is not None),
        min_seq=min(j.seq for j in jobs),
        max_seq=max(j.seq for j in jobs),
        min_priority=low,
        max_priority=high,
        **dedupe_fields(jobs),
    )


# --------------------------------------------------------------------------- plans


def _groups(doc: Document) -> dict[tuple[str, tuple[str, ...]], dict[str, StoredJob]]:
    """The document's waiting jobs that may move, by queue and parents."""
    groups: dict[tuple[str, tuple[str, ...]], dict[str, StoredJob]] = {}
    jobs = doc.jobs
    for kids in doc.index.children.values():
        for kid in kids:
            job = jobs.get(kid)
            if job is None or job.status != "waiting" or job.key is not None:
                continue
            groups.setdefault((job.queue, job.after), {})[kid] = job
    return groups


def largest_group(doc: Document) -> int:
    """The most waiting jobs of one queue with the same parents in the document."""
    return max(map(len, _groups(doc).values()), default=0)


def plan_spills(doc: Document, policy: Policy) -> list[list[StoredJob]]:
    """The runs of waiting jobs to move to objects now (each one queue, same
    ``after``, seq order, at most ``waiting_object_jobs``)."""
    above = policy.waiting_spill_above_jobs
    if above is None or (hot_waiting(doc) < above and len(doc.index.children) < above):
        return []
    groups = _groups(doc)
    out: list[list[StoredJob]] = []
    size = policy.waiting_object_jobs
    for (_, after), group in groups.items():
        if len(group) < above and len(after) < above:
            continue
        run = sorted(group.values(), key=lambda j: j.seq)
        out.extend(run[i : i + size] for i in range(0, len(run), size))
    return out


def hot_waiting(doc: Document) -> int:
    """Waiting jobs in the document."""
    counts = doc.index.counts
    return sum(n for (_, status), n in counts.items() if status == "waiting")


def plan_loads(doc: Document, policy: Policy, busy: set[str]) -> list[WaitingRef]:
    """The due references to load now: one (not in ``busy``) of a queue whose queued
    jobs in the document are fewer than ``waiting_load_below_queued`` (a queue
    that does not drain, paused or capped, holds back its own children only)."""
    bound, count = policy.waiting_load_below_queued, doc.index.count
    cold = doc.waiting_cold
    for key in cold.due:  # (the due ones only: a commit pays nothing for the others)
        ref = cold.refs[key]
        if key not in busy and count(ref.queue, "queued") < bound:
            return [ref]
    return []


# --------------------------------------------------------------------------- transitions


def spill(host: Host, op: SpillWaiting) -> Counted:
    ref, jobs = op.ref, op.jobs
    _check_spill(ref, jobs)
    doc = host.doc
    cold = doc.waiting_cold
    if cold.holds(ref.key):
        raise Conflict(f"object {ref.key} is referenced already")
    current = doc.jobs
    for job in jobs:
        now_job = current.get(job.id)
        if now_job is not job and now_job != job:
            raise Conflict(f"job {job.id} changed since the spill's snapshot")
    for job in jobs:  # their ids: the reference's filter (osqueue.state.dedupe_filter)
        doc.drop_job(job.id)
    cold.add(ref)
    return Counted(len(jobs))


def _check_spill(ref: WaitingRef, jobs: Sequence[StoredJob]) -> None:
    if not isinstance(ref, WaitingRef):
        raise InvalidInput(f"must be a WaitingRef, not {type(ref).__name__}", field="ref")
    _check_key(ref.key, "ref.key")
    if not isinstance(jobs, tuple | list) or not jobs:
        raise InvalidInput("a spill moves at least one job", field="jobs")
    for i, job in enumerate(jobs):
        if not isinstance(job, StoredJob):
            raise InvalidInput(f"must be a StoredJob, not {type(job).__name__}", field=f"jobs[{i}]")
        if job.status != "waiting" or job.after != ref.after or job.queue != ref.queue:
            raise InvalidInput(
                f"job {job.id} is not a waiting job of {ref.queue!r} after {len(ref.after)} "
                "parents as the reference says",
                field=f"jobs[{i}]",
            )
        if job.key is not None:
            raise InvalidInput("a job with an idempotency key stays in the document", field="key")
    expected = make_ref(ref.key, jobs, ref.size_bytes, ref.sha256)
    if ref != expected:
        wrong = next(n for n in ref.__struct_fields__ if getattr(ref, n) != getattr(expected, n))
        raise InvalidInput(
            f"{getattr(ref, wrong)!r} does not describe the jobs ({getattr(expected, wrong)!r})",
            field=f"ref.{wrong}",
        )


def _check_key(value: object, field: str) -> str:
    key = check_key(value, field)
    if not key.startswith(WAITING_PREFIX):
        raise InvalidInput(f"{key!r} is not under {WAITING_PREFIX}", field=field)
    return key


def settle(doc: Document, ended: Sequence[tuple[str, FinishedStatus]]) -> None:
    """Strike the parents that ended from the references waiting for them."""
    cold = doc.waiting_cold
    by_parent = cold.by_parent
    for parent, outcome in ended:
        keys = by_parent.get(parent)
        if not keys:
            continue
        for key in list(keys):
            ref = cold.find(key)  # (set aside or not: a readmit finds it up to date)
            assert ref is not None
            after = tuple(p for p in ref.after if p != parent)
            failed = ref.failed if outcome == "done" else (*ref.failed, parent)
            cold.replace(_replace(ref, after=after, failed=failed))


def load(host: Host, op: LoadWaiting) -> Counted:
    doc = host.doc
    key = _check_key(op.key, "key")
    ref = doc.waiting_cold.refs.get(key)
    if ref is None:
        raise Conflict(f"object {key} is not referenced (loaded already)")
    if not ref.due:
        raise Conflict(f"object {key} still waits for {len(ref.after)} parents")
    jobs = op.jobs
    if not isinstance(jobs, tuple | list) or len(jobs) != ref.count:
        raise InvalidInput(f"the object holds {ref.count} jobs", field="jobs")
    for i, job in enumerate(jobs):
        if (
            not isinstance(job, StoredJob)
            or job.status != "waiting"
            or job.queue != ref.queue
            or not ref.min_id <= job.id <= ref.max_id
        ):
            raise InvalidInput(f"not a waiting job of {key}", field=f"jobs[{i}]")
    doc.waiting_cold.remove(key)
    host.dropped_segments.append(key)
    cancelled = set(ref.cancelled)
    back = 0
    for job in jobs:
        if job.id in cancelled:
            host.removed.append(job)
            leave_tombstone(doc, job, host.now, host.policy)  # (its filter answered so far)
            continue
        if job.id in doc.jobs:  # pushed again after its dedupe window: a new job
            continue
        if ref.failed and job.on_parent_failure == "cancel":
            finishing.record(host, job, "cancelled")
            host.stats["cancelled"] += 1
            host.removed.append(job)
            leave_tombstone(doc, job, host.now, host.policy)
            continue
        if ref.after:
            doc.put_job(_replace(job, after=ref.after), host.now)
        else:
            doc.put_job(_replace(job, status="queued", after=()), host.now)
        back += 1
    return Counted(back)


def cancel(host: Host, op: Cancel) -> Removed:
    """Strike ``op.job_id`` from the object ``op.segment`` (the broker read it there)."""
    key = _check_key(op.segment, "segment")
    job_id = op.job_id
    cold = host.doc.waiting_cold
    ref = cold.refs.get(key)
    if ref is None or not ref.min_id <= job_id <= ref.max_id or job_id in ref.cancelled:
        raise JobNotFound(f"no live job {job_id}")
    cold.replace(_replace(ref, cancelled=(*ref.cancelled, job_id)))
    stub = StoredJob(job_id, ref.queue, 0, "waiting", host.now_dt)  # as far as known
    finishing.record(host, stub, "cancelled")
    host.stats["cancelled"] += 1
    return Removed(())


def set_aside(doc: Document, op: SetAside, now: float) -> Ok:
    """``SetAside`` of an object of waiting children (its key is under ``waiting/``):
    its reference moves aside, not loaded until a readmit; the parents that end
    meanwhile are still struck from it."""
    if not isinstance(op.reason, str) or not op.reason:
        raise InvalidInput("say why the object is set aside", field="reason")
    ref = doc.waiting_cold.refs.get(_check_key(op.key, "key"))
    if ref is None:
        raise Conflict(f"no object {op.key} is referenced (loaded or set aside already)")
    doc.waiting_cold.set_aside(WaitingAside(ref, op.reason[:1000], to_datetime(now)))
    return Ok()


def readmit(doc: Document, op: Readmit) -> Counted:
    """``Readmit`` of an object of waiting children set aside (the broker checked it
    first): back in the references (due to load at once if its parents ended)."""
    key = _check_key(op.key, "key")
    if key not in doc.waiting_cold.aside:
        raise InvalidInput(f"object of waiting children {key} is not set aside", field="key")
    return Counted(doc.waiting_cold.readmit(key).live)


def is_cold_cancel(op: Cancel) -> bool:
    """A cancel the broker located in an object of waiting children."""
    return op.segment is not None and op.segment.startswith(WAITING_PREFIX)


def dispatch(
    cancel_hot: Callable[[Any, Cancel], OpResult],
) -> dict[type[Any], Callable[[Any, Any], OpResult]]:
    """The transitions' entries for these ops (``cancel_hot``: the cancel of a job
    in the document or a ready segment)."""

    def cancel_any(host: Any, op: Cancel) -> OpResult:
        return cancel(host, op) if is_cold_cancel(op) else cancel_hot(host, op)

    return {SpillWaiting: spill, LoadWaiting: load, Cancel: cancel_any}


# --------------------------------------------------------------------------- objects


def build(
    jobs: Sequence[StoredJob], unique: str, lines: Sequence[bytes] | None = None
) -> tuple[SpillWaiting, bytes]:
    """The object for ``jobs`` (segment format: a header line, one job per line;
    ``lines``: the document's encodings of them) and the op that references it."""
    data = encode_segment(jobs, lines)
    ref = make_ref(waiting_key(unique), jobs, len(data), hashlib.sha256(data).hexdigest())
    return SpillWaiting(ref, tuple(jobs)), data


def read(ref: WaitingRef, data: bytes) -> list[StoredJob]:
    """``data``, read for ``ref``: checked against its size and SHA-256, and its
    jobs decoded (``CorruptDocument`` names the key and the line)."""
    check_segment(ref, data)
    obj = SegmentLines.parse(data, ref.key)
    if len(obj) != ref.count:
        raise CorruptDocument(
            f"object {ref.key} holds {len(obj)} jobs; its reference says {ref.count}",
            path="$.count",
        )
    return obj.jobs(0, len(obj))
