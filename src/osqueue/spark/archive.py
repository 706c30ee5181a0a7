"""Finding archive objects, splitting them into Spark partitions, streaming offsets.

Archive objects are ``archive/date=YYYY-MM-DD/hour=HH/<version:020d>-<queue_id>.jsonl``
(DESIGN.md, Archive; :func:`osqueue.broker.archive.objects.parse_key`).  They are
immutable, but they do not appear in version order: the broker writes them
after the commit, several at a time.  A stream offset therefore says "every
version up to ``through`` of each queue id, plus these later objects", where
the current queue id's ``through`` is a watermark taken from the queue
document: every version below the oldest ``done`` job still in the document
has its archive object written (a done job leaves the document only after
that write), so no object of that queue id at or below ``through`` can appear
later.  A queue created again (``queue.json`` deleted) has a new queue id and
counts its versions from 1 under its own watermark.  An object written under a
fresh key (its first key held other content, after an older ``queue.json`` was
restored) is never covered by a watermark: it is listed in ``seen`` by name.
Each object is delivered exactly once.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from osqueue.broker.archive.objects import ArchiveKey, parse_key
from osqueue.errors import InvalidInput, NotFound

from . import blocking

ARCHIVE_PREFIX = "archive/"


def parsed(key: str) -> ArchiveKey:
    """What an archive object's key names (InvalidInput for another key)."""
    found = parse_key(key)
    if found is None:
        raise InvalidInput(f"{key!r} is not an archive object key", field="key")
    return found


def version_of(key: str) -> int:
    """``archive/date=.../hour=../00000000000000000042-<queue_id>.jsonl`` -> 42."""
    return parsed(key).version


def archive_keys(url: str) -> list[str]:
    """Every archive object key of the queue at ``url``, sorted (hour, then version)."""
    keys = blocking.with_storage(url, lambda s: s.list(ARCHIVE_PREFIX))
    return [k for k in keys if parse_key(k) is not None]


def plan_archive(keys: list[str], per_partition: int) -> list[list[str]]:
    """Split keys into Spark partitions: by hour folder, at most ``per_partition`` each."""
    by_hour: dict[str, list[str]] = {}
    for key in sorted(keys):
        by_hour.setdefault(key.rsplit("/", 1)[0], []).append(key)
    groups: list[list[str]] = []
    for hour_keys in by_hour.values():
        for start in range(0, len(hour_keys), per_partition):
            groups.append(hour_keys[start : start + per_partition])
    return groups


@dataclass(frozen=True, slots=True)
class ArchiveOffset:
    """Archive objects delivered so far: per queue id all versions up to its
    ``through``, and the objects named in ``seen`` (by file name)."""

    through: tuple[tuple[str, int], ...] = ()
    seen: tuple[str, ...] = ()

    def through_of(self, queue_id: str) -> int:
        return dict(self.through).get(queue_id, 0)

    def covers_key(self, key: ArchiveKey) -> bool:
        if key.name in self.seen:
            return True
        return not key.fresh and key.version <= self.through_of(key.queue_id)

    def covers(self, key: str) -> bool:
        return self.covers_key(parsed(key))

    def to_dict(self) -> dict[str, Any]:
        return {
            "through": ",".join(f"{q}:{v}" for q, v in self.through),
            "seen": ",".join(self.seen),
        }

    @classmethod
    def from_dict(cls, value: Mapping[str, Any]) -> ArchiveOffset:
        through = str(value.get("through", "") or "")
        seen = str(value.get("seen", "") or "")
        try:
            pairs = [pair.split(":") for pair in through.split(",") if pair]
            marks = tuple(sorted((q, int(v)) for q, v in pairs))
        except ValueError as exc:
            raise InvalidInput(f"{through!r} is not an archive offset", field="through") from exc
        return cls(through=marks, seen=tuple(n for n in seen.split(",") if n))


def watermark(url: str) -> tuple[str, int] | None:
    """The document's queue id and a version at or below which every archive object
    of that queue id is already written (None: no document, or none with a queue id)."""
    from osqueue.state import DOCUMENT_KEY, decode

    try:
        blob = blocking.with_storage(url, lambda s: s.read(DOCUMENT_KEY))
    except NotFound:
        return None
    doc = decode(blob.data)
    if doc.queue_id is None:
        return None
    pending = [j.done_version for j in doc.jobs.values() if j.status == "done" and j.done_version]
    return doc.queue_id, min(pending) - 1 if pending else doc.version


def latest_offset(url: str, start: ArchiveOffset) -> ArchiveOffset:
    """The offset covering every archive object written now (watermark read first)."""
    marks = dict(start.through)
    mark = watermark(url)
    if mark is not None:
        queue_id, through = mark
        marks[queue_id] = max(marks.get(queue_id, 0), through)
    marked = ArchiveOffset(through=tuple(sorted(marks.items())))
    # Every object listed now that no watermark covers (the objects ``start`` named
    # that are still there among them; a deleted one needs no name any more).
    seen = sorted({k.name for k in map(parsed, archive_keys(url)) if not marked.covers_key(k)})
    return ArchiveOffset(through=marked.through, seen=tuple(seen))
