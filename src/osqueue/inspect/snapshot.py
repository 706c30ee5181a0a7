"""The queue document as the dashboard and ``osqueue top`` see it: read from storage,
decoded once per ETag, refreshed in the background.

Decoding is the expensive part (about 3.7 s for a document of a million jobs on
one core), so a :class:`SnapshotSource` decodes a document only when its ETag
changed, and spaces its reads so that decoding takes at most a quarter of the
process's time (``decode_share``): on a large document that changes on every
commit, the pages answer from the last decoded snapshot instead of waiting for
the next one.  Segments (the deep-backlog issue) keep the document small, and
this cost with it.

Everything a page derives from a snapshot is cheap: counts come from the
document's index (O(queues)), holders from its set of claimed jobs.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections.abc import Callable
from dataclasses import dataclass, replace
from typing import Any

from osqueue.api import ScheduleInfo
from osqueue.errors import OsqueueError
from osqueue.inspect.document import read_blob
from osqueue.inspect.status import status_of
from osqueue.state import Document, decode
from osqueue.state.schedules import schedule_info
from osqueue.storage import from_url
from osqueue.storage.port import Storage

log = logging.getLogger(__name__)

Observer = Callable[["Snapshot"], None]


@dataclass(frozen=True, slots=True)
class Holder:
    """A worker holding jobs: how many, and its oldest and newest heartbeat ages."""

    worker: str
    jobs: int
    queues: tuple[str, ...]
    oldest_heartbeat_age_s: float
    newest_heartbeat_age_s: float


@dataclass(frozen=True, slots=True)
class WorkerRow:
    """A worker the queue heard from: one holding jobs (the document's claims) or
    one the serving broker saw claim recently, idle ones included
    (``BrokerInfo.workers``)."""

    worker: str
    #: jobs it holds now (0: idle)
    jobs: int
    #: the queues it holds jobs of, or else asked for
    queues: tuple[str, ...]
    #: seconds since its last claim or heartbeat, whichever is later
    last_seen_age_s: float
    #: seconds since the oldest heartbeat of a job it holds (None: holds none)
    oldest_heartbeat_age_s: float | None


@dataclass(frozen=True, slots=True)
class ScheduleRow:
    """A schedule as the schedules page shows it (times are Unix seconds)."""

    info: ScheduleInfo
    #: its queue is paused: its ticks still push, nothing of them is claimed
    queue_paused: bool


@dataclass(frozen=True, slots=True)
class Snapshot:
    """One read of the document: the decoded value, its ETag, when it was read."""

    url: str
    doc: Document
    etag: str
    #: wall-clock seconds when the bytes were read
    read_at: float
    #: how long decoding these bytes took (0 when the ETag was unchanged)
    decode_s: float
    size_bytes: int

    @property
    def version(self) -> int:
        return self.doc.version

    def status(self, now: float) -> dict[str, Any]:
        """``osqueue status --json`` of this snapshot as of ``now`` (O(queues))."""
        return status_of(self.url, self.doc, now)

    def holders(self, now: float) -> list[Holder]:
        """The workers holding claimed jobs, most jobs first (O(claimed jobs))."""
        doc = self.doc
        by_worker: dict[str, list[tuple[float, str]]] = {}
        for job_id in doc.index.claimed:
            job = doc.jobs.get(job_id)
            if job is None or job.claim is None:
                continue
            age = max(0.0, now - job.claim.heartbeat_at.timestamp())
            by_worker.setdefault(job.claim.worker, []).append((age, job.queue))
        holders = [
            Holder(
                worker=worker,
                jobs=len(held),
                queues=tuple(sorted({q for _, q in held})),
                oldest_heartbeat_age_s=max(a for a, _ in held),
                newest_heartbeat_age_s=min(a for a, _ in held),
            )
            for worker, held in by_worker.items()
        ]
        holders.sort(key=lambda h: (-h.jobs, h.worker))
        return holders

    def workers(self, now: float) -> list[WorkerRow]:
        """Every worker holding jobs, and every worker the broker heard from in its
        recent window (its record rides in the document), busiest first, then the
        most recently seen.  A worker holding a long job claims nothing for a
        while: its heartbeats say it is alive."""
        seen: dict[str, tuple[float, tuple[str, ...]]] = {}
        owner = self.doc.broker
        for w in owner.workers if owner is not None else ():
            seen[w.worker] = (max(0.0, now - w.seen_at.timestamp()), w.queues)
        rows = []
        for h in self.holders(now):
            claimed_age, _ = seen.pop(h.worker, (h.newest_heartbeat_age_s, ()))
            rows.append(
                WorkerRow(
                    worker=h.worker,
                    jobs=h.jobs,
                    queues=h.queues,
                    last_seen_age_s=min(claimed_age, h.newest_heartbeat_age_s),
                    oldest_heartbeat_age_s=h.oldest_heartbeat_age_s,
                )
            )
        idle = [
            WorkerRow(worker=w, jobs=0, queues=q, last_seen_age_s=age, oldest_heartbeat_age_s=None)
            for w, (age, q) in seen.items()
        ]
        idle.sort(key=lambda r: (r.last_seen_age_s, r.worker))
        return rows + idle

    def schedules(self) -> list[ScheduleRow]:
        """Every schedule by name, with whether its queue is paused."""
        doc = self.doc
        return [
            ScheduleRow(
                info=schedule_info(s),
                queue_paused=(settings := doc.queue_settings.get(s.queue)) is not None
                and settings.paused,
            )
            for s in sorted(doc.schedules, key=lambda s: s.name)
        ]


def spacing_s(refresh_s: float, decode_s: float, decode_share: float) -> float:
    """The wait between reads: ``refresh_s``, or longer so that a decode of
    ``decode_s`` takes at most ``decode_share`` of the time."""
    return max(refresh_s, decode_s / decode_share)


class SnapshotSource:
    """Reads the document at ``url`` and keeps the latest decoded :class:`Snapshot`.

    ``refresh()`` reads now; ``run()`` keeps reading every ``refresh_s`` (longer
    when decoding is slow, see the module docstring) and tells each observer
    about every read, changed or not, so samples have a time even when the
    queue is idle.
    """

    def __init__(
        self,
        url: str,
        *,
        refresh_s: float = 2.0,
        decode_share: float = 0.25,
        storage: Storage | None = None,
        clock: Callable[[], float] = time.time,
    ) -> None:
        if refresh_s <= 0:
            raise ValueError("refresh_s must be positive")
        if not 0 < decode_share <= 1:
            raise ValueError("decode_share must be in (0, 1]")
        self.url = url
        self.refresh_s = refresh_s
        self.decode_share = decode_share
        self._storage = storage if storage is not None else from_url(url)
        self._own_storage = storage is None
        self._clock = clock
        self._latest: Snapshot | None = None
        self._last_decode_s = 0.0
        self._lock = asyncio.Lock()
        self._observers: list[Observer] = []
        #: the last read's failure (None after a good read), for pages to show
        self.last_error: OsqueueError | None = None

    @property
    def storage(self) -> Storage:
        return self._storage

    @property
    def latest(self) -> Snapshot | None:
        return self._latest

    def observe(self, observer: Observer) -> None:
        self._observers.append(observer)

    def next_delay_s(self) -> float:
        """How long to wait before the next read: ``refresh_s``, or longer so that
        decoding stays under ``decode_share`` of the time."""
        return spacing_s(self.refresh_s, self._last_decode_s, self.decode_share)

    async def current(self) -> Snapshot:
        """The latest snapshot, reading one first if there is none yet."""
        latest = self._latest
        if latest is not None:
            return latest
        return await self.refresh()

    async def refresh(self) -> Snapshot:
        """Read the document now (decoding it only if its ETag changed)."""
        async with self._lock:
            try:
                snapshot = await self._read()
            except OsqueueError as exc:
                self.last_error = exc
                raise
            self.last_error = None
            self._latest = snapshot
        for observer in self._observers:
            observer(snapshot)
        return snapshot

    async def _read(self) -> Snapshot:
        blob = await read_blob(self._storage, self.url)
        read_at = self._clock()
        previous = self._latest
        if previous is not None and previous.etag == blob.etag:
            return replace(previous, read_at=read_at, decode_s=0.0)
        started = time.perf_counter()
        # The decode holds the GIL for most of its time; in a thread, reads and
        # writes of other requests still interleave with its Python parts.
        doc = await asyncio.to_thread(decode, blob.data)
        decode_s = time.perf_counter() - started
        self._last_decode_s = decode_s
        if decode_s > 0.5:
            log.info(
                "decoded a large queue document",
                extra={"action": "decode", "bytes": len(blob.data), "seconds": round(decode_s, 3)},
            )
        return Snapshot(
            url=self.url,
            doc=doc,
            etag=blob.etag,
            read_at=read_at,
            decode_s=decode_s,
            size_bytes=len(blob.data),
        )

    async def run(self) -> None:
        """Read forever (until cancelled); a failed read is logged and retried."""
        while True:
            try:
                await self.refresh()
            except OsqueueError as exc:
                log.warning(
                    "could not read the queue document: %s",
                    exc,
                    extra={"action": "read_document", "url": self.url},
                )
            await asyncio.sleep(self.next_delay_s())

    async def close(self) -> None:
        if self._own_storage:
            with contextlib.suppress(OsqueueError):
                await self._storage.close()
