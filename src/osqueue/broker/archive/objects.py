"""Archive objects: one immutable JSON-lines object per version that completed jobs.

The key is ``archive/date=YYYY-MM-DD/hour=HH/<version:020d>-<queue_id>.jsonl``:
the version and the document's incarnation (its ``queue_id``, drawn when the
document was created), so a queue created again after ``queue.json`` was
deleted never meets the objects of the one before.  The key and the bytes are
a function of the jobs done in that version alone, so writing one is
create-if-absent and a repeat (after a crash or a takeover) is harmless: every
completed job is archived exactly once.

An object already at the key counts as written only if it holds exactly these
bytes.  Anything else (an older copy of ``queue.json`` restored, which repeats
versions under the same queue id, or an object put there from outside) is left
alone, and the jobs are written under a fresh key, the first key with the
bytes' digest as a suffix (``...-<queue_id>-<sha256[:16]>.jsonl``), with a
warning naming both keys.  The fresh key is a function of the bytes too, so a
retried write lands on the same object.

Readers (``osqueue archive --verify``, the Spark data source) split an object
with :func:`read_lines`, which reports every line that is not what the broker
writes (:class:`BadLine`: the key, the line number and why) instead of
stopping at the first.
"""

from __future__ import annotations

import functools
import hashlib
import logging
import re
from collections import defaultdict
from collections.abc import Iterable, Sequence
from datetime import datetime
from typing import NamedTuple, Protocol, TypeVar

import msgspec

from osqueue.errors import Conflict, CorruptDocument, NotFound, StorageError
from osqueue.state import QUEUE_ID_RE, StoredJob
from osqueue.storage.port import Storage

log = logging.getLogger(__name__)
PREFIX = "archive/"
_EXT = ".jsonl"


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


@functools.lru_cache(maxsize=4096)
def _iso(dt: datetime) -> str:
    # The jobs of one version share their broker-stamped times: most calls are hits.
    return dt.isoformat(timespec="milliseconds").replace("+00:00", "Z")


def archive_key(version: int, completed_at: datetime, queue_id: str) -> str:
    hour = _hour_prefix(completed_at.year, completed_at.month, completed_at.day, completed_at.hour)
    return f"{hour}{version:020d}-{queue_id}.jsonl"


def fresh_key(key: str, body: bytes, attempt: int) -> str:
    """The key to write ``body`` under when ``key`` holds something else (attempt 1),
    and when that one does too (attempt 2 on)."""
    suffix = hashlib.sha256(body).hexdigest()[:16]
    if attempt > 1:
        suffix += f"-{attempt}"
    return f"{key.removesuffix(_EXT)}-{suffix}{_EXT}"


@functools.lru_cache(maxsize=64)
def _hour_prefix(year: int, month: int, day: int, hour: int) -> str:
    return f"{PREFIX}date={year:04d}-{month:02d}-{day:02d}/hour={hour:02d}/"


def record(job: StoredJob) -> ArchiveRecord:
    assert job.done_at is not None
    assert job.done_version is not None
    claim = job.claim
    first_claimed_at = job.first_claimed_at
    return ArchiveRecord(
        id=job.id,
        queue=job.queue,
        priority=job.priority,
        key=job.key,
        attempts=job.attempts,
        max_attempts=job.max_attempts,
        created_at=_iso(job.created_at),
        first_claimed_at=None if first_claimed_at is None else _iso(first_claimed_at),
        claimed_at=_iso(claim.claimed_at) if claim else None,
        completed_at=_iso(job.done_at),
        worker=claim.worker if claim else None,
        token=claim.token if claim else None,
        version=job.done_version,
        last_error=job.last_error,
    )


def render(jobs: Iterable[StoredJob], queue_id: str) -> tuple[str, bytes]:
    """The archive object (key, bytes) for the jobs done in one version."""
    ordered = sorted(jobs, key=lambda j: j.id)
    first = ordered[0]
    assert first.done_at is not None
    assert first.done_version is not None
    body = _encoder.encode_lines([record(j) for j in ordered])  # a line per job
    return archive_key(first.done_version, first.done_at, queue_id), body


def by_version(jobs: Iterable[StoredJob]) -> dict[int, list[StoredJob]]:
    groups: dict[int, list[StoredJob]] = defaultdict(list)
    for job in jobs:
        if job.status == "done" and job.done_version is not None:
            groups[job.done_version].append(job)
    return dict(groups)


#: keys tried for one object: its own, then fresh ones (each held by other bytes)
_FRESH_KEYS = 8


async def write_archive(storage: Storage, jobs: list[StoredJob], queue_id: str) -> int:
    """Write the archive object for one version's done jobs; returns the version."""
    version = jobs[0].done_version
    assert version is not None
    key, body = render(jobs, queue_id)
    target = key
    for attempt in range(_FRESH_KEYS):
        if attempt:
            target = fresh_key(key, body, attempt)
        if await _create(storage, target, body):
            if attempt:
                log.warning(
                    "archive key %r holds other content (an older queue.json restored, or "
                    "an object written from outside); version %d archived under %r",
                    key,
                    version,
                    target,
                    extra={"action": "archive", "key": key, "fresh_key": target},
                )
            return version
    raise StorageError(
        f"archive keys {key!r} to {target!r} all hold other content; not archiving version "
        f"{version} over them"
    )


async def _create(storage: Storage, key: str, body: bytes) -> bool:
    """Create ``key`` holding ``body``: True once it does (written now, or before by
    a repeat of this write), False if it holds anything else."""
    try:
        await storage.write(key, body, if_match=None)
        return True
    except Conflict as exc:
        # 412: the object exists (a repeat, our own retried write, or another
        # incarnation's).  S3's 409 ConditionalRequestConflict only says another
        # request raced: the object may be absent.  Only a read tells, and the done
        # jobs are pruned on this answer.
        try:
            held = await storage.get(key)
        except NotFound:
            raise StorageError(
                f"archive write of {key!r} conflicted but the object is absent", cause=exc
            ) from exc
    if held != body:
        return False
    log.debug("archive object already written", extra={"action": "archive", "key": key})
    return True


# --------------------------------------------------------------------------- reading


_KEY = re.compile(
    re.escape(PREFIX) + r"date=(\d{4}-\d{2}-\d{2})/hour=(\d{2})/"
    rf"((\d{{20}})-({QUEUE_ID_RE.pattern})(?:-[0-9a-f]{{16}}(?:-\d+)?)?)\.jsonl"
)


#: ``<version:020d>-<queue_id>``: a fresh key's name is longer (its digest suffix)
_PLAIN_NAME = 20 + 1 + 26


class ArchiveKey(NamedTuple):
    """What an archive object's key names."""

    key: str
    day: str
    hour: int
    version: int
    queue_id: str
    #: the file name without ``.jsonl``: unique across incarnations and fresh keys
    name: str

    @property
    def fresh(self) -> bool:
        """Written under a fresh key (its first key held other content)."""
        return len(self.name) > _PLAIN_NAME


def parse_key(key: str) -> ArchiveKey | None:
    """What an archive object's key names (None for a key of another shape: every
    lister of ``archive/`` skips those)."""
    match = _KEY.fullmatch(key)
    if match is None:
        return None
    day, hour, name, version, queue_id = match.groups()
    return ArchiveKey(key, day, int(hour), int(version), queue_id, name)


def key_version(key: str) -> int | None:
    """The version an archive object's key names (None for a key of another shape)."""
    parsed = parse_key(key)
    return parsed.version if parsed else None


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
