"""The in-memory queue document: header fields, jobs by id, their index, and
the segment references and those to objects of delayed jobs
(``delayed``, a :class:`~osqueue.state.cold_delayed.DelayedCold`).

``queue_id`` names the document's incarnation: drawn when the broker creates
the document, kept by every commit and takeover, and part of every archive key
(:mod:`osqueue.broker.archive.objects`), so a queue created again after ``queue.json``
was deleted never takes an earlier incarnation's archive objects for its own.

A :class:`Document` is treated as a value: :func:`osqueue.state.apply` returns
a new one (or, for the broker's hot path, updates one it owns outright).  Each
job's encoded bytes are cached, so encoding a large document re-encodes only
the jobs a commit changed.

Size accounting (``max_document_bytes``, ``stats().document_bytes``): the
document knows the exact encoded size of every cached fragment (jobs,
tombstones, references), and only jobs changed since their last encode are
not cached.  :meth:`Document.size_bytes` encodes those (work the next encode
would do anyway; they stay cached) and is the exact length of
:func:`~osqueue.state.codec.encode`'s output.  :meth:`Document.size_upper`,
what a push is checked against, is the same but for the header, taken from
its last encoding plus a slack for digits that grew since, so it never
falls below what is written and is within a few dozen bytes of it.
"""

from __future__ import annotations

import copy
import functools
import re
from collections.abc import Callable, Iterable, Iterator, Sequence
from datetime import UTC, datetime

import msgspec

from osqueue.state.cold_delayed import DelayedCold
from osqueue.state.dead_letters import DeadLetters
from osqueue.state.finished_jobs import FinishedRecord
from osqueue.state.history import HistorySample
from osqueue.state.index import Index
from osqueue.state.model import (
    FORMAT,
    BrokerInfo,
    Counters,
    QueueTotals,
    StoredJob,
    StoredSettings,
)
from osqueue.state.schedules import Schedules
from osqueue.state.segments import Segments
from osqueue.state.waiting_refs import ColdWaiting

_encoder = msgspec.json.Encoder()
#: a job's (or any value's) JSON bytes, as the document stores them
encode_job: Callable[[StoredJob], bytes] = _encoder.encode
#: a tombstone id as a JSON string (quoted and escaped)
_encode_id = _encoder.encode

#: The header's encoded length may grow after it was measured (a version, a
#: counter or a seq gains digits); this covers that in :meth:`Document.size_upper`.
HEAD_SLACK_BYTES = 64
#: ``,"tombstones":{`` ... ``,"jobs":[`` ... ``]}``: the punctuation around the sections
_TOMBSTONES_OPEN = len(b',"tombstones":{')
_JOBS_OPEN = len(b',"jobs":[')
_QUEUES_OPEN = len(b',"queues":{')
_SCHEDULES_OPEN = len(b',"schedules":[')
_FINISHED_OPEN = len(b',"finished":[')
#: the header's fields that are always written, in :class:`Header`'s order
_HEAD = (
    b'{"format":%d,"version":%d,"broker":%b,"next_token":%d,"next_seq":%d,'
    b'"archived_through":%d,"stats":%b'
)


class Document:
    __slots__ = (
        "_broker_json",
        "_dirty",
        "_frags",
        "_head_len",
        "_history_json",
        "_recent_blob",
        "archived_through",
        "broker",
        "dead",
        "delayed",
        "dependencies_at",
        "finished",
        "history",
        "index",
        "jobs",
        "jobs_bytes",
        "next_seq",
        "next_token",
        "queue_id",
        "queue_settings",
        "queue_totals",
        "recent",
        "schedules",
        "segments",
        "spill_scanned",
        "stats",
        "version",
        "waiting_cold",
    )

    def __init__(
        self,
        *,
        version: int = 0,
        broker: BrokerInfo | None = None,
        next_token: int = 1,
        next_seq: int = 1,
        archived_through: int = 0,
        stats: Counters | None = None,
        recent: dict[str, int] | None = None,
        jobs: dict[str, StoredJob] | None = None,
        index: Index | None = None,
        segments: Segments | None = None,
        frags: dict[str, bytes] | None = None,
        dirty_ids: set[str] | None = None,
        recent_blob: bytearray | None = None,
        jobs_bytes: int | None = None,
        history: tuple[HistorySample, ...] = (),
        queue_settings: dict[str, StoredSettings] | None = None,
        schedules: Schedules | None = None,
        finished: FinishedRecord | None = None,
        dependencies_at: datetime | None = None,
        queue_totals: dict[str, QueueTotals] | None = None,
        queue_id: str | None = None,
    ) -> None:
        self.queue_id = queue_id
        #: one sample per minute for the last hour (:mod:`osqueue.state.history`)
        self.history = history
        self.version = version
        self.broker = broker
        self.next_token = next_token
        self.next_seq = next_seq
        self.archived_through = archived_through
        self.stats = stats if stats is not None else Counters()
        self.recent = recent if recent is not None else {}
        self.jobs = jobs if jobs is not None else {}
        self.index = index if index is not None else Index.build(self.jobs.values())
        #: the segment references (deep backlogs; see :mod:`osqueue.state.segments`)
        self.segments = segments if segments is not None else Segments()
        #: queue -> its settings (:mod:`osqueue.state.limits`); replaced, never edited
        self.queue_settings: dict[str, StoredSettings] = queue_settings or {}
        #: the known queues and their counters (a queue stays listed until removed)
        self.queue_totals: dict[str, QueueTotals] = queue_totals or {}
        #: the periodic jobs (:mod:`osqueue.state.schedules`)
        self.schedules = schedules if schedules is not None else Schedules()
        #: the record of finished jobs and their results (:mod:`osqueue.state.finished_jobs`)
        self.finished = finished if finished is not None else FinishedRecord()
        #: broker time of the last push that named parents: for ``dependency_window_s``
        #: after it, every job that finishes is recorded (:func:`osqueue.state.results.record`)
        self.dependencies_at = dependencies_at
        #: cold objects: of waiting children (.waiting_refs), dead segments (.dead_letters)
        self.waiting_cold, self.dead = ColdWaiting(), DeadLetters()
        self.delayed = DelayedCold()  # delayed jobs in objects (.cold_delayed)
        if frags is None:
            frags = dict.fromkeys(self.jobs, b"")
            dirty = set(self.jobs)
        else:
            dirty = set(dirty_ids) if dirty_ids is not None else set()
        #: encoded bytes per job, in the same order as ``jobs``; ``_dirty`` ids are
        #: stale and hold ``b""``
        self._frags: dict[str, bytes] = frags
        self._dirty: set[str] = dirty
        #: the summed length of the cached fragments (exact after :meth:`fragments`)
        self.jobs_bytes = jobs_bytes if jobs_bytes is not None else sum(map(len, frags.values()))
        #: the encoded inside of the ``recent`` map, kept in step by add_tombstone
        self._recent_blob: bytearray | None = recent_blob
        self._head_len: int | None = None  # the header's length when it was last encoded
        #: the broker and the history last encoded into the header, and their bytes
        self._broker_json: tuple[BrokerInfo | None, bytes] = (None, b"null")
        self._history_json: tuple[tuple[HistorySample, ...], bytes] = ((), b"[]")
        #: the spill planner's memo (queue -> ``next_seq`` and queued count at its last scan,
        #: the jobs its largest tail needs, its streams' last references' last seq)
        self.spill_scanned: dict[str, tuple[int, int, int, tuple[tuple[int, int], ...]]] = {}

    @classmethod
    def empty(cls) -> Document:
        return cls()

    def copy(self) -> Document:
        """A copy that shares the (immutable) jobs but none of the containers."""
        new = Document(
            version=self.version,
            broker=self.broker,
            next_token=self.next_token,
            next_seq=self.next_seq,
            archived_through=self.archived_through,
            stats=self.stats,
            recent=dict(self.recent),
            jobs=dict(self.jobs),
            index=self.index.copy(),
            segments=self.segments.copy(),
            frags=dict(self._frags),
            dirty_ids=set(self._dirty),
            recent_blob=None if self._recent_blob is None else bytearray(self._recent_blob),
            jobs_bytes=self.jobs_bytes,
            history=self.history,
            queue_settings=dict(self.queue_settings),
            schedules=self.schedules.copy(),
            finished=self.finished.copy(),
            dependencies_at=self.dependencies_at,
            queue_totals={q: copy.copy(t) for q, t in self.queue_totals.items()},
            queue_id=self.queue_id,
        )
        new._head_len, new.waiting_cold = self._head_len, self.waiting_cold.copy()
        new._broker_json, new._history_json = self._broker_json, self._history_json
        new.spill_scanned, new.dead = dict(self.spill_scanned), self.dead.copy()
        new.delayed = self.delayed.copy()
        return new

    # -- job updates keep the index and the encoding cache in step ------------

    def put_job(self, job: StoredJob, now_s: float) -> None:
        job_id = job.id
        jobs = self.jobs
        old = jobs.get(job_id)
        jobs[job_id] = job
        frags = self._frags
        if old is not None:
            frag = frags[job_id]
            if frag:
                self.jobs_bytes -= len(frag)
            self.index.remove(old)
        frags[job_id] = b""
        self._dirty.add(job_id)
        self.index.add(job, now_s)

    def put_encoded(self, job: StoredJob, frag: bytes, now_s: float) -> None:
        """Add a new job whose encoding the caller has already made (a push)."""
        self.jobs[job.id] = job
        self._frags[job.id] = frag
        self.jobs_bytes += len(frag)
        self.index.add(job, now_s)

    def drop_job(self, job_id: str) -> StoredJob | None:
        old = self.jobs.pop(job_id, None)
        if old is not None:
            self.index.remove(old)
            self.jobs_bytes -= len(self._frags.pop(job_id))
            self._dirty.discard(job_id)
        return old

    def drop_ready(self, leaving: Sequence[StoredJob]) -> None:
        """Remove queued jobs that are in the document as given (a spill's): one pass
        over them, the index told once."""
        jobs, frags, dirty = self.jobs, self._frags, self._dirty
        size = 0
        for job in leaving:
            del jobs[job.id]
            size += len(frags.pop(job.id))
            if dirty:
                dirty.discard(job.id)
        self.jobs_bytes -= size
        self.index.remove_queued(leaving)

    def put_loaded(self, jobs: Sequence[StoredJob], lines: Sequence[bytes]) -> None:
        """Add ready queued jobs of one queue, none in the document, with their
        encodings (a load's): :meth:`drop_ready`'s twin, the index told once."""
        mine, frags = self.jobs, self._frags
        for job, line in zip(jobs, lines, strict=True):
            mine[job.id] = job
            frags[job.id] = line
        self.jobs_bytes += sum(map(len, lines))
        self.index.add_ready(jobs)

    def fragments(self, encode: Callable[[StoredJob], bytes] = encode_job) -> Iterable[bytes]:
        """Every job's encoded bytes in document order (re-encoding only changed jobs)."""
        self._flush(encode)
        return self._frags.values()

    def encoded_jobs(self, jobs: Sequence[StoredJob]) -> tuple[bytes, ...]:
        """The encoded bytes of ``jobs`` (in the document), as :meth:`encoded_job`."""
        frags = self._frags
        lines = tuple([frags[job.id] for job in jobs])
        if all(lines):
            return lines
        return tuple(self.encoded_job(job.id) for job in jobs)

    def encoded_job(self, job_id: str) -> bytes:
        """One job's encoded bytes (cached; a segment object reuses them)."""
        frag = self._frags[job_id]
        if not frag:
            frag = self._frags[job_id] = encode_job(self.jobs[job_id])
            self.jobs_bytes += len(frag)
            self._dirty.discard(job_id)
        return frag

    def _flush(self, encode: Callable[[StoredJob], bytes] = encode_job) -> None:
        dirty = self._dirty
        if dirty:
            frags, jobs = self._frags, self.jobs
            added = 0
            for job_id in dirty:
                frag = frags[job_id] = encode(jobs[job_id])
                added += len(frag)
            self.jobs_bytes += added
            dirty.clear()

    # -- the header ----------------------------------------------------------------

    def header_bytes(self) -> bytes:
        """Everything but the jobs, tombstones and references, as one JSON object
        (what :func:`~osqueue.state.codec.encode` starts from; see :func:`_header`)."""
        head = _header(self)
        self._head_len = len(head)
        return head

    def set_queue_settings(self, queue: str, settings: StoredSettings | None) -> None:
        """Replace (None: drop) one queue's settings (the header's length is stale then)."""
        if settings is None:
            self.queue_settings.pop(queue, None)
        else:
            self.queue_settings[queue] = settings
        self._head_len = None

    def note_dependencies(self, now_dt: datetime) -> None:
        """A push named parents at ``now_dt`` (the header's length is stale then)."""
        if self.dependencies_at != now_dt:
            self.dependencies_at = now_dt
            self._head_len = None

    # -- dedupe tombstones ----------------------------------------------------------
    #
    # ``recent`` maps each remembered id to a second (Unix time): the second its
    # job was created, or a later one.  Seconds never decrease in insertion order,
    # so the encoded section groups ids by second and grows by appending:
    # ``"2026-11-22T04:44:12Z":["id1","id2"],"2026-11-22T04:44:13Z":["id3"``
    # (the last list is left open; the encoder closes it).

    def add_tombstone(self, job_id: str, created_at: datetime) -> None:
        """Remember that ``job_id`` existed (a retried push of it is applied once)."""
        recent = self.recent
        if job_id in recent:
            return
        second = int(created_at.timestamp())
        last = next(reversed(recent.values())) if recent else None
        if last is not None and second < last:
            second = last  # a later second only keeps the tombstone a little longer
        recent[job_id] = second
        if self._recent_blob is not None:
            _append_tombstone(self._recent_blob, job_id, second, last)

    def set_recent(self, recent: dict[str, int]) -> None:
        self.recent = recent
        self._recent_blob = None

    def recent_section(self) -> bytearray:
        """The encoded inside of the ``tombstones`` map, its last list left open
        (cached, appended to as tombstones are added; the cache itself is returned,
        not a copy: use it before the next change)."""
        blob = self._recent_blob
        if blob is None:
            blob = self._recent_blob = bytearray()
            last: int | None = None
            for job_id, second in self.recent.items():
                _append_tombstone(blob, job_id, second, last)
                last = second
        return blob

    # -- size -----------------------------------------------------------------------

    def set_history(self, history: tuple[HistorySample, ...]) -> None:
        """Replace the per-minute history (the header's cached length is stale then)."""
        if history is not self.history:
            self.history = history
            self._head_len = None

    def size_bytes(self) -> int:
        """The exact length of the document's encoding (jobs changed since the last
        encode are encoded now, and stay cached for the next)."""
        return self._body_bytes() + len(self.header_bytes())

    def size_upper(self) -> int:
        """What a push is checked against ``max_document_bytes`` with: at least
        :meth:`size_bytes`, and at most :data:`HEAD_SLACK_BYTES` above it."""
        head = self._head_len
        if head is None:
            head = len(self.header_bytes())
        return self._body_bytes() + head + HEAD_SLACK_BYTES

    def _body_bytes(self) -> int:
        """The encoding's length but the header's (see ``codec.encode``)."""
        self._flush()
        tombstones = len(self.recent_section())
        n = len(self._frags)
        size = (
            -1  # the header's closing brace
            + _TOMBSTONES_OPEN
            + tombstones
            + (2 if tombstones else 1)
            + _JOBS_OPEN
            + self.jobs_bytes
            + max(0, n - 1)
            + 2
        )
        segments = self.segments  # (each section a queue may not use: one check)
        if segments.streams or segments.aside:
            size += _QUEUES_OPEN + len(segments.section()) + 1
        if self.schedules.by_name:
            size += _SCHEDULES_OPEN + self.schedules.size_bytes() + 1
        if self.finished.entries:
            size += _FINISHED_OPEN + self.finished.size_bytes() + 1
        return size + _cold_bytes(self)

    # -- reading ------------------------------------------------------------------

    def __iter__(self) -> Iterator[StoredJob]:
        return iter(self.jobs.values())

    def __len__(self) -> int:
        return len(self.jobs)

    def __eq__(self, other: object) -> bool:
        return same_value(self, other) if isinstance(other, Document) else NotImplemented

    __hash__ = None  # type: ignore[assignment]

    def __repr__(self) -> str:
        return _describe(self)


def _describe(doc: Document) -> str:
    return (
        f"Document(version={doc.version}, jobs={len(doc.jobs)}, "
        f"segments={sum(1 for _ in doc.segments)}, broker={doc.broker!r})"
    )


def _delayed_bytes(cold: DelayedCold) -> int:
    """What the references to delayed objects add to the encoding (``,"delayed":[...]``)."""
    return len(cold.section()) if cold else 0


def _header(doc: Document) -> bytes:
    """The bytes of the document's :class:`~osqueue.state.model.Header`, field for field.

    It is written every commit, so the parts that seldom change are kept
    encoded: the broker (with its recent commits and workers; the broker
    hands the same :class:`BrokerInfo` until one of them changes) and the
    hour of history, each re-encoded only when another object stands there."""
    broker, broker_json = doc._broker_json
    if broker is not doc.broker:
        broker = doc.broker
        broker_json = _encoder.encode(broker)
        doc._broker_json = (broker, broker_json)
    head = _HEAD % (
        FORMAT,
        doc.version,
        broker_json,
        doc.next_token,
        doc.next_seq,
        doc.archived_through,
        _encoder.encode(doc.stats),
    )
    if doc.queue_id is not None:
        head += b',"queue_id":' + _encoder.encode(doc.queue_id)
    history = doc.history
    if history:
        seen, history_json = doc._history_json
        if seen is not history:
            history_json = _encoder.encode(history)
            doc._history_json = (history, history_json)
        head += b',"history":' + history_json
    if doc.queue_settings:
        head += b',"queue_settings":' + _encoder.encode(doc.queue_settings)
    if doc.dependencies_at is not None:
        head += b',"dependencies_at":' + _encoder.encode(doc.dependencies_at)
    if doc.queue_totals:
        head += b',"queue_totals":' + _encoder.encode(doc.queue_totals)
    return head + b"}"


def held_bytes(doc: Document) -> int | None:
    """The part of :meth:`Document.size_upper` an op on a held job changes (a claim,
    a completion, a failure): the jobs' encodings (the changed ones encoded now,
    and kept for the commit's encode) with their commas, and the brackets of the
    record of finished jobs (its entries aside, as a push's bound leaves them).
    None once the header's length is stale: measure it all again."""
    if doc._head_len is None:
        return None
    doc._flush()
    framed = _FINISHED_OPEN + 1 if doc.finished.entries else 0
    return doc.jobs_bytes + len(doc._frags) + framed


def _cold_bytes(doc: Document) -> int:
    """The encoded length of the cold objects' sections, punctuation included."""
    return (
        doc.waiting_cold.framed_bytes()
        + doc.finished.sealed.framed_bytes()
        + doc.dead.framed_bytes()  # dead segments (osqueue.state.cold_dead)
        + _delayed_bytes(doc.delayed)
    )


def totals(doc: Document, queue: str) -> QueueTotals:
    """``queue``'s counters in ``doc``; a queue not known yet becomes known (the
    header's measured length is stale then).  A known queue costs one dict lookup."""
    found = doc.queue_totals.get(queue)
    if found is None:
        found = doc.queue_totals[queue] = QueueTotals()
        doc._head_len = None
    return found


def forget_queue(doc: Document, queue: str) -> None:
    """``queue`` is known no more: its counters and settings leave the document."""
    doc.queue_totals.pop(queue, None)
    doc.set_queue_settings(queue, None)


def same_value(a: Document, b: Document) -> bool:
    """Two documents hold the same value (what they encode to, caches aside)."""
    return (
        a.version == b.version
        and a.broker == b.broker
        and a.next_token == b.next_token
        and a.next_seq == b.next_seq
        and a.archived_through == b.archived_through
        and a.queue_id == b.queue_id
        and a.stats == b.stats
        and a.history == b.history
        and a.recent == b.recent
        and a.segments == b.segments
        and a.queue_settings == b.queue_settings
        and a.queue_totals == b.queue_totals
        and a.schedules == b.schedules
        and a.dependencies_at == b.dependencies_at
        and a.finished == b.finished
        and a.delayed == b.delayed
        and a.waiting_cold == b.waiting_cold
        and a.dead == b.dead
        and list(a.jobs.items()) == list(b.jobs.items())
    )


def _append_tombstone(blob: bytearray, job_id: str, second: int, last: int | None) -> None:
    """Add ``job_id`` to the encoded section: to the open list of ``last``'s second,
    or in a new list of its own second."""
    if second == last:
        blob += b","
    else:
        if blob:
            blob += b"],"
        blob += _second_key(second)
    blob += _encode_id(job_id)


@functools.lru_cache(maxsize=1024)
def _second_key(second: int) -> bytes:
    """``"YYYY-MM-DDTHH:MM:SSZ":[`` for a second of Unix time."""
    return b'"' + second_text(second).encode() + b'":['


def second_text(second: int) -> str:
    """A tombstone second as written: ``YYYY-MM-DDTHH:MM:SSZ`` (UTC)."""
    t = datetime.fromtimestamp(second, UTC)
    return f"{t.year:04d}-{t.month:02d}-{t.day:02d}T{t.hour:02d}:{t.minute:02d}:{t.second:02d}Z"


_SECOND = re.compile(r"(\d{4})-(\d{2})-(\d{2})T(\d{2}):(\d{2}):(\d{2})Z")


def parse_second(text: str) -> int | None:
    """The Unix second a tombstone key names, or None if it is not one."""
    m = _SECOND.fullmatch(text)
    if m is None:
        return None
    try:
        year, month, day, hour, minute, sec = (int(part) for part in m.groups())
        t = datetime(year, month, day, hour, minute, sec, tzinfo=UTC)
    except ValueError:  # month 13, February 30, ...
        return None
    return int(t.timestamp())
