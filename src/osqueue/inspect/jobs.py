"""Job lists and job detail, read from a snapshot; one job as JSON.

Lists are in claim order within a queue (queue, then priority, then seq) and
paged by key, not by offset: a page is "the next ``limit`` jobs after this
(queue, priority, seq)", so paging deep into a backlog never counts the jobs
before the page, and a job pushed meanwhile never shifts the pages.

:class:`JobSource` is the interface the pages use.  :class:`DocumentJobs`
answers from the document in memory: one pass over the candidate jobs per page,
keeping only the ``limit`` smallest keys after the cursor (index sets narrow
the candidates for claimed and done jobs, and ids and keys are looked up
directly).  :class:`SegmentedJobs` adds the jobs of a deep backlog that sit in
segment objects: per queue and priority the claim order is the document's
jobs below the first segment, the segments in seq order, then the rest, and a
segment's reference carries its seq range and its count, so a page after a
cursor reads only the segment objects the page falls in
(:mod:`osqueue.broker.cold.read`), and totals count spilled jobs from the
references.  Delayed objects, dead segments and objects of waiting children
join the same listing (``--status dead``/``waiting`` read only those kinds).
"""

from __future__ import annotations

import base64
import heapq
import json
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any, Literal, Protocol

from osqueue.broker.cold.read import (
    Listed,
    SnapshotMoved,
    SortKey,
    cold_count,
    find_spilled,
    has_cold,
    jobs_after,
    list_jobs,
    sort_key,
)
from osqueue.broker.objects.payloads import BadPayload, read_payload
from osqueue.errors import InvalidInput, JobNotFound
from osqueue.inspect.document import read_blob
from osqueue.state import Document, StoredJob, decode
from osqueue.storage import from_url
from osqueue.storage.port import Storage

STATUSES = ("waiting", "queued", "claimed", "dead", "done")
#: the states ``osqueue jobs --status`` lists
LISTED_STATES = ("waiting", "queued", "claimed", "dead", "done")
MAX_LIMIT = 500
#: the most payload bytes a job page shows
PREVIEW_BYTES = 16 * 1024


@dataclass(frozen=True, slots=True)
class JobFilter:
    queue: str | None = None
    status: str | None = None
    #: an exact job id or idempotency key
    text: str | None = None

    def __post_init__(self) -> None:
        if self.status is not None and self.status not in STATUSES:
            raise InvalidInput(
                f"{self.status!r} is not one of {', '.join(STATUSES)}", field="status"
            )

    def matches(self, job: StoredJob) -> bool:
        return (self.queue is None or job.queue == self.queue) and (
            self.status is None or job.status == self.status
        )


@dataclass(frozen=True, slots=True)
class JobTimes:
    """What a job list and a job page say of a job's time, from one place, so
    the two never disagree: the status word (``delayed`` for a queued job whose
    ``run_at`` is still ahead), when a delayed job runs, when a dead job died,
    and where its age counts from (a dead job's from its death)."""

    #: queued, delayed, claimed, done, dead, waiting
    status: str
    created_at: float
    #: when a delayed job becomes claimable (None: not delayed)
    runs_at: float | None
    #: when a dead job died (None: not dead, or it died before this was recorded)
    died_at: float | None

    @property
    def age_from(self) -> float | None:
        """The start of the age shown: death for a dead job, else its push."""
        if self.status == "dead":
            return self.died_at
        return self.created_at


def job_times(job: StoredJob, now: float) -> JobTimes:
    run_at = job.run_at.timestamp() if job.run_at is not None else None
    delayed = job.status == "queued" and run_at is not None and run_at > now
    return JobTimes(
        status="delayed" if delayed else job.status,
        created_at=job.created_at.timestamp(),
        runs_at=run_at if delayed else None,
        died_at=job.done_at.timestamp() if job.status == "dead" and job.done_at else None,
    )


def encode_cursor(key: SortKey) -> str:
    """A page cursor as URL-safe text (queue names may hold any character)."""
    return base64.urlsafe_b64encode(json.dumps(list(key)).encode()).decode().rstrip("=")


def decode_cursor(text: str) -> SortKey:
    try:
        raw = base64.urlsafe_b64decode(text + "=" * (-len(text) % 4))
        queue, priority, seq = json.loads(raw)
    except (ValueError, TypeError) as exc:
        raise InvalidInput("is not a cursor from this dashboard", field="after") from exc
    if not (isinstance(queue, str) and isinstance(priority, int) and isinstance(seq, int)):
        raise InvalidInput("is not a cursor from this dashboard", field="after")
    return (queue, priority, seq)


@dataclass(frozen=True, slots=True)
class JobPage:
    jobs: list[StoredJob]
    #: the cursor of the next page (None: this is the last)
    next_after: SortKey | None
    #: how many jobs match the filter in all
    total: int


class JobSource(Protocol):
    """Pages of jobs in claim order (of the document, and of its segments)."""

    async def page(self, where: JobFilter, after: SortKey | None, limit: int) -> JobPage: ...

    async def get(self, job_id: str) -> StoredJob | None: ...


class DocumentJobs:
    """Jobs in one decoded document."""

    def __init__(self, doc: Document) -> None:
        self.doc = doc

    async def get(self, job_id: str) -> StoredJob | None:
        return self.doc.jobs.get(job_id)

    async def page(self, where: JobFilter, after: SortKey | None, limit: int) -> JobPage:
        if not 1 <= limit <= MAX_LIMIT:
            raise InvalidInput(f"must be between 1 and {MAX_LIMIT}", field="limit")
        seen = [0]  # every candidate that matches, counted as the pass goes
        matching = _counting((j for j in self._candidates(where) if where.matches(j)), seen)
        later = (j for j in matching if after is None or sort_key(j) > after)
        jobs = heapq.nsmallest(limit + 1, later, key=sort_key)  # consumes every candidate
        more = len(jobs) > limit
        jobs = jobs[:limit]
        return JobPage(
            jobs=jobs,
            next_after=sort_key(jobs[-1]) if more else None,
            total=seen[0],
        )

    def _candidates(self, where: JobFilter) -> Iterable[StoredJob]:
        doc, index = self.doc, self.doc.index
        if where.text:
            found = doc.jobs.get(where.text)
            if found is not None:
                return [found]
            held = index.keys.get(where.text)
            if held is not None:
                return [doc.jobs[held]]
            return [j for j in doc.jobs.values() if j.key == where.text]
        if where.status == "claimed":
            return [doc.jobs[i] for i in index.claimed if i in doc.jobs]
        if where.status == "done":
            return [doc.jobs[i] for i in index.done if i in doc.jobs]
        return doc.jobs.values()


class SegmentedJobs:
    """Jobs in one decoded document and in the segment objects it references
    (read from ``storage`` as a page reaches them).  A segment loaded and
    deleted since the snapshot (``SnapshotMoved``) makes the page answer from
    the document alone, and ``moved`` say so: the next snapshot has them."""

    def __init__(self, doc: Document, storage: Storage) -> None:
        self.doc = doc
        self.storage = storage
        self._docs = DocumentJobs(doc)
        #: a segment was gone: this snapshot is older than what is stored
        self.moved = False

    async def get(self, job_id: str) -> StoredJob | None:
        found = await self._docs.get(job_id)
        if found is None and has_cold(self.doc):
            found = await find_spilled(self.storage, self.doc, job_id)
        return found

    async def page(self, where: JobFilter, after: SortKey | None, limit: int) -> JobPage:
        doc = self.doc
        if not has_cold(doc, where.status):
            return await self._docs.page(where, after, limit)
        if where.text:
            found = await self._docs.page(where, after, limit)
            if found.jobs:
                return found
            job = await find_spilled(self.storage, doc, where.text)
            jobs = [job] if job is not None and where.matches(job) else []
            return JobPage(jobs=jobs, next_after=None, total=len(jobs))
        if not 1 <= limit <= MAX_LIMIT:
            raise InvalidInput(f"must be between 1 and {MAX_LIMIT}", field="limit")
        total = sum(1 for j in doc.jobs.values() if where.matches(j))
        total += cold_count(doc, where.queue, where.status)
        try:
            listed = await jobs_after(
                self.storage,
                doc,
                after=after,
                limit=limit + 1,
                queue=where.queue,
                status=where.status,
            )
        except SnapshotMoved:
            self.moved = True
            return await self._docs.page(where, after, limit)
        jobs = [item.job for item in listed]
        more = len(jobs) > limit
        jobs = jobs[:limit]
        return JobPage(jobs=jobs, next_after=sort_key(jobs[-1]) if more else None, total=total)


def _counting(jobs: Iterable[StoredJob], counts: list[int]) -> Iterable[StoredJob]:
    for job in jobs:
        counts[0] += 1
        yield job


# -------------------------------------------------------- whole listings (osqueue jobs)

#: jobs read per page when --limit 0 asks for all of them
_PAGE = 10_000


async def list_page(
    url: str, queue: str | None, status: str | None, limit: int, after: SortKey | None
) -> tuple[list[Listed], int]:
    """The page (every job when ``limit`` is 0), and how many matching jobs follow
    it (from the first page: a count; after a cursor: 1 if any do)."""
    storage = from_url(url)
    try:

        async def read() -> Document:
            return decode((await read_blob(storage, url)).data)

        doc = await read()
        first = after is None
        shown: list[Listed] = []
        reads: dict[object, list[StoredJob]] = {}  # dead and waiting objects: read once
        while True:
            want = limit - len(shown) + 1 if limit else _PAGE
            doc, page = await list_jobs(
                storage,
                read,
                doc,
                after=after,
                limit=want,
                queue=queue,
                status=status,
                reads=reads,
            )
            shown.extend(page)
            if len(page) < want or (limit and len(shown) > limit):
                break
            after = sort_key(page[-1].job)
    finally:
        await storage.close()
    if not limit or len(shown) <= limit:
        return shown, 0
    left = matching(doc, queue, status) - limit if first else 1
    return shown[:limit], max(1, left)


async def payload_by_id(url: str, job_id: str) -> bytes:
    """Job ``job_id``'s payload (in the document or a segment), read and checked."""
    storage = from_url(url)
    try:
        doc = decode((await read_blob(storage, url)).data)
        job = doc.jobs.get(job_id)
        if job is None:
            job = await find_spilled(storage, doc, job_id)
        if job is None:
            raise JobNotFound(f"no live or dead job {job_id!r} at {url}")
        return await read_payload(storage, job)
    finally:
        await storage.close()


def matching(doc: Document, queue: str | None, status: str | None) -> int:
    """How many jobs of ``queue`` in ``status`` (None: any) the document and its
    segments hold, from the index and the segment references (no object read);
    waiting children in objects count from their references too."""
    index = doc.index
    cold = doc.segments.queues() | doc.delayed.queues()
    names = [queue] if queue is not None else sorted(set(index.queues()) | cold)
    statuses = [status] if status is not None else list(LISTED_STATES)
    total = sum(index.count(q, s) for q in names for s in statuses)
    return total + cold_count(doc, queue, status)


def job_dict(job: StoredJob, *, spilled: bool = False) -> dict[str, Any]:
    """One job as JSON: the document's fields, times as epoch seconds, no payload
    bytes; ``spilled``: it sits in a segment object (a deep backlog)."""
    claim = job.claim
    return {
        "id": job.id,
        "queue": job.queue,
        "status": job.status,
        "priority": job.priority,
        "seq": job.seq,
        "spilled": spilled,
        "attempts": job.attempts,
        "max_attempts": job.max_attempts,
        "key": job.key,
        "created_at": job.created_at.timestamp(),
        "run_at": job.run_at.timestamp() if job.run_at else None,
        "first_claimed_at": job.first_claimed_at.timestamp() if job.first_claimed_at else None,
        "worker": claim.worker if claim else None,
        "token": claim.token if claim else None,
        "heartbeat_at": claim.heartbeat_at.timestamp() if claim else None,
        "last_error": job.last_error,
        "payload_bytes": job.payload_size,
        "payload_ref": job.payload_ref,
        "group": job.group,
        "after": list(job.after),
    }


# --------------------------------------------------------------------------- payloads

PreviewKind = Literal["json", "text", "binary", "empty", "missing", "failed"]


@dataclass(frozen=True, slots=True)
class Preview:
    kind: PreviewKind
    text: str
    #: the payload's full size in bytes
    size: int
    truncated: bool


def preview(payload: bytes | BadPayload, cap: int = PREVIEW_BYTES) -> Preview:
    """The payload as JSON (indented), UTF-8 text or a hex dump, cut at ``cap`` bytes;
    a payload object that is gone or failed its check shows why, never its bytes."""
    if isinstance(payload, BadPayload):
        if payload.missing:
            return Preview("missing", "", 0, False)
        return Preview("failed", str(payload), 0, False)
    size = len(payload)
    if not payload:
        return Preview("empty", "", 0, False)
    head = payload[:cap]
    truncated = size > cap
    if not truncated:
        try:
            parsed = json.loads(head)
        except ValueError:
            pass
        else:
            return Preview("json", json.dumps(parsed, indent=2, ensure_ascii=False), size, False)
    try:
        text = head.decode("utf-8")
    except UnicodeDecodeError as exc:
        if truncated and exc.start >= len(head) - 3:  # cut inside a character
            text = head[: exc.start].decode("utf-8")
        else:
            return Preview("binary", _hexdump(head[:1024]), size, size > 1024)
    return Preview("text", text, size, truncated)


def _hexdump(data: bytes) -> str:
    lines = []
    for offset in range(0, len(data), 16):
        chunk = data[offset : offset + 16]
        hexes = " ".join(f"{b:02x}" for b in chunk)
        shown = "".join(chr(b) if 32 <= b < 127 else "." for b in chunk)
        lines.append(f"{offset:08x}  {hexes:<47}  {shown}")
    return "\n".join(lines)


async def payload_of(job: StoredJob, storage: Storage) -> bytes | BadPayload:
    """The job's payload: inline, or its object under ``payloads/`` read and checked
    (:func:`~osqueue.broker.objects.payloads.read_payload`); why not, when it is gone or
    fails its check."""
    try:
        return await read_payload(storage, job)
    except BadPayload as exc:
        return exc
