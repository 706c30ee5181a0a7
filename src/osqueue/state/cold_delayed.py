"""Delayed jobs in time-bucketed objects: a timing wheel on object storage.

Every commit rewrites the document, so a deep pile of delayed jobs (scheduled
with ``delay_s``, or retries with backoff) must not sit in it.  Jobs due later
than ``delay_horizon_s`` move, once more than ``delay_spill_above_jobs`` delayed
jobs sit in the document, into immutable objects under ``delayed/``: one queue's
jobs due in one window of ``delay_window_s`` per object (at most
``segment_jobs``), sorted by ``(run_at, seq)``, in the segment layout
(:mod:`osqueue.state.segment_codec`: a header line, then each job as the
document stores it).  The document keeps a
:class:`~osqueue.state.model.DelayedRef` per object, and the object's next jobs
are loaded back ``delay_lead_s`` before they are due (``next_run_at``), a chunk
of ``delay_load_jobs`` at a time.  A loaded job keeps its ``run_at``, so it is
never claimable early: it waits in the document's delayed heap like any other.

What must be answered without reading an object is kept here, as for ready
segments (:mod:`osqueue.state.segments`): the idempotency keys of spilled jobs
(``keys``), the payload objects they use (``payloads``), the counts
(``count - loaded - cancelled``), the id bounds a cancel reads candidates by, and
the ids cancelled while spilled (skipped on load).  A retried push of a spilled
id is recognised by the reference's filter of its dedupe jobs' ids
(:mod:`osqueue.state.dedupe_filter`, as for ready segments: ``filtered`` holds
the references that carry one), not by tombstones.

This module holds the references (:class:`DelayedCold`, one attribute of the
document), the objects' keys and references, and the cancel of a spilled job;
the ``SpillDelayed``/``LoadDelayed`` transitions are in
:mod:`osqueue.state.delayed_ops`, what to spill or load in
:mod:`osqueue.state.delayed_plan`.
"""

from __future__ import annotations

import hashlib
from collections.abc import Iterator, Sequence
from datetime import datetime

import msgspec

from osqueue.errors import Conflict, InvalidInput, JobNotFound
from osqueue.state.dedupe_filter import hold_filter
from osqueue.state.model import DelayedAside, DelayedRef, StoredJob, to_datetime
from osqueue.state.ops import Cancel, Counted, Ok, Readmit, Removed, SetAside
from osqueue.state.segment_codec import (
    SEGMENT_FORMAT,
    DelayedHeader,
    dedupe_fields,
    join_lines,
    priority_bounds,
    segment_key,
)
from osqueue.storage.keys import check_key

DELAYED_PREFIX = "delayed/"

_encode = msgspec.json.Encoder().encode
_replace = msgspec.structs.replace


def order_key(job: StoredJob) -> tuple[datetime, int]:
    """A delayed object's order: due time, then seq."""
    assert job.run_at is not None
    return (job.run_at, job.seq)


def delayed_key(queue: str, window_at: datetime, unique: str) -> str:
    """The key of a new object of ``queue``'s jobs due in the window starting at
    ``window_at``: ``delayed/<queue>/<window start, Unix seconds:012d>=<unique>.jsonl``
    (the queue's name escaped as a segment key's is)."""
    seg = segment_key(queue, 0, 0, unique)  # the escaping and the unique's check
    name = seg[len("segments/") : seg.index("/p0/")]
    return check_key(f"{DELAYED_PREFIX}{name}/{int(window_at.timestamp()):012d}={unique}.jsonl")


def make_delayed_ref(
    key: str, jobs: Sequence[StoredJob], window_at: datetime, size_bytes: int, sha256: str
) -> DelayedRef:
    """The reference to a new object ``key`` holding ``jobs`` (sorted by
    :func:`order_key`)."""
    first, last = jobs[0], jobs[-1]
    assert first.run_at is not None
    assert last.run_at is not None
    ids = [job.id for job in jobs]
    low, high = priority_bounds(jobs)
    return DelayedRef(
        key=key,
        queue=first.queue,
        window_at=window_at,
        first_run_at=first.run_at,
        last_run_at=last.run_at,
        count=len(jobs),
        size_bytes=size_bytes,
        sha256=sha256,
        next_run_at=first.run_at,
        min_id=min(ids),
        max_id=max(ids),
        min_seq=min(job.seq for job in jobs),
        max_seq=max(job.seq for job in jobs),
        min_priority=low,
        max_priority=high,
        keyed={job.id: job.key for job in jobs if job.key is not None},
        payload_refs=tuple(job.payload_ref for job in jobs if job.payload_ref is not None),
        **dedupe_fields(jobs),
    )


def build_delayed(
    jobs: Sequence[StoredJob],
    window_at: datetime,
    unique: str,
    lines: Sequence[bytes] | None = None,
) -> tuple[DelayedRef, bytes]:
    """The object holding ``jobs`` (one queue, sorted by :func:`order_key`) and its
    reference (``lines``: the jobs' encodings from the document's cache)."""
    if not jobs:
        raise InvalidInput("an object holds at least one job", field="jobs")
    queue = jobs[0].queue
    header = DelayedHeader(SEGMENT_FORMAT, "delayed", queue, window_at, len(jobs))
    data = join_lines(header, jobs, lines)
    key = delayed_key(queue, window_at, unique)
    ref = make_delayed_ref(key, jobs, window_at, len(data), hashlib.sha256(data).hexdigest())
    return ref, data


class DelayedCold:
    """The references to objects of delayed jobs of one document, with the lookups
    pushes, stats and the payload sweep need (kept in step on every change)."""

    __slots__ = (
        "_next",
        "_section",
        "aside",
        "changes",
        "filter_floor",
        "filtered",
        "keys",
        "payloads",
        "refs",
        "scanned",
    )

    def __init__(self, refs: Sequence[DelayedRef] = ()) -> None:
        #: object key -> its reference
        self.refs: dict[str, DelayedRef] = {}
        #: idempotency key -> id of the spilled (not loaded, not cancelled) job holding it
        self.keys: dict[str, str] = {}
        #: payload object -> how many spilled jobs use it (the payload sweep keeps them)
        self.payloads: dict[str, int] = {}
        #: grows with every change (planners remember what they saw)
        self.changes = 0
        #: the spill planner's memo: the delayed heap's length at its last scan, and how
        #: many more entries it needs before a scan could find enough to spill
        self.scanned: tuple[int, int] | None = None
        #: object key -> its reference set aside (object missing or broken)
        self.aside: dict[str, DelayedAside] = {}
        #: object key -> its reference (listed or set aside) that carries an id filter,
        #: and the oldest of their ``dedupe_created`` (:mod:`osqueue.state.dedupe_filter`)
        self.filtered: dict[str, DelayedRef] = {}
        self.filter_floor: float | None = None
        self._next: float | None = None
        self._section: bytes | None = None
        for ref in refs:
            self.add(ref)

    def copy(self) -> DelayedCold:
        new = DelayedCold()
        new.refs = dict(self.refs)
        new.aside = dict(self.aside)
        new.keys = dict(self.keys)
        new.payloads = dict(self.payloads)
        new.filtered = dict(self.filtered)
        new.filter_floor = self.filter_floor
        new.changes = self.changes
        new.scanned = self.scanned
        new._next = self._next
        new._section = self._section
        return new

    # -- reading ------------------------------------------------------------------

    def __bool__(self) -> bool:
        """References, or references set aside: the document has a section."""
        return bool(self.refs or self.aside)

    def __iter__(self) -> Iterator[DelayedRef]:
        """Every reference, by key (queue, then window)."""
        for key in sorted(self.refs):
            yield self.refs[key]

    def __eq__(self, other: object) -> bool:
        if not isinstance(other, DelayedCold):
            return NotImplemented
        return self.refs == other.refs and self.aside == other.aside

    __hash__ = None  # type: ignore[assignment]

    def find(self, key: str) -> DelayedRef | None:
        return self.refs.get(key)

    def holds(self, key: str) -> bool:
        """Object ``key`` is referenced or set aside: never an orphan."""
        return key in self.refs or key in self.aside

    def spilled(self, queue: str) -> int:
        """Live delayed jobs of ``queue`` that sit in objects."""
        return sum(ref.remaining for ref in self.refs.values() if ref.queue == queue)

    def queues(self) -> set[str]:
        return {ref.queue for ref in self.refs.values()} | {
            e.ref.queue for e in self.aside.values()
        }

    def set_aside_jobs(self, queue: str) -> int:
        """Live jobs of ``queue`` in objects set aside (neither lost nor claimable)."""
        return sum(e.ref.remaining for e in self.aside.values() if e.ref.queue == queue)

    def set_aside_of(self, queue: str) -> int:
        """How many of ``queue``'s objects are set aside."""
        return sum(1 for e in self.aside.values() if e.ref.queue == queue)

    def next_run_at(self) -> float | None:
        """The earliest ``next_run_at`` of the references (Unix seconds; cached)."""
        if self._next is None and self.refs:
            self._next = min(ref.next_run_at for ref in self.refs.values()).timestamp()
        return self._next

    def section(self) -> bytes:
        """The document's ``,"delayed":[...]`` and ``,"delayed_aside":[...]`` (each
        only when not empty; cached until a reference changes)."""
        section = self._section
        if section is None:
            parts = []
            if self.refs:
                parts.append(b',"delayed":[' + b",".join(_encode(ref) for ref in self) + b"]")
            if self.aside:
                entries = (_encode(self.aside[key]) for key in sorted(self.aside))
                parts.append(b',"delayed_aside":[' + b",".join(entries) + b"]")
            section = self._section = b"".join(parts)
        return section

    # -- changes ------------------------------------------------------------------

    def add(self, ref: DelayedRef) -> None:
        self.refs[ref.key] = ref
        self._hold(ref)
        self._moved()

    def remove(self, ref: DelayedRef) -> None:
        del self.refs[ref.key]
        self._release(ref)
        self._moved()

    def set_aside(self, entry: DelayedAside, *, listed: bool = True) -> None:
        """Move ``entry.ref`` aside (``listed``: a reference of this document; else one
        decoded from the set-aside list): not loaded, its keys and payloads held."""
        ref = entry.ref
        if listed:
            del self.refs[ref.key]
        else:
            self._hold(ref)
        self.aside[ref.key] = entry
        self._moved()

    def readmit(self, key: str) -> DelayedRef:
        """Take ``key``'s reference back among the loadable ones."""
        ref = self.aside.pop(key).ref
        self.refs[key] = ref
        self._moved()
        return ref

    def _hold(self, ref: DelayedRef) -> None:
        for job_id, key in ref.keyed.items():
            self.keys[key] = job_id
        for payload in ref.payload_refs:
            self.payloads[payload] = self.payloads.get(payload, 0) + 1
        hold_filter(self, ref)

    def _release(self, ref: DelayedRef) -> None:
        keys = self.keys
        for job_id, key in ref.keyed.items():
            if keys.get(key) == job_id:
                del keys[key]
        for payload in ref.payload_refs:
            n = self.payloads.get(payload, 0) - 1
            if n > 0:
                self.payloads[payload] = n
            else:
                self.payloads.pop(payload, None)
        self.filtered.pop(ref.key, None)

    def replace(self, ref: DelayedRef) -> None:
        """Put ``ref`` in the place of the reference with the same key."""
        self.remove(self.refs[ref.key])
        self.add(ref)

    def _moved(self) -> None:
        self._next = None
        self._section = None
        self.changes += 1


def cancel_delayed(cold: DelayedCold, op: Cancel) -> Removed:
    """Strike ``op.job_id`` (not in the document) from the delayed object
    ``op.segment``, where the broker found it at position ``op.seq``: struck if
    not loaded yet, else gone (``JobNotFound``)."""
    assert op.segment is not None
    key = check_key(op.segment, "segment")
    at = op.seq
    if type(at) is not int or at < 0:
        raise InvalidInput("a cancel in a delayed object names the job's position", field="seq")
    job_id = op.job_id
    ref = cold.find(key)
    if (
        ref is None  # loaded and gone
        or not ref.loaded <= at < ref.count  # loaded (and gone, or it would be in the doc)
        or not ref.min_id <= job_id <= ref.max_id
        or job_id in ref.cancelled
    ):
        raise JobNotFound(f"no live job {job_id}")
    keyed = ref.keyed
    if job_id in keyed:
        keyed = {i: k for i, k in keyed.items() if i != job_id}
    cold.replace(_replace(ref, cancelled=(*ref.cancelled, job_id), keyed=keyed))
    return Removed(())


def set_aside_delayed(cold: DelayedCold, op: SetAside, now: float) -> Ok:
    """``SetAside`` of a delayed object (its key is under ``delayed/``)."""
    if not isinstance(op.reason, str) or not op.reason:
        raise InvalidInput("say why the object is set aside", field="reason")
    ref = cold.find(check_key(op.key, "key"))
    if ref is None:
        raise Conflict(f"no delayed object {op.key} is referenced (loaded or set aside already)")
    cold.set_aside(DelayedAside(ref, op.reason[:1000], to_datetime(now)))
    return Ok()


def readmit_delayed(cold: DelayedCold, op: Readmit) -> Counted:
    """``Readmit`` of a delayed object set aside (the broker checked it first)."""
    key = check_key(op.key, "key")
    if key not in cold.aside:
        raise InvalidInput(f"delayed object {key} is not set aside", field="key")
    return Counted(cold.readmit(key).remaining)
