"""The in-process client: ``broker.client()``.

Each call is made into its op and checked once (:mod:`osqueue.state.make`),
then submitted through :class:`~osqueue.broker.inproc.calls.BrokerCalls`, the entry
the gRPC service uses too (payload objects, result objects, parked claims and
payload reads are done there), and answered once the commit holding it is
durable; an op's own error is raised.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING, Unpack

import msgspec

from osqueue.api import (
    ClaimOptions,
    DeadOptions,
    Job,
    JobResult,
    NewJob,
    PushOptions,
    QueueSettings,
    ScheduleInfo,
    ScheduleSpec,
    SettingsChange,
    Stats,
)
from osqueue.broker.inproc.calls import BrokerCalls
from osqueue.broker.inproc.claimed import raise_if_error
from osqueue.errors import OsqueueError
from osqueue.state import (
    Complete,
    Counted,
    Push,
    QueueSet,
    Scheduled,
    StoredJob,
    make,
)
from osqueue.state.limits import settings_info
from osqueue.state.schedules import schedule_info

if TYPE_CHECKING:
    from osqueue.broker.inproc.host import BrokerHost


class LocalClient:
    """A :class:`~osqueue.api.QueueClient` talking to a broker in this process (and
    :class:`~osqueue.api.Scheduling`: periodic jobs and queue settings)."""

    def __init__(self, broker: BrokerHost) -> None:
        self.broker = broker
        self.calls = BrokerCalls(broker)
        self._max_payload = broker.config.max_payload_bytes

    @property
    def heartbeat_timeout_s(self) -> float:
        """The broker's heartbeat timeout (workers beat at a third of it)."""
        return self.calls.heartbeat_timeout_s

    # -- push ---------------------------------------------------------------------

    async def push(self, payload: bytes, **options: Unpack[PushOptions]) -> str:
        return await self.calls.push(make.push(NewJob(payload, **options), self._max_payload))

    async def push_results(self, jobs: Sequence[NewJob]) -> list[str | OsqueueError]:
        """Push a batch; one result per job: its id, or the error that job got."""
        ops: list[Push | OsqueueError] = []
        for job in jobs:
            try:
                ops.append(make.push(job, self._max_payload))
            except OsqueueError as exc:
                ops.append(exc)
        return await self.calls.push_many(ops)

    async def push_many(self, jobs: Sequence[NewJob]) -> list[str]:
        """Push a batch; raises the first job's error (the others are committed)."""
        out: list[str] = []
        for result in await self.push_results(jobs):
            if isinstance(result, OsqueueError):
                raise result.with_traceback(None)
            out.append(result)
        return out

    # -- claim --------------------------------------------------------------------

    async def claim(
        self, worker: str, queues: Sequence[str] = ("default",), **options: Unpack[ClaimOptions]
    ) -> list[Job]:
        op = make.claim(worker, queues, options.get("max_jobs", 1))
        return await self.calls.claim(op, make.wait(options.get("wait_s", 0.0)))

    async def complete_and_claim(
        self,
        jobs: Sequence[Job],
        worker: str,
        queues: Sequence[str] = ("default",),
        *,
        max_jobs: int = 1,
        results: Sequence[object] | None = None,
    ) -> tuple[list[OsqueueError | None], list[Job]]:
        """Complete ``jobs`` and claim up to ``max_jobs`` in one commit (see
        :meth:`~osqueue.api.QueueClient.complete_and_claim`)."""
        # made first, so the claim can only fail with the whole commit
        op = make.claim(worker, queues, max_jobs)
        return await self.calls.complete_and_claim(jobs, results, op)

    # -- the holder's calls -------------------------------------------------------

    async def heartbeat(self, job: Job) -> None:
        raise_if_error(await self.calls.add(make.heartbeat(job)))

    async def complete(self, job: Job, *, result: object = None) -> None:
        if result is None:  # the common case: one op, no upload
            raise_if_error(await self.calls.add(Complete(*make.holder(job))))
            return
        (answer,) = await self.calls.complete([job], [result])
        if isinstance(answer, OsqueueError):
            raise answer.with_traceback(None)

    async def fail(self, job: Job, *, error: str = "", retry_after_s: float | None = None) -> None:
        raise_if_error(await self.calls.add(make.fail(job, error, retry_after_s)))

    async def release(self, job: Job) -> None:
        raise_if_error(await self.calls.add(make.release(job)))

    async def heartbeat_many(self, jobs: Sequence[Job]) -> list[OsqueueError | None]:
        return _errors(await self.calls.submit([make.heartbeat(j) for j in jobs]))

    async def complete_many(
        self, jobs: Sequence[Job], results: Sequence[object] | None = None
    ) -> list[OsqueueError | None]:
        """Complete ``jobs`` (with ``results``, one per job, None for none)."""
        return _errors(await self.calls.complete(jobs, results))

    # -- results and reads --------------------------------------------------------

    async def result(self, job_id: str, *, wait_s: float = 0.0) -> JobResult:
        """How ``job_id`` finished (see :meth:`osqueue.api.QueueClient.result`)."""
        result, value = await self.calls.result(job_id, make.wait(wait_s))
        if value is None:
            return result
        return msgspec.structs.replace(result, value=value.decode())

    async def jobs(self, queue: str | None = None, status: str | None = None) -> list[StoredJob]:
        """The document's jobs, optionally filtered (a snapshot, no commit)."""
        return self.calls.jobs(queue, status)

    async def stats(self) -> Stats:
        return self.calls.stats()

    async def close(self) -> None:
        return None

    # -- administration -----------------------------------------------------------

    async def cancel(self, job_id: str) -> None:
        await self.calls.cancel(make.cancel(job_id))

    async def retry_dead(
        self, ids: Sequence[str] | None = None, **options: Unpack[DeadOptions]
    ) -> int:
        """Queue dead jobs again (see :meth:`DeadCalls.retry_dead
        <osqueue.broker.inproc.dead.DeadCalls.retry_dead>`)."""
        return await self.calls.dead.retry_dead(make.dead(ids), **options)

    async def purge_dead(
        self, ids: Sequence[str] | None = None, **options: Unpack[DeadOptions]
    ) -> int:
        """Delete dead jobs (see :meth:`DeadCalls.purge_dead
        <osqueue.broker.inproc.dead.DeadCalls.purge_dead>`)."""
        return await self.calls.dead.purge_dead(make.dead(ids), **options)

    async def dead_jobs(
        self,
        queue: str | None = None,
        *,
        error: str | None = None,
        since: float | None = None,
        until: float | None = None,
        offset: int = 0,
        limit: int | None = None,
    ) -> list[StoredJob]:
        """A page of the dead jobs the filters admit (see :meth:`DeadCalls.dead_jobs
        <osqueue.broker.inproc.dead.DeadCalls.dead_jobs>`)."""
        return await self.calls.dead.dead_jobs(
            queue, error=error, since=since, until=until, offset=offset, limit=limit
        )

    async def readmit_segment(self, key: str) -> int:
        """Put the set-aside segment ``key`` back in its stream, in seq order, once
        its object is restored: the object is checked against the size and
        SHA-256 its reference recorded first (``InvalidInput`` naming ``key`` if
        it still fails).  Returns the jobs readmitted."""
        return await self.calls.readmit(key)

    async def schedule(self, name: str, **spec: Unpack[ScheduleSpec]) -> ScheduleInfo:
        result = await self.calls.one(make.schedule(name, spec))
        assert isinstance(result, Scheduled)
        return schedule_info(result.schedule)

    async def unschedule(self, name: str) -> bool:
        result = await self.calls.one(make.unschedule(name))
        assert isinstance(result, Counted)
        return result.n > 0

    async def schedules(self) -> list[ScheduleInfo]:
        return self.calls.schedules()

    async def set_queue(
        self, queue: str, *, remove: bool = False, **change: Unpack[SettingsChange]
    ) -> QueueSettings:
        result = await self.calls.one(make.set_queue(queue, change, remove))
        assert isinstance(result, QueueSet)
        return settings_info(result.queue, result.settings)

    async def queue_settings(self) -> list[QueueSettings]:
        """Every queue that has settings in force, by name."""
        return self.calls.queue_settings()


def _errors(answers: Sequence[object]) -> list[OsqueueError | None]:
    return [r if isinstance(r, OsqueueError) else None for r in answers]
