"""The archive writer: archive objects written after the commits that completed jobs."""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Callable

from osqueue.broker.archive.objects import write_archive
from osqueue.broker.core.retry import StorageRetry
from osqueue.broker.core.tasks import SideTasks
from osqueue.broker.observe.counters import BrokerCounters
from osqueue.errors import StorageError
from osqueue.state import StoredJob
from osqueue.storage.port import Storage

#: archive objects of more jobs than this are rendered after the next commit starts
_RENDER_LATER = 16


class Archiver:
    """Writes the archive object of every version that completed jobs.

    Owns the queue of archive objects due (the done jobs of one committed
    version each) and up to ``concurrency`` writer tasks that take from it.
    Writers are started as objects come due and live as long as the broker, so
    a commit that completes jobs costs a put and a wake-up, not a new task.  A
    written version is reported to ``written`` (the next commit marks it
    archived, which prunes its done jobs); a storage error is retried with
    backoff.  A takeover first writes the objects of the done jobs it inherits
    (:meth:`write_inherited`); a graceful stop waits for the queue to drain
    (:meth:`drain`).
    """

    def __init__(
        self,
        storage: Storage,
        concurrency: int,
        *,
        tasks: SideTasks,
        retry: StorageRetry,
        counters: BrokerCounters,
        written: Callable[[int], None],
    ) -> None:
        self._storage = storage
        self._concurrency = concurrency
        self._tasks = tasks
        self._retry = retry
        self._counters = counters
        self._written = written
        #: the done jobs of one version each, and the queue id of their document
        self._due: asyncio.Queue[tuple[list[StoredJob], str]] = asyncio.Queue()
        self._writers = 0
        self._idle = 0  # writers waiting for an object to come due
        self._slots = asyncio.Semaphore(concurrency)  # for the inherited objects

    @property
    def pending(self) -> int:
        """Archive objects due or being written."""
        return self._due.qsize() + self._writers - self._idle

    def add(self, jobs: list[StoredJob], queue_id: str) -> None:
        """The done jobs of a version just committed (of the document ``queue_id``
        names): their archive object is due."""
        due = self._due
        due.put_nowait((jobs, queue_id))
        if due.qsize() > self._idle and self._writers < self._concurrency:
            self._writers += 1
            self._tasks.spawn(self._writer(), "osqueue-archive")
        # else: a waiting writer takes it, or the first writer done with its object

    async def _writer(self) -> None:
        """Write due archive objects one at a time; wait while none is due."""
        due = self._due
        try:
            while True:
                self._idle += 1
                try:
                    jobs, queue_id = await due.get()
                finally:
                    self._idle -= 1
                try:
                    if len(jobs) > _RENDER_LATER:
                        # Yield once: the next commit (already woken by its ops) starts
                        # its write first, and this object is rendered while it is in flight.
                        await asyncio.sleep(0)
                    await self._write(jobs, queue_id)
                finally:
                    due.task_done()
        finally:  # cancelled with the broker, or a bug (logged by SideTasks)
            self._writers -= 1

    async def _write(self, jobs: list[StoredJob], queue_id: str) -> None:
        attempt = 0
        while True:
            try:
                version = await write_archive(self._storage, jobs, queue_id)
                break
            except StorageError as exc:
                self._counters.storage_error("archive_write")
                await self._retry.wait(attempt, exc)
                attempt += 1
        self._counters.archives += 1
        self._written(version)

    async def drain(self, timeout_s: float) -> None:
        """Wait (at most ``timeout_s``) until every due archive object is written."""
        if self._due.empty() and self._idle == self._writers:  # nothing due or in flight
            return
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(self._due.join(), timeout_s)

    async def write_inherited(
        self, inherited: dict[int, list[StoredJob]], written: set[int], queue_id: str
    ) -> None:
        """Write the archive objects of inherited done jobs (by version), several at
        once; the versions written are added to ``written`` (a retry skips them)."""

        async def one(version: int, jobs: list[StoredJob]) -> None:
            async with self._slots:
                await write_archive(self._storage, jobs, queue_id)
            written.add(version)

        todo = [one(v, jobs) for v, jobs in inherited.items() if v not in written]
        for outcome in await asyncio.gather(*todo, return_exceptions=True):
            if isinstance(outcome, BaseException):
                raise outcome
