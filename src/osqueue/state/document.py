"""The in-memory queue document: header fields, jobs by id, and their index.

A :class:`Document` is treated as a value: :func:`osqueue.state.apply` returns
a new one (or, for the broker's hot path, updates one it owns outright).  Each
job's encoded bytes are cached, so encoding a large document re-encodes only
the jobs a commit changed.
"""

from __future__ import annotations

import functools
import re
from collections.abc import Callable, Iterable, Iterator
from datetime import UTC, datetime

import msgspec

from osqueue.state.index import Index
from osqueue.state.model import FORMAT, BrokerInfo, Counters, StoredJob

#: a tombstone id as a JSON string (quoted and escaped)
_encode_id = msgspec.json.Encoder().encode

#: an upper estimate of everything in the document but its jobs and tombstones
#: (format, version, the broker's id, address and lease, counters, punctuation)
HEAD_BYTES = 2048


def job_size(job: StoredJob) -> int:
    """A cheap upper estimate of a job's encoded size (for the document size cap)."""
    payload, key = job.payload, job.key
    return 360 + (len(payload) * 4 // 3 if payload is not None else 0) + (len(key) if key else 0)


class Document:
    __slots__ = (
        "_dirty",
        "_frags",
        "_recent_blob",
        "approx_bytes",
        "archived_through",
        "broker",
        "format",
        "index",
        "jobs",
        "next_seq",
        "next_token",
        "recent",
        "stats",
        "version",
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
        frags: dict[str, bytes] | None = None,
        format: int = FORMAT,
        approx_bytes: int | None = None,
        dirty_ids: set[str] | None = None,
        recent_blob: bytearray | None = None,
    ) -> None:
        self.format = format
        self.version = version
        self.broker = broker
        self.next_token = next_token
        self.next_seq = next_seq
        self.archived_through = archived_through
        self.stats = stats if stats is not None else Counters()
        self.recent = recent if recent is not None else {}
        self.jobs = jobs if jobs is not None else {}
        self.index = index if index is not None else Index.build(self.jobs.values())
        if frags is None:
            frags = dict.fromkeys(self.jobs, b"")
            dirty = set(self.jobs)
        else:
            dirty = set(dirty_ids) if dirty_ids is not None else set()
        #: encoded bytes per job, in the same order as ``jobs``; ``_dirty`` ids are stale
        self._frags: dict[str, bytes] = frags
        self._dirty: set[str] = dirty
        #: the encoded inside of the ``recent`` map, kept in step by add_tombstone
        self._recent_blob: bytearray | None = recent_blob
        self.approx_bytes = (
            approx_bytes
            if approx_bytes is not None
            else sum(job_size(j) for j in self.jobs.values())
        )

    @classmethod
    def empty(cls) -> Document:
        return cls()

    def copy(self) -> Document:
        """A copy that shares the (immutable) jobs but none of the containers."""
        return Document(
            version=self.version,
            broker=self.broker,
            next_token=self.next_token,
            next_seq=self.next_seq,
            archived_through=self.archived_through,
            stats=self.stats,
            recent=dict(self.recent),
            jobs=dict(self.jobs),
            index=self.index.copy(),
            frags=dict(self._frags),
            format=self.format,
            approx_bytes=self.approx_bytes,
            dirty_ids=set(self._dirty),
            recent_blob=None if self._recent_blob is None else bytearray(self._recent_blob),
        )

    # -- job updates keep the index and the encoding cache in step ------------

    def put_job(self, job: StoredJob, now_s: float) -> None:
        job_id = job.id
        jobs = self.jobs
        old = jobs.get(job_id)
        jobs[job_id] = job
        if old is None:
            self._frags[job_id] = b""
            self.approx_bytes += job_size(job)
        else:
            if old.payload is not job.payload or old.key is not job.key:  # what sizes depend on
                self.approx_bytes += job_size(job) - job_size(old)
            self.index.remove(old)
        self._dirty.add(job_id)
        self.index.add(job, now_s)

    def drop_job(self, job_id: str) -> StoredJob | None:
        old = self.jobs.pop(job_id, None)
        if old is not None:
            self.index.remove(old)
            self._frags.pop(job_id, None)
            self._dirty.discard(job_id)
            self.approx_bytes -= job_size(old)
        return old

    def fragments(self, encode_job: Callable[[StoredJob], bytes]) -> Iterable[bytes]:
        """Every job's encoded bytes in document order (re-encoding only changed jobs)."""
        frags, jobs = self._frags, self.jobs
        for job_id in self._dirty:
            frags[job_id] = encode_job(jobs[job_id])
        self._dirty.clear()
        return frags.values()

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
        (cached; appended to as tombstones are added).

        The cache itself is returned (not a copy): use it before the next change.
        """
        blob = self._recent_blob
        if blob is None:
            blob = self._recent_blob = bytearray()
            last: int | None = None
            for job_id, second in self.recent.items():
                _append_tombstone(blob, job_id, second, last)
                last = second
        return blob

    def size_bytes(self) -> int:
        """What counts against ``max_document_bytes``: the jobs by an upper estimate,
        the tombstones by their encoded size, the rest by a fixed allowance."""
        return HEAD_BYTES + self.approx_bytes + len(self.recent_section())

    # -- reading ------------------------------------------------------------------

    def __iter__(self) -> Iterator[StoredJob]:
        return iter(self.jobs.values())

    def __len__(self) -> int:
        return len(self.jobs)

    def __eq__(self, other: object) -> bool:
        if not isinstance(other, Document):
            return NotImplemented
        return (
            self.format == other.format
            and self.version == other.version
            and self.broker == other.broker
            and self.next_token == other.next_token
            and self.next_seq == other.next_seq
            and self.archived_through == other.archived_through
            and self.stats == other.stats
            and self.recent == other.recent
            and list(self.jobs.items()) == list(other.jobs.items())
        )

    __hash__ = None  # type: ignore[assignment]

    def __repr__(self) -> str:
        return f"Document(version={self.version}, jobs={len(self.jobs)}, broker={self.broker!r})"


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
