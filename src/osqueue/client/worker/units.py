"""Running units: claimed jobs become handler invocations, within the worker's slots.

A :class:`Unit` is one handler invocation: a job, or a batch of jobs of one
queue for a :class:`~osqueue.client.worker.handlers.BatchHandler`.
:class:`Units` dispatches claimed jobs into units, runs each as its own task
(async handlers directly, sync handlers in a thread of its pool), hands each
outcome to the settle step, and counts slots: a unit holds one slot per job
until its handler returns (settling frees them) and is held until it is
settled.  At shutdown it abandons what still runs (:meth:`Units.abandon_all`).
"""

from __future__ import annotations

import asyncio
import contextvars
import inspect
import threading
from collections.abc import Awaitable, Callable, Iterator
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from typing import Any

from osqueue.api import Job
from osqueue.client.worker.config import WorkerCounters
from osqueue.client.worker.context import CancelReason, JobContext, context_for
from osqueue.client.worker.handlers import (
    BatchHandler,
    Handler,
    HandlerTable,
    is_async_callable,
)
from osqueue.clock import Clock
from osqueue.state.validate import MAX_CLAIM


class Unit:
    """One handler invocation: a job, or a batch of jobs of one queue."""

    __slots__ = ("context", "future", "handler", "is_async", "jobs", "settling", "wrapper")

    def __init__(self, jobs: tuple[Job, ...], handler: Handler, context: JobContext) -> None:
        self.jobs = jobs
        self.handler = handler
        self.context = context
        self.is_async = is_async_callable(handler)
        #: the handler's task (async) or its thread's future (sync)
        self.future: asyncio.Future[object] | None = None
        #: the task that runs and settles the unit
        self.wrapper: asyncio.Task[None] | None = None
        #: the handler returned and the unit's jobs are being settled (no slot held)
        self.settling = False

    def live_jobs(self) -> list[Job]:
        return [j for j in self.jobs if not self.context.is_lost(j.id)]

    def lose(self, job: Job) -> None:
        """``job``'s lease is lost; once every job of the unit is, the handler is
        cancelled (an async one; a sync one only sees its context lost)."""
        if self.context._mark_lost(job.id):
            self.cancel("lease_lost")

    def cancel(self, reason: CancelReason) -> None:
        """Mark the context lost and cancel an async handler (a thread cannot be killed)."""
        self.context._cancel(reason)
        if self.is_async and self.future is not None:
            self.future.cancel()


@dataclass(frozen=True, slots=True)
class Outcome:
    """What a handler did: returned ``result``, or raised ``error``."""

    result: object
    error: BaseException | None


Settle = Callable[[Unit, Outcome], Awaitable[None]]


class Units:
    """The units this worker runs; see the module docstring.

    :attr:`changed` is set whenever something the claim loop or the shutdown
    waits on changes: a slot freed, a unit gone (and by the worker: stopping).
    """

    def __init__(
        self,
        handlers: HandlerTable,
        *,
        concurrency: int,
        batch_size: int,
        worker_id: str,
        settle: Settle,
        counters: WorkerCounters,
        clock: Clock,
    ) -> None:
        self._handlers = handlers
        self._counters = counters
        self._clock = clock
        self._concurrency = concurrency
        self._batch_size = batch_size
        self._worker_id = worker_id
        self._settle = settle
        self._units: set[Unit] = set()
        self.changed = asyncio.Event()
        #: jobs of units cancelled from outside (a side task died), to release
        self.orphaned: list[Job] = []
        self.threads = ThreadCount()
        self._tg: asyncio.TaskGroup | None = None
        self._executor: ThreadPoolExecutor | None = None

    # -- lifecycle

    def open(self, tg: asyncio.TaskGroup) -> None:
        """Run units as tasks of ``tg``, sync handlers in a pool of ``concurrency`` threads."""
        self._tg = tg
        self._executor = ThreadPoolExecutor(
            max_workers=self._concurrency, thread_name_prefix="osqueue-handler"
        )

    def close(self) -> None:
        """Shut the thread pool down without waiting (abandoned threads run out alone)."""
        if self._executor is not None:
            self._executor.shutdown(wait=False, cancel_futures=True)

    # -- what is held

    def __iter__(self) -> Iterator[Unit]:
        return iter(list(self._units))

    def __contains__(self, unit: object) -> bool:
        return unit in self._units

    def __bool__(self) -> bool:
        return bool(self._units)

    @property
    def jobs_held(self) -> int:
        """Jobs held (running, settling, or lost but still in a thread)."""
        return sum(len(u.jobs) for u in self._units)

    @property
    def slots_busy(self) -> int:
        """Slots taken: jobs whose handlers have not returned yet."""
        return sum(len(u.jobs) for u in self._units if not u.settling)

    @property
    def concurrency(self) -> int:
        return self._concurrency

    def free_slots(self) -> int:
        """How many jobs to claim now: slots whose handler returned, within one claim's limit."""
        return min(self._concurrency - self.slots_busy, MAX_CLAIM)

    async def wait_idle(self) -> None:
        """Until no unit is held."""
        while self._units:
            self.changed.clear()
            await self.changed.wait()

    # -- dispatch

    def dispatch(self, jobs: list[Job]) -> None:
        """Start a unit per job, or per batch of up to ``batch_size`` jobs of one queue."""
        batches: dict[str, list[Job]] = {}
        for job in jobs:
            handler = self._handlers.for_queue(job.queue)
            if isinstance(handler, BatchHandler):
                batches.setdefault(job.queue, []).append(job)
            else:
                self._start((job,), handler)
        for queue, queued in batches.items():
            handler = self._handlers.for_queue(queue)
            size = self._batch_size
            for start in range(0, len(queued), size):
                self._start(tuple(queued[start : start + size]), handler)

    def _start(self, jobs: tuple[Job, ...], handler: Handler) -> None:
        assert self._tg is not None
        unit = Unit(jobs, handler, JobContext(jobs, self._worker_id))
        self._units.add(unit)
        unit.wrapper = self._tg.create_task(self._run(unit), name=f"osqueue-job-{jobs[0].id}")

    # -- running one unit

    async def _run(self, unit: Unit) -> None:
        try:
            outcome = await self._execute(unit)
            if outcome is not None and not unit.context.lost:
                unit.settling = True
                self.changed.set()  # its slot is free: the claim loop may claim
                await self._settle(unit, outcome)
        except asyncio.CancelledError:
            if unit in self._units and not unit.settling:
                # Cancelled by the TaskGroup (a side task died): release on the way out.
                self.orphaned.extend(self._abandon(unit))
            raise
        finally:
            self._units.discard(unit)
            self.changed.set()

    async def _execute(self, unit: Unit) -> Outcome | None:
        """Run the handler; None when it was cancelled or its job(s) lost."""
        ctx = context_for(unit.context)
        arg: object = list(unit.jobs) if isinstance(unit.handler, BatchHandler) else unit.jobs[0]
        future: asyncio.Future[object]
        if unit.is_async:
            future = asyncio.create_task(_await_handler(unit.handler, arg), context=ctx)
        else:
            assert self._executor is not None
            loop = asyncio.get_running_loop()
            future = loop.run_in_executor(self._executor, self.threads.run, ctx, unit.handler, arg)
        unit.future = future
        started = self._clock.monotonic()
        await asyncio.wait({future})
        if future.cancelled():
            return None
        error = future.exception()  # always retrieved, even when the result is dropped
        if unit.context.lost:
            return None
        records = self._counters.records
        if records is not None:
            records.handler_ran(unit.jobs[0].queue, self._clock.monotonic() - started)
        return Outcome(None if error is not None else future.result(), error)

    # -- shutdown

    def abandon_all(self) -> list[Job]:
        """Cancel every unit that is not settling; return the jobs to release."""
        jobs, self.orphaned = self.orphaned, []
        for unit in list(self._units):
            if not unit.settling:
                jobs.extend(self._abandon(unit))
                if unit.wrapper is not None:
                    unit.wrapper.cancel()
        self.changed.set()
        return jobs

    def _abandon(self, unit: Unit) -> list[Job]:
        live = unit.live_jobs()
        unit.cancel("shutdown")
        self._units.discard(unit)
        return live


class ThreadCount:
    """Counts sync handlers still running in threads (lost ones included)."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self.busy = 0

    def run(self, ctx: contextvars.Context, handler: Handler, arg: Any) -> object:
        with self._lock:
            self.busy += 1
        try:
            return ctx.run(handler, arg)
        finally:
            with self._lock:
                self.busy -= 1


async def _await_handler(handler: Handler, arg: Any) -> object:
    result = handler(arg)
    if inspect.isawaitable(result):
        return await result
    return result
