"""The archive by day and hour, and finding a completed job in it.

The broker writes one immutable JSON-lines object per commit that completed
jobs, ``archive/date=YYYY-MM-DD/hour=HH/<version:020d>-<queue_id>.jsonl``.  Listing the
days lists every key under ``archive/`` (the storage port lists by prefix
only), so the listing is cached for ``cache_s``; an hour lists its own prefix.
Finding a job by id reads objects newest first and stops at ``max_objects``,
saying how many it searched.
"""

from __future__ import annotations

import asyncio
import re
import time
from collections.abc import Callable
from dataclasses import dataclass, field

import msgspec

from osqueue.broker.archive import objects as archive
from osqueue.broker.archive.objects import PREFIX, ArchiveRecord
from osqueue.errors import InvalidInput, NotFound
from osqueue.storage.port import Storage

_DAY = re.compile(r"\d{4}-\d{2}-\d{2}")
#: decodes one line of an archive object (``osqueue archive --verify`` too)
RECORDS = msgspec.json.Decoder(ArchiveRecord)
#: objects read at once
_READS = 16


@dataclass(frozen=True, slots=True)
class ArchiveObject:
    key: str
    day: str
    hour: int
    version: int


@dataclass(frozen=True, slots=True)
class Day:
    day: str
    #: objects per hour of the day (only hours that have some)
    hours: dict[int, int]

    @property
    def objects(self) -> int:
        return sum(self.hours.values())


@dataclass(frozen=True, slots=True)
class HourPage:
    day: str
    hour: int
    #: every object of the hour, newest first
    objects: list[ArchiveObject]
    #: the records of the objects on this page, newest object first
    records: list[tuple[ArchiveObject, ArchiveRecord]]
    offset: int
    next_offset: int | None


@dataclass(frozen=True, slots=True)
class Found:
    job_id: str
    #: the record and the object holding it, when found
    hit: tuple[ArchiveObject, ArchiveRecord] | None
    searched: int
    #: objects where it could have been (searched or not)
    candidates: int
    skipped_unreadable: list[str] = field(default_factory=list)


def parse_key(key: str) -> ArchiveObject | None:
    parsed = archive.parse_key(key)
    if parsed is None:
        return None
    return ArchiveObject(key=key, day=parsed.day, hour=parsed.hour, version=parsed.version)


def check_day(day: str) -> str:
    if not _DAY.fullmatch(day):
        raise InvalidInput(f"{day!r} is not a day (YYYY-MM-DD)", field="day")
    return day


def check_hour(hour: int) -> int:
    if not 0 <= hour <= 23:
        raise InvalidInput(f"{hour} is not an hour (0-23)", field="hour")
    return hour


class ArchiveView:
    def __init__(
        self,
        storage: Storage,
        *,
        cache_s: float = 15.0,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.storage = storage
        self.cache_s = cache_s
        self._clock = clock
        self._listing: tuple[float, list[ArchiveObject]] | None = None

    async def _all(self) -> list[ArchiveObject]:
        now = self._clock()
        if self._listing is not None and now - self._listing[0] < self.cache_s:
            return self._listing[1]
        keys = await self.storage.list(PREFIX)
        objects = [o for o in map(parse_key, keys) if o is not None]
        self._listing = (now, objects)
        return objects

    async def days(self) -> list[Day]:
        """Every day with archive objects, newest first."""
        hours: dict[str, dict[int, int]] = {}
        for obj in await self._all():
            per_hour = hours.setdefault(obj.day, {})
            per_hour[obj.hour] = per_hour.get(obj.hour, 0) + 1
        return [Day(day, dict(sorted(hours[day].items()))) for day in sorted(hours, reverse=True)]

    async def objects_of(self, day: str, hour: int | None = None) -> list[ArchiveObject]:
        """The objects of a day (or one hour of it), newest first."""
        prefix = f"{PREFIX}date={check_day(day)}/"
        if hour is not None:
            prefix += f"hour={check_hour(hour):02d}/"
        keys = await self.storage.list(prefix)
        objects = [o for o in map(parse_key, keys) if o is not None]
        objects.sort(key=lambda o: o.version, reverse=True)
        return objects

    async def hour(self, day: str, hour: int, *, offset: int = 0, per_page: int = 20) -> HourPage:
        """One hour: its objects, and the records of ``per_page`` of them from ``offset``."""
        if offset < 0:
            raise InvalidInput("must not be negative", field="offset")
        objects = await self.objects_of(day, hour)
        shown = objects[offset : offset + per_page]
        bodies = await read_objects(self.storage, [o.key for o in shown])
        records = [
            (obj, rec) for obj, body in zip(shown, bodies, strict=True) for rec in _records(body)
        ]
        end = offset + per_page
        return HourPage(
            day=day,
            hour=hour,
            objects=objects,
            records=records,
            offset=offset,
            next_offset=end if end < len(objects) else None,
        )

    async def find(self, job_id: str, *, day: str | None = None, max_objects: int = 2000) -> Found:
        """Look for ``job_id``'s record, newest objects first (one day, or all)."""
        if not job_id:
            raise InvalidInput("must not be empty", field="id")
        if day is not None:
            candidates = await self.objects_of(day)
        else:
            candidates = sorted(await self._all(), key=lambda o: o.version, reverse=True)
        searched = 0
        unreadable: list[str] = []
        needle = job_id.encode()
        for start in range(0, min(len(candidates), max_objects), _READS):
            chunk = candidates[start : min(start + _READS, max_objects)]
            bodies = await read_objects(self.storage, [o.key for o in chunk])
            searched += len(chunk)
            for obj, body in zip(chunk, bodies, strict=True):
                if body is None:
                    unreadable.append(obj.key)
                    continue
                if needle not in body:
                    continue
                for rec in _records(body):
                    if rec.id == job_id:
                        return Found(job_id, (obj, rec), searched, len(candidates), unreadable)
        return Found(job_id, None, searched, len(candidates), unreadable)


async def read_objects(
    storage: Storage, keys: list[str], *, at_once: int = _READS
) -> list[bytes | None]:
    """The bodies of the archive objects ``keys``, ``at_once`` read at a time; None
    for one deleted since it was listed."""

    async def one(key: str) -> bytes | None:
        try:
            return await storage.get(key)
        except NotFound:  # expired by a lifecycle rule or `osqueue archive --delete`
            return None

    out: list[bytes | None] = []
    for start in range(0, len(keys), at_once):
        out += await asyncio.gather(*(one(k) for k in keys[start : start + at_once]))
    return out


def _records(body: bytes | None) -> list[ArchiveRecord]:
    if not body:
        return []
    records = []
    for line in body.splitlines():
        if line.strip():
            try:
                records.append(RECORDS.decode(line))
            except msgspec.MsgspecError:
                continue  # a line this osqueue does not know: show the rest
    return records
