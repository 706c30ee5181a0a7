"""The transitions of deep backlogs: ``Spill``, ``Load`` and the cancel of a spilled job.

The broker does the I/O between commits (it writes a segment object before
the ``Spill`` that references it, and reads one before the ``Load`` that
takes its jobs back); these functions only check that what the op says
still holds in the document, and apply it.  An op whose snapshot went stale
(a job changed, another load came first) fails alone with ``Conflict``; a
malformed one with ``InvalidInput`` naming the field.  Either way nothing
changes, and a segment object no reference names is left to the orphan sweep.

* ``Spill(ref, jobs)``: every job must still be in the document, unchanged
  (the value the snapshot saw), queued and ready, of ``ref``'s stream, in seq
  order, and ``ref`` must describe exactly them and come after the stream's
  last reference.  The jobs leave the document (not as ``removed``: their
  payload objects stay, the reference lists them), each ``dedupe`` job
  created within ``dedupe_window_s`` leaves a tombstone (so a retried push of
  it is recognised, as for any job that left), and their idempotency keys
  stay held through the reference.
* ``Load(key, from_loaded, jobs, next_job, lines)``: the reference must be its
  stream's first and have loaded exactly ``from_loaded`` jobs; ``jobs`` must
  start at its ``next_seq``.  ``lines`` (optional) are the jobs' lines in the
  object, which are the document's own encodings of them: kept as they are,
  so a load encodes nothing.  Cancelled ones are skipped (reported as
  removed, so their payload objects go); an id already in the document (a
  push of the same id after its dedupe window) keeps the document's job.
  The last chunk drops the reference.
* ``SetAside(key, reason)``: the broker found the object missing or not what
  the reference records; the reference moves aside (its stream's next one
  becomes the barrier).  ``Readmit(key)`` puts it back in seq order once the
  object is restored (the broker checked it), unless a reference spilled
  since overlaps its seqs (``Conflict``: readmit once that one is loaded).
* ``Cancel(job_id, segment=key, seq=n)`` of a job not in the document: the
  broker located it in the object; it is struck if it is not loaded yet
  (``seq >= next_seq``), else it is gone (``JobNotFound``).
"""

from __future__ import annotations

from collections.abc import Sequence

import msgspec

from osqueue.errors import Conflict, InvalidInput, JobNotFound
from osqueue.state import cold_waiting
from osqueue.state.cold_dead import DEAD_PREFIX, readmit_dead, set_aside_dead
from osqueue.state.cold_delayed import (
    DELAYED_PREFIX,
    cancel_delayed,
    readmit_delayed,
    set_aside_delayed,
)
from osqueue.state.dedupe_filter import leave_tombstone
from osqueue.state.document import Document
from osqueue.state.model import SegmentRef, SetAsideRef, StoredJob, to_datetime
from osqueue.state.ops import Cancel, Counted, Load, Ok, Policy, Readmit, Removed, SetAside, Spill
from osqueue.state.segment_codec import SEGMENT_PREFIX, make_ref
from osqueue.state.waiting_refs import WAITING_PREFIX
from osqueue.storage.keys import check_key

_replace = msgspec.structs.replace


def spill(doc: Document, op: Spill, now: float, policy: Policy) -> Counted:
    ref, jobs = op.ref, op.jobs
    _check_spill(ref, jobs)
    segments = doc.segments
    if segments.find(ref.key) is not None:
        raise Conflict(f"segment {ref.key} is referenced already")
    last = segments.last(ref.stream)
    if last is not None and ref.first_seq <= last.last_seq:
        raise Conflict(
            f"segment {ref.key} starts at seq {ref.first_seq}, not after the stream's "
            f"last segment (last_seq {last.last_seq})"
        )
    current = doc.jobs
    for job in jobs:
        now_job = current.get(job.id)
        if now_job is not job and now_job != job:
            raise Conflict(f"job {job.id} changed since the spill's snapshot")
    doc.drop_ready(jobs)  # their ids: the reference's filter (osqueue.state.dedupe_filter)
    doc.index.compact(ref.queue, jobs)
    segments.append(ref)
    return Counted(len(jobs))


def _check_spill(ref: SegmentRef, jobs: Sequence[StoredJob]) -> None:
    """The op's own consistency: ``ref`` describes ``jobs``, ready jobs of one stream
    in seq order."""
    if not isinstance(ref, SegmentRef):
        raise InvalidInput(f"must be a SegmentRef, not {type(ref).__name__}", field="ref")
    _check_key(ref.key, "ref.key")
    if not isinstance(jobs, tuple | list) or not jobs:
        raise InvalidInput("a spill moves at least one job", field="jobs")
    if not _ready_run(jobs, ref, -1):  # then the loop below names the first one wrong
        previous: int | None = None
        for i, job in enumerate(jobs):
            _check_spilled_job(job, ref, f"jobs[{i}]")
            if previous is not None and job.seq <= previous:
                raise InvalidInput(f"{job.seq} is not after {previous}", field=f"jobs[{i}].seq")
            previous = job.seq
    expected = make_ref(ref.key, jobs, ref.size_bytes, ref.sha256)
    if ref is not expected and ref != expected:
        wrong = next(
            name for name in ref.__struct_fields__ if getattr(ref, name) != getattr(expected, name)
        )
        raise InvalidInput(
            f"{getattr(ref, wrong)!r} does not describe the jobs ({getattr(expected, wrong)!r})",
            field=f"ref.{wrong}",
        )


def _ready_run(jobs: Sequence[StoredJob], ref: SegmentRef, previous: int) -> bool:
    """Whether ``jobs`` are all ready queued jobs of ``ref``'s stream, their seqs
    rising from above ``previous`` to ``ref.last_seq`` at most: the checks of
    :func:`_check_spilled_job` and of the seq order, in one pass (the per-job
    loops that name what is wrong run only when this says something is)."""
    queue, priority, last = ref.queue, ref.priority, ref.last_seq
    for job in jobs:
        if (
            type(job) is not StoredJob
            or job.queue != queue
            or job.priority != priority
            or job.status != "queued"
            or job.run_at is not None
            or job.claim is not None
            or not previous < job.seq <= last
        ):
            return False
        previous = job.seq
    return True


def _check_spilled_job(job: StoredJob, ref: SegmentRef, where: str) -> None:
    if not isinstance(job, StoredJob):
        raise InvalidInput(f"must be a StoredJob, not {type(job).__name__}", field=where)
    if job.queue != ref.queue or job.priority != ref.priority:
        raise InvalidInput(
            f"({job.queue!r}, {job.priority}) is not the segment's stream "
            f"({ref.queue!r}, {ref.priority})",
            field=f"{where}.queue",
        )
    if job.status != "queued" or job.run_at is not None or job.claim is not None:
        raise InvalidInput("only ready queued jobs spill or load", field=f"{where}.status")


def _check_key(value: object, field: str) -> str:
    key = check_key(value, field)
    if not key.startswith(SEGMENT_PREFIX):
        raise InvalidInput(f"{key!r} is not under {SEGMENT_PREFIX}", field=field)
    return key


# --------------------------------------------------------------------------- load


def load(
    doc: Document, op: Load, now: float, policy: Policy
) -> tuple[Counted, list[StoredJob], str | None]:
    """Apply ``op``; returns its result, the cancelled jobs it skipped (their
    payload objects may go), and the key of the reference it dropped (the
    object is garbage after the commit) if it took the last jobs."""
    _check_key(op.key, "key")
    segments = doc.segments
    ref = segments.find(op.key)
    if ref is None:
        raise Conflict(f"no segment {op.key} is referenced (loaded already, or never spilled)")
    first = segments.first(ref.stream)
    if first is None or first.key != ref.key:
        raise Conflict(f"segment {op.key} is not its stream's first: load that one first")
    if op.from_loaded != ref.loaded:
        raise Conflict(f"segment {op.key} has loaded {ref.loaded} jobs, not {op.from_loaded}")
    jobs = op.jobs
    final = _check_load(ref, jobs, op.next_job)
    cancelled = set(ref.cancelled)
    skipped: list[StoredJob] = []
    lines = check_lines(op.lines, len(jobs)) if op.lines else None
    held = doc.jobs
    if lines is not None and not cancelled and held.keys().isdisjoint([j.id for j in jobs]):
        doc.put_loaded(jobs, lines)  # the common chunk: every job goes in, as encoded
        inserted = len(jobs)
    else:
        inserted = 0
        for i, job in enumerate(jobs):
            if job.id in cancelled:  # it leaves: its tombstone (its filter answered so far)
                skipped.append(job)
                leave_tombstone(doc, job, now, policy)
            elif job.id not in held:
                if lines is not None:
                    doc.put_encoded(job, lines[i], now)
                else:
                    doc.put_job(job, now)
                inserted += 1
    if final:
        segments.remove(ref)
        return Counted(inserted), skipped, ref.key
    assert op.next_job is not None
    cancelled_left, keyed, payload_refs = ref.cancelled, ref.keyed, ref.payload_refs
    if cancelled_left or keyed:  # (what the loaded jobs held leaves the reference)
        ids = {job.id for job in jobs}
        cancelled_left = tuple(i for i in cancelled_left if i not in ids)
        keyed = {i: k for i, k in keyed.items() if i not in ids}
    if payload_refs:
        gone = {job.payload_ref for job in jobs}
        payload_refs = tuple(p for p in payload_refs if p not in gone)
    segments.replace(
        _replace(
            ref,
            loaded=ref.loaded + len(jobs),
            next_seq=op.next_job.seq,
            next_created_at=op.next_job.created_at,
            cancelled=cancelled_left,
            keyed=keyed,
            payload_refs=payload_refs,
        )
    )
    return Counted(inserted), skipped, None


def check_lines(lines: Sequence[bytes], count: int) -> Sequence[bytes]:
    if not isinstance(lines, tuple | list) or len(lines) != count:
        raise InvalidInput(f"must be the {count} jobs' lines, or none", field="lines")
    for i, line in enumerate(lines):
        if type(line) is not bytes or not line.startswith(b'{"id":'):
            raise InvalidInput("must be a job's line of the object", field=f"lines[{i}]")
    return lines


def _check_load(ref: SegmentRef, jobs: Sequence[StoredJob], next_job: StoredJob | None) -> bool:
    """``jobs`` are the object's next ones; returns whether they are its last."""
    left = ref.count - ref.loaded
    if not isinstance(jobs, tuple | list) or not 0 < len(jobs) <= left:
        raise InvalidInput(f"must be 1 to {left} jobs (the ones not loaded yet)", field="jobs")
    previous = ref.next_seq - 1
    if _ready_run(jobs, ref, previous) and jobs[0].seq == ref.next_seq:
        previous = jobs[-1].seq
    else:  # name the first job that is wrong
        for i, job in enumerate(jobs):
            _check_spilled_job(job, ref, f"jobs[{i}]")
            if not previous < job.seq <= ref.last_seq or (i == 0 and job.seq != ref.next_seq):
                raise InvalidInput(
                    f"{job.seq} is not the segment's next seq after {previous}",
                    field=f"jobs[{i}].seq",
                )
            previous = job.seq
    final = len(jobs) == left
    if final != (next_job is None):
        raise InvalidInput(
            "names the job after the chunk exactly when the chunk does not end the segment",
            field="next_job",
        )
    if next_job is not None:
        _check_spilled_job(next_job, ref, "next_job")
        if not previous < next_job.seq <= ref.last_seq:
            raise InvalidInput(f"{next_job.seq} is not after the chunk", field="next_job.seq")
    return final


# --------------------------------------------------------------------------- set aside


def set_aside(doc: Document, op: SetAside, now: float) -> Ok:
    if isinstance(op.key, str) and op.key.startswith(DEAD_PREFIX):
        return set_aside_dead(doc.dead, op, now)
    if isinstance(op.key, str) and op.key.startswith(WAITING_PREFIX):
        return cold_waiting.set_aside(doc, op, now)
    if isinstance(op.key, str) and op.key.startswith(DELAYED_PREFIX):
        return set_aside_delayed(doc.delayed, op, now)
    key = _check_key(op.key, "key")
    if not isinstance(op.reason, str) or not op.reason:
        raise InvalidInput("say why the segment is set aside", field="reason")
    ref = doc.segments.find(key)
    if ref is None:
        raise Conflict(f"no segment {key} is referenced (loaded or set aside already)")
    doc.segments.set_aside(SetAsideRef(ref, op.reason[:1000], to_datetime(now)))
    return Ok()


def readmit(doc: Document, op: Readmit) -> Counted:
    if isinstance(op.key, str) and op.key.startswith(DEAD_PREFIX):
        return readmit_dead(doc.dead, op)
    if isinstance(op.key, str) and op.key.startswith(WAITING_PREFIX):
        return cold_waiting.readmit(doc, op)
    if isinstance(op.key, str) and op.key.startswith(DELAYED_PREFIX):
        return readmit_delayed(doc.delayed, op)
    key = _check_key(op.key, "key")
    segments = doc.segments
    entry = segments.aside.get(key)
    if entry is None:
        raise InvalidInput(f"segment {key} is not set aside", field="key")
    ref = entry.ref
    for other in segments.streams.get(ref.stream, ()):
        if other.first_seq <= ref.last_seq and ref.first_seq <= other.last_seq:
            raise Conflict(
                f"segment {key} (seqs {ref.first_seq}..{ref.last_seq}) overlaps segment "
                f"{other.key} spilled since; readmit it once that one is loaded"
            )
    segments.readmit(key)
    segments.insert(ref)
    return Counted(ref.remaining)


# --------------------------------------------------------------------------- cancel


def cancel_spilled(doc: Document, op: Cancel) -> Removed:
    """Strike ``op.job_id`` from the segment ``op.segment`` (it is not in the document)."""
    if isinstance(op.segment, str) and op.segment.startswith(DELAYED_PREFIX):
        return cancel_delayed(doc.delayed, op)
    key = _check_key(op.segment, "segment")
    seq = op.seq
    if type(seq) is not int or seq < 0:
        raise InvalidInput("a cancel in a segment names the job's seq there", field="seq")
    job_id = op.job_id
    ref = doc.segments.find(key)
    if (
        ref is None  # loaded and gone
        or not ref.next_seq <= seq <= ref.last_seq  # loaded (and gone, or it would be in the doc)
        or not ref.min_id <= job_id <= ref.max_id
        or job_id in ref.cancelled
        or ref.remaining <= 0
    ):
        raise JobNotFound(f"no live job {job_id}")
    keyed = ref.keyed
    if job_id in keyed:
        keyed = {i: k for i, k in keyed.items() if i != job_id}
    doc.segments.replace(_replace(ref, cancelled=(*ref.cancelled, job_id), keyed=keyed))
    return Removed(())
