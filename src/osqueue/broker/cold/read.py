"""Reading spilled jobs for people and tools: listing in claim order, paging,
finding one job (``osqueue jobs``, the dashboard, the Spark reader).

A document snapshot says which segment objects hold which jobs; the objects
are read only as a page reaches them.  Claim order within a queue is
(priority, seq), so a page is "the next ``limit`` jobs after this
(queue, priority, seq)" over the document's jobs and its segments' live jobs
alike: a page reads at most the segments it falls in, and paging never counts
the jobs before it.

A snapshot can go stale while it is read: a segment loaded and deleted since
is ``NotFound`` (:class:`SnapshotMoved`); the caller reads the document again
and asks for the same page, which the cursor keeps well defined.
"""

from __future__ import annotations

import heapq
from collections.abc import Awaitable, Callable, Iterable
from dataclasses import dataclass
from functools import partial

from osqueue.errors import InvalidInput, NotFound
from osqueue.state import (
    Document,
    SegmentRef,
    StoredJob,
    live_jobs,
)
from osqueue.state.cold_dead import read_dead
from osqueue.state.cold_waiting import read as read_waiting_object
from osqueue.state.dead_letters import DeadRef
from osqueue.state.delayed_plan import live_delayed
from osqueue.state.model import DelayedRef
from osqueue.state.segment_codec import SegmentLines, decode_checked
from osqueue.state.validate import PRIORITY_MAX, PRIORITY_MIN
from osqueue.state.waiting_refs import WaitingRef
from osqueue.storage.port import Storage

#: (queue, priority, seq): claim order within a queue, and a page's cursor
SortKey = tuple[str, int, int]


class SnapshotMoved(NotFound):
    """A segment the document snapshot names is gone (its jobs were loaded since):
    read the document again."""


def sort_key(job: StoredJob) -> SortKey:
    return (job.queue, job.priority, job.seq)


@dataclass(frozen=True, slots=True)
class Listed:
    """A job as listed, and the segment it sits in (None: in the document)."""

    job: StoredJob
    segment: str | None = None


async def _get(storage: Storage, key: str, what: str) -> bytes:
    """Object ``key``'s bytes (``SnapshotMoved`` if it is gone)."""
    try:
        return await storage.get(key)
    except NotFound:
        raise SnapshotMoved(f"{what} {key} is gone: the queue moved on") from None


async def read_spilled(storage: Storage, ref: SegmentRef) -> list[StoredJob]:
    """The live jobs (not loaded, not cancelled) of ``ref``'s object, in seq order
    (``CorruptDocument`` if the object is not what ``ref`` recorded)."""
    return live_jobs(ref, decode_checked(ref, await _get(storage, ref.key, "segment")))


async def read_delayed(storage: Storage, ref: DelayedRef) -> list[StoredJob]:
    """The live jobs of the delayed object ``ref`` names, in claim order ((priority,
    seq); the object itself is in due order)."""
    obj = SegmentLines.checked_delayed(ref, await _get(storage, ref.key, "delayed object"))
    return sorted(live_delayed(ref, obj.jobs(0, len(obj))), key=sort_key)


async def read_dead_segment(storage: Storage, ref: DeadRef) -> list[StoredJob]:
    """The jobs of the dead segment ``ref`` names, checked, in claim order (the
    object itself is in seq order)."""
    return sorted(read_dead(ref, await _get(storage, ref.key, "dead segment")), key=sort_key)


async def read_waiting(storage: Storage, ref: WaitingRef) -> list[StoredJob]:
    """The waiting children of ``ref``'s object not cancelled while cold, checked,
    in claim order."""
    data = await _get(storage, ref.key, "object of waiting children")
    cancelled = set(ref.cancelled)
    jobs = read_waiting_object(ref, data)
    return sorted((job for job in jobs if job.id not in cancelled), key=sort_key)


def spilled_count(doc: Document, queue: str | None = None) -> int:
    """Live jobs in segments and in objects of delayed jobs (of ``queue``, or of every
    queue)."""
    return sum(ref.remaining for ref in doc.segments if queue is None or ref.queue == queue) + sum(
        ref.remaining for ref in doc.delayed if queue is None or ref.queue == queue
    )


def cold_count(doc: Document, queue: str | None = None, status: str | None = None) -> int:
    """Jobs in objects (of ``queue``; in ``status``, None: any), from the references:
    queued ones in segments and delayed objects, dead ones in dead segments,
    waiting children in objects."""
    total = spilled_count(doc, queue) if status in (None, "queued") else 0
    if status in (None, "dead"):
        total += doc.dead.count(queue)
    if status in (None, "waiting"):
        total += doc.waiting_cold.jobs(queue)
    return total


def has_cold(doc: Document, status: str | None = None) -> bool:
    """``doc`` references objects that may hold jobs in ``status`` (None: any)."""
    return (
        (status in (None, "queued") and bool(doc.segments or doc.delayed))
        or (status in (None, "dead") and bool(doc.dead))
        or (status in (None, "waiting") and bool(doc.waiting_cold))
    )


@dataclass(frozen=True, slots=True)
class _Source:
    """An object a listing may read: the claim-order bounds of its live jobs."""

    low: SortKey
    high: SortKey
    key: str
    read: Callable[[], Awaitable[list[StoredJob]]]
    #: its reference, when its bounds are loose (a dead or waiting object: every
    #: page within its queue reaches it), so a listing of many pages reads it once
    memo: object = None


def _sources(
    storage: Storage, doc: Document, queue: str | None, status: str | None
) -> list[_Source]:
    """The objects (of ``queue``) with live jobs in ``status`` (None: any), by
    their lowest job in claim order: segments and objects of delayed jobs, dead
    segments, objects of waiting children.  A dead segment's bounds are its
    seq range within its priorities; a waiting object's, its seqs within its
    priorities (a reference written before those were recorded: any priority,
    and for a waiting object its whole queue)."""
    out: list[_Source] = []
    if status in (None, "queued"):
        out.extend(_queued_sources(storage, doc, queue))
    if status in (None, "dead"):
        out.extend(
            _Source(
                (r.queue, _or(r.min_priority, PRIORITY_MIN), r.first_seq),
                (r.queue, _or(r.max_priority, PRIORITY_MAX), r.last_seq),
                r.key,
                partial(read_dead_segment, storage, r),
                r,
            )
            for r in doc.dead
            if queue is None or r.queue == queue
        )
    if status in (None, "waiting"):
        out.extend(
            _Source(
                (r.queue, _or(r.min_priority, PRIORITY_MIN), _or(r.min_seq, -1)),
                (r.queue, _or(r.max_priority, PRIORITY_MAX), _or(r.max_seq, 2**63)),
                r.key,
                partial(read_waiting, storage, r),
                r,
            )
            for r in doc.waiting_cold
            if (queue is None or r.queue == queue) and r.live > 0
        )
    return sorted(out, key=lambda s: s.low)


def _or(bound: int | None, loose: int) -> int:
    """A reference's bound, or the loose one when it recorded none."""
    return loose if bound is None else bound


def _queued_sources(storage: Storage, doc: Document, queue: str | None) -> list[_Source]:
    """The segments and the objects of delayed jobs (of ``queue``) with live jobs."""
    out = [
        _Source(
            (r.queue, r.priority, r.next_seq),
            (r.queue, r.priority, r.last_seq),
            r.key,
            partial(read_spilled, storage, r),
        )
        for r in doc.segments
        if (queue is None or r.queue == queue) and r.remaining > 0
    ]
    out.extend(
        _Source(
            (d.queue, d.min_priority, d.min_seq),
            (d.queue, d.max_priority, d.max_seq),
            d.key,
            partial(read_delayed, storage, d),
        )
        for d in doc.delayed
        if (queue is None or d.queue == queue) and d.remaining > 0
    )
    return out


async def jobs_after(
    storage: Storage,
    doc: Document,
    *,
    after: SortKey | None,
    limit: int,
    queue: str | None = None,
    status: str | None = None,
    candidates: Iterable[StoredJob] | None = None,
    reads: dict[object, list[StoredJob]] | None = None,
) -> list[Listed]:
    """The first ``limit`` jobs after ``after`` in claim order, of ``doc`` and its
    segments, that match ``queue`` and ``status`` (``candidates``: the document
    jobs to consider, when the caller has narrowed them; ``reads``: the jobs of
    loosely bounded objects read by earlier pages, by reference, kept for the
    next).  Reads only the
    segments the page reaches; ``SnapshotMoved`` if one is gone."""
    pool = doc.jobs.values() if candidates is None else candidates
    docs = heapq.nsmallest(
        limit,
        (
            j
            for j in pool
            if (queue is None or j.queue == queue)
            and (status is None or j.status == status)
            and (after is None or sort_key(j) > after)
        ),
        key=sort_key,
    )
    page = [Listed(job) for job in docs]
    if not has_cold(doc, status):
        return page
    for source in _sources(storage, doc, queue, status):
        if after is not None and source.high <= after:
            continue
        if len(page) >= limit and source.low > sort_key(page[limit - 1].job):
            break  # this object and every later one start past a full page
        jobs = None if reads is None or source.memo is None else reads.get(source.memo)
        if jobs is None:
            jobs = await source.read()
            if reads is not None and source.memo is not None:
                reads[source.memo] = jobs
        spilled = [
            Listed(job, source.key) for job in jobs if after is None or sort_key(job) > after
        ]
        page = heapq.nsmallest(limit, [*page, *spilled], key=lambda listed: sort_key(listed.job))
    return page


async def list_jobs(
    storage: Storage,
    read_document: Callable[[], Awaitable[Document]],
    doc: Document,
    *,
    after: SortKey | None,
    limit: int,
    queue: str | None = None,
    status: str | None = None,
    reads: dict[object, list[StoredJob]] | None = None,
) -> tuple[Document, list[Listed]]:
    """:func:`jobs_after`, reading the document again (a few times) when the
    snapshot moved on; returns the document the page was read from."""
    page = partial(jobs_after, limit=limit, queue=queue, status=status, reads=reads)
    for _ in range(4):
        try:
            return doc, await page(storage, doc, after=after)
        except SnapshotMoved:
            doc = await read_document()
    return doc, await page(storage, doc, after=after)


async def find_spilled(storage: Storage, doc: Document, job_id: str) -> StoredJob | None:
    """The live spilled job ``job_id`` (or the one holding idempotency key
    ``job_id``), reading the segments whose id bounds admit it; then a dead or
    waiting job ``job_id`` in a dead segment or an object of waiting children."""
    held = doc.segments.keys.get(job_id) or doc.delayed.keys.get(job_id)
    wanted = held if held is not None else job_id
    for delayed in doc.delayed:
        if not delayed.min_id <= wanted <= delayed.max_id:
            continue
        try:
            lines = SegmentLines.checked_delayed(delayed, await storage.get(delayed.key))
        except NotFound:
            continue
        i = lines.find(wanted)
        if i is not None and i >= delayed.loaded and wanted not in delayed.cancelled:
            (job,) = lines.jobs(i, i + 1)
            return job
    for ref in doc.segments:
        if not ref.min_id <= wanted <= ref.max_id:
            continue
        try:
            data = await storage.get(ref.key)
        except NotFound:
            continue
        obj = SegmentLines.checked(ref, data)
        i = obj.find(wanted)
        if i is not None and i >= ref.loaded and wanted not in ref.cancelled:
            (job,) = obj.jobs(i, i + 1)
            return job
    return await _find_dead_or_waiting(storage, doc, wanted)


async def _find_dead_or_waiting(storage: Storage, doc: Document, job_id: str) -> StoredJob | None:
    """Job ``job_id`` in a dead segment or an object of waiting children whose id
    bounds admit it (an object gone since the snapshot is passed over)."""
    reads: list[Callable[[], Awaitable[list[StoredJob]]]] = [
        partial(read_dead_segment, storage, r) for r in doc.dead if r.min_id <= job_id <= r.max_id
    ]
    reads.extend(
        partial(read_waiting, storage, r)
        for r in doc.waiting_cold
        if r.min_id <= job_id <= r.max_id and job_id not in r.cancelled
    )
    for read in reads:
        try:
            jobs = await read()
        except SnapshotMoved:
            continue
        found = next((job for job in jobs if job.id == job_id), None)
        if found is not None:
            return found
    return None


def cursor_text(key: SortKey) -> str:
    """A cursor as people type it: ``QUEUE:PRIORITY:SEQ``."""
    return f"{key[0]}:{key[1]}:{key[2]}"


def parse_cursor(text: str, field: str = "after") -> SortKey:
    """``QUEUE:PRIORITY:SEQ`` (a queue name may hold ``:``) as a cursor."""
    queue, _, rest = text.rpartition(":")
    queue, _, priority = queue.rpartition(":")
    try:
        if not queue:
            raise ValueError(text)
        return (queue, int(priority), int(rest))
    except ValueError:
        raise InvalidInput(f"{text!r} is not QUEUE:PRIORITY:SEQ", field=field) from None
