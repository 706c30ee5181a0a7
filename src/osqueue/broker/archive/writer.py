"""The archive writer: archive objects written after the commits that completed jobs."""

from __future__ import annotations

import asyncio
import contextlib
from collections import deque
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
        self._due: deque[tuple[list[StoredJob], str]] = deque()
        self._wakers: deque[asyncio.Future[None]] = deque()  # of the writers waiting
        self._unwritten = 0  # objects due or being written
        #: what :meth:`drain` waits on, while it does (resolved once nothing is unwritten)
        self._drained: asyncio.Future[None] | None = None
        self._writers = 0
        self._slots = asyncio.Semaphore(concurrency)  # for the inherited objects

    @property
    def pending(self) -> int:
        """Archive objects due or being written."""
        return self._unwritten

    def add(self, jobs: list[StoredJob], queue_id: str) -> None:
        """The done jobs of a version just committed (of the document ``queue_id``
        names): their archive object is due."""
        self._due.append((jobs, queue_id))
        self._unwritten += 1
        if self._wake_one():
            return
        if self._writers < self._concurrency:
            self._writers += 1
            self._tasks.spawn(self._writer(), "osqueue-archive")
        # else: the first writer done with its object takes it

    def _wake_one(self) -> bool:
        """Wake one waiting writer (a cancelled one is skipped); False: none waits."""
        wakers = self._wakers
        while wakers:
            waker = wakers.popleft()
            if not waker.done():
                waker.set_result(None)
                return True
        return False

    async def _writer(self) -> None:
        """Write due archive objects one at a time; wait while none is due."""
        due, loop = self._due, asyncio.get_running_loop()
        try:
            while True:
                if not due:
                    waker = loop.create_future()
                    self._wakers.append(waker)
                    try:
                        await waker
                    except asyncio.CancelledError:
                        if waker.done() and not waker.cancelled() and due:
                            self._wake_one()  # woken, then cancelled: another writer takes it
                        raise
                    continue  # (another writer may have taken it first)
                jobs, queue_id = due.popleft()
                try:
                    if len(jobs) > _RENDER_LATER:
                        # Yield once: the next commit (already woken by its ops) starts
                        # its write first, and this object is rendered while it is in flight.
                        await asyncio.sleep(0)
                    await self._write(jobs, queue_id)
                finally:
                    self._unwritten -= 1
                    drained = self._drained
                    if not self._unwritten and drained is not None and not drained.done():
                        drained.set_result(None)
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
        if not self._unwritten:  # nothing due or in flight
            return
        drained = self._drained
        if drained is None or drained.done():
            drained = self._drained = asyncio.get_running_loop().create_future()
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(asyncio.shield(drained), timeout_s)

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
