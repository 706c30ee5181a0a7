"""Finding archive objects, splitting them into Spark partitions, streaming offsets.

Archive objects are ``archive/date=YYYY-MM-DD/hour=HH/<version:020d>.jsonl``
(DESIGN.md, Archive).  They are immutable, but they do not appear in version
order: the broker writes them after the commit, several at a time.  A stream
offset therefore says "every version up to ``through``, plus these later
ones", where ``through`` is a watermark taken from the queue document: every
version below the oldest ``done`` job still in the document has its archive
object written (a done job leaves the document only after that write), so no
object at or below ``through`` can appear later.  Each object is delivered
exactly once.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from osqueue.errors import InvalidInput, NotFound

from . import blocking

ARCHIVE_PREFIX = "archive/"


def version_of(key: str) -> int:
    """``archive/date=.../hour=../00000000000000000042.jsonl`` -> 42."""
    name = key.rsplit("/", 1)[-1]
    stem = name.removesuffix(".jsonl")
    if not stem.isdigit() or stem == name:
        raise InvalidInput(f"{key!r} is not an archive object key", field="key")
    return int(stem)


def archive_keys(url: str) -> list[str]:
    """Every archive object key of the queue at ``url``, sorted (hour, then version)."""
    keys = blocking.with_storage(url, lambda s: s.list(ARCHIVE_PREFIX))
    return [k for k in keys if k.endswith(".jsonl")]


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
    """Archive versions delivered so far: all up to ``through``, and ``seen`` above it."""

    through: int = 0
    seen: tuple[int, ...] = ()

    def covers_version(self, version: int) -> bool:
        return version <= self.through or version in self.seen

    def covers(self, key: str) -> bool:
        return self.covers_version(version_of(key))

    def to_dict(self) -> dict[str, Any]:
        return {"through": self.through, "seen": ",".join(str(v) for v in self.seen)}

    @classmethod
    def from_dict(cls, value: Mapping[str, Any]) -> ArchiveOffset:
        seen = str(value.get("seen", "") or "")
        return cls(
            through=int(value.get("through", 0)),
            seen=tuple(int(v) for v in seen.split(",") if v),
        )


def watermark(url: str) -> int:
    """A version at or below which every archive object is already written."""
    from osqueue.state import DOCUMENT_KEY, decode

    try:
        blob = blocking.with_storage(url, lambda s: s.read(DOCUMENT_KEY))
    except NotFound:
        return 0
    doc = decode(blob.data)
    pending = [j.done_version for j in doc.jobs.values() if j.status == "done" and j.done_version]
    return min(pending) - 1 if pending else doc.version


def latest_offset(url: str, start: ArchiveOffset) -> ArchiveOffset:
    """The offset covering every archive object written now (watermark read first)."""
    through = max(start.through, watermark(url))
    versions = {version_of(k) for k in archive_keys(url)}
    seen = {v for v in versions if v > through} | {v for v in start.seen if v > through}
    return ArchiveOffset(through=through, seen=tuple(sorted(seen)))
