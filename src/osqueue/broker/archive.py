"""Archive objects: one immutable JSON-lines object per version that completed jobs.

The key and the bytes are a function of the jobs done in that version alone,
so writing one is create-if-absent and a repeat (after a crash or a takeover)
is harmless: every completed job is archived exactly once.

Readers (``osqueue archive --verify``, the Spark data source) split an object
with :func:`read_lines`, which reports every line that is not what the broker
writes (:class:`BadLine`: the key, the line number and why) instead of
stopping at the first.
"""

from __future__ import annotations

import functools
import logging
import re
from collections import defaultdict
from collections.abc import Iterable, Sequence
from datetime import datetime
from typing import NamedTuple, Protocol, TypeVar

import msgspec

from osqueue.errors import Conflict, CorruptDocument, NotFound, StorageError
from osqueue.state import StoredJob
from osqueue.storage.port import Storage

log = logging.getLogger(__name__)
PREFIX = "archive/"


class ArchiveRecord(msgspec.Struct, frozen=True):
    id: str
    queue: str
    priority: int
    key: str | None
    attempts: int
    max_attempts: int
    created_at: str
    first_claimed_at: str | None
    claimed_at: str | None
    completed_at: str
    worker: str | None
    token: int | None
    version: int
    last_error: str | None


_encoder = msgspec.json.Encoder()


def iso(dt: datetime | None) -> str | None:
    if dt is None:
        return None
    return _iso(dt)


@functools.lru_cache(maxsize=4096)
def _iso(dt: datetime) -> str:
    # The jobs of one version share their broker-stamped times: most calls are hits.
    return dt.isoformat(timespec="milliseconds").replace("+00:00", "Z")


def archive_key(version: int, completed_at: datetime) -> str:
    hour = _hour_prefix(completed_at.year, completed_at.month, completed_at.day, completed_at.hour)
    return f"{hour}{version:020d}.jsonl"


@functools.lru_cache(maxsize=64)
def _hour_prefix(year: int, month: int, day: int, hour: int) -> str:
    return f"{PREFIX}date={year:04d}-{month:02d}-{day:02d}/hour={hour:02d}/"


def record(job: StoredJob) -> ArchiveRecord:
    assert job.done_at is not None
    assert job.done_version is not None
    claim = job.claim
    return ArchiveRecord(
        id=job.id,
        queue=job.queue,
        priority=job.priority,
        key=job.key,
        attempts=job.attempts,
        max_attempts=job.max_attempts,
        created_at=iso(job.created_at) or "",
        first_claimed_at=iso(job.first_claimed_at),
        claimed_at=iso(claim.claimed_at) if claim else None,
        completed_at=iso(job.done_at) or "",
        worker=claim.worker if claim else None,
        token=claim.token if claim else None,
        version=job.done_version,
        last_error=job.last_error,
    )


def render(jobs: Iterable[StoredJob]) -> tuple[str, bytes]:
    """The archive object (key, bytes) for the jobs done in one version."""
    ordered = sorted(jobs, key=lambda j: j.id)
    first = ordered[0]
    assert first.done_at is not None
    assert first.done_version is not None
    body = b"".join(_encoder.encode(record(j)) + b"\n" for j in ordered)
    return archive_key(first.done_version, first.done_at), body


def by_version(jobs: Iterable[StoredJob]) -> dict[int, list[StoredJob]]:
    groups: dict[int, list[StoredJob]] = defaultdict(list)
    for job in jobs:
        if job.status == "done" and job.done_version is not None:
            groups[job.done_version].append(job)
    return dict(groups)


async def write_archive(storage: Storage, jobs: list[StoredJob]) -> int:
    """Write the archive object for one version's done jobs; returns the version."""
    key, body = render(jobs)
    try:
        await storage.write(key, body, if_match=None)
    except Conflict as exc:
        # 412: the object exists (a repeat, or our own retried write).  S3's 409
        # ConditionalRequestConflict only says another request raced: the object may
        # be absent.  Only a read tells, and the done jobs are pruned on this answer.
        try:
            await storage.get(key)
        except NotFound:
            raise StorageError(
                f"archive write of {key!r} conflicted but the object is absent", cause=exc
            ) from exc
        log.debug("archive object already written", extra={"action": "archive", "key": key})
    version = jobs[0].done_version
    assert version is not None
    return version


# --------------------------------------------------------------------------- reading


_VERSION = re.compile(r"(\d{20})\.jsonl")


def key_version(key: str) -> int | None:
    """The version an archive object's key names (None for a key of another shape)."""
    match = _VERSION.fullmatch(key.rsplit("/", 1)[-1])
    return int(match[1]) if match else None


class BadLine(NamedTuple):
    """A line of an archive object that is not what the broker writes."""

    key: str
    #: 1-based line number
    line: int
    #: byte offset of the line's start
    offset: int
    reason: str

    def __str__(self) -> str:
        return f"{self.key} line {self.line} (byte {self.offset}): {self.reason}"


class _Versioned(Protocol):
    @property
    def version(self) -> int | None: ...


R = TypeVar("R", bound=_Versioned)


def read_lines(
    data: bytes, key: str, decoder: msgspec.json.Decoder[R]
) -> tuple[list[R], list[BadLine]]:
    """The records of one archive object, and every line that is bad: one that does
    not decode, is blank, names another version than the key, or (the last)
    has no newline (the object was cut short).  An empty object is bad too (the
    broker writes one only for a version that completed jobs)."""
    if not data:
        return [], [BadLine(key, 1, 0, "the object is empty")]
    version = key_version(key)
    records: list[R] = []
    bad: list[BadLine] = []
    lines = data.split(b"\n")
    if lines[-1] == b"":
        lines.pop()
    offset = 0
    for n, line in enumerate(lines, start=1):
        reason = None
        try:
            record = decoder.decode(line)
        except msgspec.MsgspecError as exc:
            reason = "blank line" if not line.strip() else f"does not decode: {exc}"
        else:
            if version is not None and record.version not in (None, version):
                reason = f"version {record.version} in the object of version {version}"
            elif offset + len(line) == len(data):
                reason = "no newline at the end (the object was cut short)"
            else:
                records.append(record)
        if reason is not None:
            bad.append(BadLine(key, n, offset, reason))
        offset += len(line) + 1
    return records, bad


def corrupt_lines(bad: Sequence[BadLine], *, shown: int = 5) -> CorruptDocument:
    """One error for ``bad`` (not empty): how many lines, and the first ``shown``."""
    first = bad[0]
    listed = "; ".join(str(b) for b in bad[:shown])
    more = f"; and {len(bad) - shown} more" if len(bad) > shown else ""
    objects = len({b.key for b in bad})
    return CorruptDocument(
        f"{len(bad)} corrupt archive line{'s' if len(bad) != 1 else ''} in {objects} "
        f"object{'s' if objects != 1 else ''}: {listed}{more}",
        path=first.key,
        offset=first.offset,
    )
