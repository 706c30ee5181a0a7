"""The worker runtime: claim jobs, run handlers, heartbeat, settle.

A :class:`Worker` runs at most ``concurrency`` handlers at once.  One side
task claims in batches with long polls (``max_jobs`` = free slots), another
heartbeats every held job on its own timer.  Each claimed job (or batch of
jobs, for handlers decorated with :func:`batch`) runs as its own task: async
handlers directly, sync handlers in a thread.  When the handler returns the
job is completed; when it raises, the job is failed with the traceback's last
line as ``last_error`` (or retried later when it raised :class:`Retry`).

A slot is free as soon as its handler returns, and the claim for the next job
carries the completion of the last one (:class:`CompletesAndClaims`, one call
and one commit), so with storage latency a slot waits for one write per job,
not two.  While the claim side task is parked in a long poll (nothing to
claim), completions go out on their own.

When a heartbeat answers :class:`~osqueue.errors.LeaseLost` the job belongs to
someone else: an async handler is cancelled; a sync handler cannot be killed,
so its :class:`JobContext` is marked lost (handlers poll
:func:`current_job_lost` or register :meth:`JobContext.on_cancel`) and the job
is never completed by this worker.

Stopping happens in three stages: stop claiming; let running handlers finish
within ``shutdown_grace_period_s`` (heartbeats continue meanwhile); then
cancel what is left and release its jobs (:meth:`QueueClient.release`) so
another worker takes them at once.  Cancelling :meth:`Worker.run` from outside
is a graceful stop; a second cancellation skips the grace period.
"""

from __future__ import annotations

import asyncio
import contextvars
import inspect
import logging
import os
import secrets
import signal
import socket
import threading
import traceback
from collections.abc import Awaitable, Callable, Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from typing import Any, Final, Literal, TypeAlias

from osqueue.api import CompletesAndClaims, Job, QueueClient
from osqueue.clock import Clock, SystemClock
from osqueue.errors import (
    InvalidInput,
    JobNotFound,
    LeaseLost,
    OsqueueError,
    Retryable,
)
from osqueue.state.validate import MAX_CLAIM

log = logging.getLogger(__name__)

__all__ = [
    "BatchHandler",
    "Handler",
    "JobContext",
    "JobHandler",
    "NoJobContext",
    "Retry",
    "Worker",
    "WorkerConfig",
    "WorkerCounters",
    "batch",
    "current_context",
    "current_job_lost",
    "error_line",
]

#: What the claim loop answers a completion handed to it that it did not send
#: (no free slot, or stopping): the job's own task completes it.
_SEND_IT_YOURSELF: Final = "send it yourself"
#: The outcome to come of a completion handed to the claim loop: None (done),
#: the error it got, or _SEND_IT_YOURSELF.
_HandedOutcome: TypeAlias = "asyncio.Future[OsqueueError | str | None]"
#: A completion handed to the claim loop: the job and its outcome to come.
_Handed: TypeAlias = tuple[Job, _HandedOutcome]

#: Answers to a heartbeat or settle call that mean the job is no longer ours.
_GONE_ERRORS: tuple[type[OsqueueError], ...] = (LeaseLost, JobNotFound)

DEFAULT_HEARTBEAT_TIMEOUT_S = 30.0
MAX_ERROR_CHARS = 1000
_CLAIM_BACKOFF_MIN_S = 0.05
_CLAIM_BACKOFF_MAX_S = 5.0

CancelReason: TypeAlias = Literal["lease_lost", "shutdown"]


# --------------------------------------------------------------------------- handler API


class Retry(OsqueueError):
    """The handler asked for this job to be retried later."""

    def __init__(self, after_s: float | None = None, message: str | None = None) -> None:
        if after_s is not None and not after_s >= 0:
            raise InvalidInput(f"{after_s!r} is not a number of seconds >= 0", field="after_s")
        super().__init__(message or f"retry requested (after_s={after_s})")
        self.after_s = after_s


class NoJobContext(OsqueueError, LookupError):
    """No job is running here: current_context() is only available inside a handler."""


JobHandler: TypeAlias = Callable[[Job], object]
"""``def handler(job)`` or ``async def handler(job)``; the return value is ignored."""

BatchResult: TypeAlias = Mapping[str, BaseException | None] | None


class BatchHandler:
    """A handler that receives ``list[Job]`` (up to ``batch_size`` jobs of one queue).

    It may raise (every job of the batch fails) or return a mapping
    ``job_id -> exception`` for the jobs that failed individually; jobs not in
    the mapping (or mapped to ``None``) are completed.  Made by :func:`batch`.
    """

    __slots__ = ("fn", "is_async")

    def __init__(self, fn: Callable[[list[Job]], object]) -> None:
        if not callable(fn):
            raise InvalidInput(f"{fn!r} is not callable", field="handler")
        self.fn = fn
        self.is_async = _is_async_callable(fn)

    def __call__(self, jobs: list[Job]) -> object:
        return self.fn(jobs)

    def __repr__(self) -> str:
        return f"batch({self.fn!r})"


Handler: TypeAlias = JobHandler | BatchHandler


def batch(fn: Callable[[list[Job]], object]) -> BatchHandler:
    """Decorator: mark ``fn`` as a batch handler (see :class:`BatchHandler`)."""
    return BatchHandler(fn)


def _is_async_callable(fn: object) -> bool:
    if isinstance(fn, BatchHandler):
        return fn.is_async
    return inspect.iscoroutinefunction(fn) or inspect.iscoroutinefunction(
        getattr(fn, "__call__", None)  # noqa: B004 (a callable object's async __call__)
    )


def error_line(exc: BaseException) -> str:
    """The traceback's last line for ``exc`` (``"module.Type: message"``), bounded in size.

    Notes added with ``add_note`` are left out; a multi-line message is kept on
    one line, its lines joined with ``" | "``.
    """
    lines = traceback.format_exception_only(type(exc), exc)
    notes = getattr(exc, "__notes__", None)
    if isinstance(notes, list | tuple) and 0 < len(notes) < len(lines):
        lines = lines[: len(lines) - len(notes)]
    text = " | ".join(part.strip() for part in lines[-1].strip().splitlines() if part.strip())
    text = text or type(exc).__name__
    return text if len(text) <= MAX_ERROR_CHARS else text[: MAX_ERROR_CHARS - 1] + "…"


# --------------------------------------------------------------------------- job context


class JobContext:
    """What a running handler can know about its job(s); see :func:`current_context`.

    Thread-safe: a sync handler polls :attr:`lost` or blocks in :meth:`wait_lost`
    from its thread while the worker marks it lost from the event loop.
    """

    def __init__(self, jobs: Sequence[Job], worker_id: str) -> None:
        self._jobs = tuple(jobs)
        self._worker_id = worker_id
        self._lost_ids: set[str] = set()
        self._cancelled = threading.Event()
        self._callbacks: list[Callable[[], object]] = []
        self._lock = threading.Lock()
        self.cancel_reason: CancelReason | None = None

    @property
    def jobs(self) -> tuple[Job, ...]:
        return self._jobs

    @property
    def job(self) -> Job:
        """The job (the first one, for a batch handler)."""
        return self._jobs[0]

    @property
    def worker_id(self) -> str:
        return self._worker_id

    @property
    def lost(self) -> bool:
        """True once this worker no longer owns the job(s): stop working, nothing will be saved.

        Set when the lease was lost (every job of a batch) or when shutdown
        released the job after the grace period.
        """
        return self._cancelled.is_set()

    def is_lost(self, job_id: str) -> bool:
        """True if that job of the batch is no longer ours (its result will be dropped)."""
        with self._lock:
            return self._cancelled.is_set() or job_id in self._lost_ids

    def wait_lost(self, timeout_s: float | None = None) -> bool:
        """Block (in a sync handler's thread) until the job is lost or ``timeout_s`` passes."""
        return self._cancelled.wait(timeout_s)

    def on_cancel(self, callback: Callable[[], object]) -> None:
        """Call ``callback()`` (from the worker's event loop thread) when the job is lost.

        Called at once if it already is.  Exceptions from the callback are logged.
        """
        with self._lock:
            if not self._cancelled.is_set():
                self._callbacks.append(callback)
                return
        _run_callback(callback, self)

    # -- worker side

    def _mark_lost(self, job_id: str) -> bool:
        """Record that ``job_id`` is lost; True when every job of the context is."""
        with self._lock:
            self._lost_ids.add(job_id)
            return all(j.id in self._lost_ids for j in self._jobs)

    def _cancel(self, reason: CancelReason) -> None:
        with self._lock:
            if self._cancelled.is_set():
                return
            self.cancel_reason = reason
            self._cancelled.set()
            callbacks, self._callbacks = self._callbacks, []
        for callback in callbacks:
            _run_callback(callback, self)


def _run_callback(callback: Callable[[], object], context: JobContext) -> None:
    try:
        callback()
    except Exception:
        log.exception(
            "job cancel callback failed",
            extra={"action": "cancel_callback", "job": context.job.id},
        )


_CURRENT: contextvars.ContextVar[JobContext] = contextvars.ContextVar("osqueue_job_context")


def current_context() -> JobContext:
    """The :class:`JobContext` of the handler that is running (async task or thread)."""
    try:
        return _CURRENT.get()
    except LookupError:
        raise NoJobContext() from None


def current_job_lost() -> bool:
    """True if the running handler's job is no longer owned by this worker."""
    return current_context().lost


# --------------------------------------------------------------------------- config


@dataclass(frozen=True, slots=True)
class WorkerConfig:
    """How a :class:`Worker` runs.  ``concurrency`` counts jobs whose handlers run
    at once (a batch of 10 takes 10 slots), so ``batch_size`` must not exceed it.
    Jobs whose completion is on its way hold no slot."""

    queues: tuple[str, ...] | None = None
    concurrency: int = 1
    batch_size: int = 1
    worker_id: str | None = None
    heartbeat_interval_s: float | None = None
    wait_s: float = 5.0
    shutdown_grace_period_s: float = 30.0
    burst: bool = False

    def __post_init__(self) -> None:
        _positive_int(self.concurrency, "concurrency")
        _positive_int(self.batch_size, "batch_size")
        if self.batch_size > self.concurrency:
            raise InvalidInput(
                f"{self.batch_size} exceeds concurrency ({self.concurrency}); "
                "concurrency counts jobs whose handlers run at once",
                field="batch_size",
            )
        if self.heartbeat_interval_s is not None:
            _seconds(self.heartbeat_interval_s, "heartbeat_interval_s", positive=True)
        _seconds(self.wait_s, "wait_s")
        _seconds(self.shutdown_grace_period_s, "shutdown_grace_period_s")
        if self.queues is not None:
            if isinstance(self.queues, str) or not self.queues:
                raise InvalidInput("must be a non-empty sequence of queue names", field="queues")
            for name in self.queues:
                if not isinstance(name, str) or not name:
                    raise InvalidInput(f"{name!r} is not a queue name", field="queues")
        if self.worker_id is not None and (
            not isinstance(self.worker_id, str) or not self.worker_id
        ):
            raise InvalidInput("must be a non-empty string", field="worker_id")


def _positive_int(value: object, field: str) -> None:
    if isinstance(value, bool) or not isinstance(value, int) or value < 1:
        raise InvalidInput(f"{value!r} is not an integer >= 1", field=field)


def _seconds(value: object, field: str, *, positive: bool = False) -> None:
    ok = isinstance(value, int | float) and not isinstance(value, bool) and value >= 0
    if not ok or (positive and value == 0) or value != value or value == float("inf"):
        bound = "> 0" if positive else ">= 0"
        raise InvalidInput(f"{value!r} is not a finite number of seconds {bound}", field=field)


def broker_heartbeat_timeout_s(client: object) -> float:
    """The broker's heartbeat timeout as ``client`` knows it, else the broker default.

    Clients expose it as ``heartbeat_timeout_s``; an in-process client that does
    not is asked through its broker's config.
    """
    for value in (
        getattr(client, "heartbeat_timeout_s", None),
        getattr(
            getattr(getattr(client, "broker", None), "config", None), "heartbeat_timeout_s", None
        ),
    ):
        if isinstance(value, int | float) and not isinstance(value, bool) and value > 0:
            return float(value)
    return DEFAULT_HEARTBEAT_TIMEOUT_S


def default_worker_id() -> str:
    return f"{socket.gethostname()}-{os.getpid()}-{secrets.token_hex(3)}"


@dataclass(slots=True)
class WorkerCounters:
    """Running totals, for progress display."""

    claimed: int = 0
    processed: int = 0
    failed: int = 0
    retried: int = 0
    lost: int = 0
    released: int = 0


# --------------------------------------------------------------------------- the worker


class _Unit:
    """One handler invocation: a job, or a batch of jobs of one queue."""

    __slots__ = ("context", "future", "handler", "is_async", "jobs", "settling", "wrapper")

    def __init__(self, jobs: tuple[Job, ...], handler: Handler, context: JobContext) -> None:
        self.jobs = jobs
        self.handler = handler
        self.context = context
        self.is_async = _is_async_callable(handler)
        self.future: asyncio.Future[object] | None = None
        self.wrapper: asyncio.Task[None] | None = None
        self.settling = False

    def live_jobs(self) -> list[Job]:
        return [j for j in self.jobs if not self.context.is_lost(j.id)]


@dataclass(frozen=True, slots=True)
class _Outcome:
    result: object
    error: BaseException | None


def _missing_handler(job: Job) -> None:
    raise InvalidInput(f"this worker has no handler for queue {job.queue!r}", field="queue")


class Worker:
    """Run handlers for jobs claimed through ``client``; see the module docstring.

    ``handlers`` is one handler for every queue, or a mapping queue -> handler
    (then ``queues`` defaults to its keys).  ``heartbeat_interval_s`` defaults
    to a third of the client's ``heartbeat_timeout_s`` (30 s if it has none).
    """

    def __init__(
        self,
        client: QueueClient,
        handlers: Mapping[str, Handler] | Handler,
        *,
        queues: Sequence[str] | None = None,
        concurrency: int = 1,
        batch_size: int = 1,
        worker_id: str | None = None,
        heartbeat_interval_s: float | None = None,
        wait_s: float = 5.0,
        shutdown_grace_period_s: float = 30.0,
        burst: bool = False,
        clock: Clock | None = None,
    ) -> None:
        config = WorkerConfig(
            queues=None if queues is None else tuple(queues),
            concurrency=concurrency,
            batch_size=batch_size,
            worker_id=worker_id,
            heartbeat_interval_s=heartbeat_interval_s,
            wait_s=wait_s,
            shutdown_grace_period_s=shutdown_grace_period_s,
            burst=burst,
        )
        self._setup(client, handlers, config, clock)

    @classmethod
    def from_config(
        cls,
        client: QueueClient,
        handlers: Mapping[str, Handler] | Handler,
        config: WorkerConfig,
        *,
        clock: Clock | None = None,
    ) -> Worker:
        worker = cls.__new__(cls)
        worker._setup(client, handlers, config, clock)
        return worker

    def _setup(
        self,
        client: QueueClient,
        handlers: Mapping[str, Handler] | Handler,
        config: WorkerConfig,
        clock: Clock | None,
    ) -> None:
        self.client = client
        self.config = config
        self._clock: Clock = clock or SystemClock()
        self._handlers, self.queues = _resolve_handlers(handlers, config.queues)
        self.worker_id = config.worker_id or default_worker_id()
        timeout = broker_heartbeat_timeout_s(client)
        self.heartbeat_interval_s = config.heartbeat_interval_s or timeout / 3.0
        self.counters = WorkerCounters()
        self._units: set[_Unit] = set()
        #: completions waiting to ride with the next claim (when the client can)
        self._handed: list[_Handed] = []
        self._together = isinstance(client, CompletesAndClaims)
        #: the claim loop waits in a long poll: completions must not wait for it
        self._parked = False
        self._orphaned: list[Job] = []
        self._changed = asyncio.Event()
        self._stop = asyncio.Event()
        self._hard_stop = asyncio.Event()
        self._tg: asyncio.TaskGroup | None = None
        self._executor: ThreadPoolExecutor | None = None
        self._started = False
        self._threads = _ThreadCount()

    # -- public control

    @property
    def running(self) -> int:
        """Jobs held right now (running, settling, or lost but still in a thread)."""
        return sum(len(u.jobs) for u in self._units)

    def _slots_taken(self) -> int:
        """Jobs whose handler has not returned yet (a settling job frees its slot)."""
        return sum(len(u.jobs) for u in self._units if not u.settling)

    @property
    def busy_threads(self) -> int:
        """Sync handlers still running in a thread; after :meth:`run` these are
        abandoned (lost or released) handlers that could not be killed."""
        return self._threads.busy

    @property
    def stopping(self) -> bool:
        return self._stop.is_set()

    def stop(self, *, hard: bool = False) -> None:
        """Stop claiming and shut down (call from the event loop's thread).

        Graceful: running handlers get ``shutdown_grace_period_s`` to finish.
        ``hard=True`` skips the grace period: cancel now and release.
        """
        if not self._stop.is_set():
            log.info(
                "worker stopping",
                extra={"action": "worker_stop", "worker": self.worker_id, "hard": hard},
            )
        self._stop.set()
        self._changed.set()
        if hard:
            self._hard_stop.set()

    def install_signal_handlers(self) -> None:
        """SIGTERM/SIGINT stop gracefully; a second signal stops hard."""
        loop = asyncio.get_running_loop()

        def on_signal(signum: int) -> None:
            log.warning(
                "signal received",
                extra={"action": "signal", "signal": signal.Signals(signum).name},
            )
            self.stop(hard=self._stop.is_set())

        for sig in (signal.SIGTERM, signal.SIGINT):
            loop.add_signal_handler(sig, on_signal, sig)

    async def run(self) -> None:
        """Run until :meth:`stop` (or, with ``burst``, until nothing is left).

        Cancellation from outside becomes a graceful stop (a second one a hard
        stop); ``CancelledError`` is re-raised once the worker has shut down.
        If a side task dies, the worker shuts down and raises its error.
        """
        if self._started:
            raise OsqueueError("this Worker already ran; create a new one")
        self._started = True
        main = asyncio.create_task(self._main(), name=f"osqueue-worker-{self.worker_id}")
        cancelled = 0
        while True:
            try:
                await asyncio.shield(main)
                break
            except asyncio.CancelledError:
                if main.done():
                    raise
                cancelled += 1
                self.stop(hard=cancelled > 1)
        if cancelled:
            raise asyncio.CancelledError()

    # -- the main task

    async def _main(self) -> None:
        log.info(
            "worker started",
            extra={
                "action": "worker_start",
                "worker": self.worker_id,
                "queues": list(self.queues),
                "concurrency": self.config.concurrency,
            },
        )
        self._executor = ThreadPoolExecutor(
            max_workers=self.config.concurrency, thread_name_prefix="osqueue-handler"
        )
        try:
            async with asyncio.TaskGroup() as tg:
                self._tg = tg
                heartbeat = tg.create_task(self._heartbeat_loop(), name="osqueue-worker-heartbeat")
                tg.create_task(self._claim_loop(), name="osqueue-worker-claim")
                await self._stop.wait()
                await self._drain()
                await self._abandon()
                heartbeat.cancel()
        except BaseExceptionGroup as group:
            raise _unwrap(group) from None
        finally:
            # A side task died (or the loop is closing): give back what we still hold.
            await asyncio.shield(self._release(self._abandon_units()))
            self._executor.shutdown(wait=False, cancel_futures=True)
            log.info(
                "worker stopped",
                extra={"action": "worker_exit", "worker": self.worker_id, **_asdict(self.counters)},
            )

    async def _drain(self) -> None:
        """Stage two: wait for running handlers, at most the grace period."""
        if not self._units:
            return
        await _first(
            self._wait_idle(),
            self._clock.sleep(self.config.shutdown_grace_period_s),
            self._hard_stop.wait(),
        )

    async def _wait_idle(self) -> None:
        while self._units:
            self._changed.clear()
            await self._changed.wait()

    async def _abandon(self) -> None:
        """Stage three: cancel what still runs and release its jobs."""
        await self._release(self._abandon_units())

    def _abandon_units(self) -> list[Job]:
        """Cancel every unit that is not settling; return the jobs to release."""
        jobs, self._orphaned = self._orphaned, []
        for unit in list(self._units):
            if not unit.settling:
                jobs.extend(self._abandon_unit(unit))
                if unit.wrapper is not None:
                    unit.wrapper.cancel()
        self._changed.set()
        return jobs

    def _abandon_unit(self, unit: _Unit) -> list[Job]:
        live = unit.live_jobs()
        unit.context._cancel("shutdown")
        if unit.future is not None and unit.is_async:
            unit.future.cancel()
        self._units.discard(unit)
        return live

    async def _release(self, jobs: list[Job]) -> None:
        if not jobs:
            return
        results = await asyncio.gather(
            *(self.client.release(job) for job in jobs), return_exceptions=True
        )
        for job, result in zip(jobs, results, strict=True):
            if result is None:
                self.counters.released += 1
            elif isinstance(result, Exception):
                log.warning(
                    "could not release job; it returns after the heartbeat timeout",
                    extra={"action": "release", "job": job.id, "error": error_line(result)},
                )
            else:
                raise result  # pragma: no cover (BaseException: KeyboardInterrupt and such)
        log.info(
            "released held jobs",
            extra={"action": "release", "worker": self.worker_id, "count": len(jobs)},
        )

    # -- claiming

    async def _claim_loop(self) -> None:
        backoff = _CLAIM_BACKOFF_MIN_S
        try:
            while not self._stop.is_set():
                free = min(self.config.concurrency - self._slots_taken(), MAX_CLAIM)
                handed, self._handed = self._handed, []
                if handed and free <= 0:
                    _answer(handed, _SEND_IT_YOURSELF)
                if free <= 0:
                    await self._wait_change()
                    continue
                wait_s = 0.0 if self.config.burst or handed else self.config.wait_s
                try:
                    if handed:
                        jobs = await self._complete_and_claim(handed, free)
                    else:
                        self._parked = wait_s > 0
                        jobs = await self._claim(free, wait_s)
                except Retryable as exc:
                    log.warning(
                        "claim failed; backing off",
                        extra={"action": "claim", "error": error_line(exc), "backoff_s": backoff},
                    )
                    self._parked = True  # completions do not wait out the backoff
                    self._hand_back()
                    await _first(self._clock.sleep(backoff), self._stop.wait())
                    backoff = min(backoff * 2, _CLAIM_BACKOFF_MAX_S)
                    continue
                finally:
                    self._parked = False
                backoff = _CLAIM_BACKOFF_MIN_S
                if jobs is None:
                    return
                if jobs:
                    self.counters.claimed += len(jobs)
                    self._dispatch(jobs)
                elif handed:
                    continue  # the next claim may wait (long poll)
                elif self.config.burst:
                    if not self._units:
                        log.info("burst: nothing left", extra={"action": "burst_done"})
                        self.stop()
                        return
                    await self._wait_change()
        finally:
            self._hand_back()

    def _hand_back(self) -> None:
        """Give every completion handed over so far back to its job's task."""
        handed, self._handed = self._handed, []
        _answer(handed, _SEND_IT_YOURSELF)

    async def _complete_and_claim(self, handed: list[_Handed], free: int) -> list[Job] | None:
        """Complete the handed jobs and claim up to ``free`` in one call (not
        interrupted by stop: it does not wait); None when stopping (jobs it got are
        released)."""
        assert isinstance(self.client, CompletesAndClaims)
        try:
            errors, jobs = await self.client.complete_and_claim(
                [job for job, _ in handed], self.worker_id, self.queues, max_jobs=free
            )
        except BaseException as exc:
            _answer(handed, exc if isinstance(exc, OsqueueError) else _SEND_IT_YOURSELF)
            raise
        for (_, future), error in zip(handed, errors, strict=True):
            if not future.done():
                future.set_result(error)
        if self._stop.is_set():
            self.counters.claimed += len(jobs)
            await self._release(jobs)
            return None
        return jobs

    async def _wait_change(self) -> None:
        self._changed.clear()
        if not self._handed:  # a completion handed over before the clear is a change
            await self._changed.wait()

    async def _claim(self, max_jobs: int, wait_s: float) -> list[Job] | None:
        """One claim, interrupted by stop(); None when stopping (jobs it got are released)."""
        call = asyncio.ensure_future(
            self.client.claim(self.worker_id, self.queues, max_jobs=max_jobs, wait_s=wait_s)
        )
        await _first(call, self._stop.wait())
        if not call.done():
            call.cancel()
            await asyncio.wait({call})
        if call.cancelled():
            return None
        jobs = call.result()
        if self._stop.is_set():
            self.counters.claimed += len(jobs)
            await self._release(jobs)
            return None
        return jobs

    def _dispatch(self, jobs: list[Job]) -> None:
        batches: dict[str, list[Job]] = {}
        for job in jobs:
            handler = self._handler_for(job.queue)
            if isinstance(handler, BatchHandler):
                batches.setdefault(job.queue, []).append(job)
            else:
                self._start((job,), handler)
        for queue, queued in batches.items():
            handler = self._handler_for(queue)
            size = self.config.batch_size
            for start in range(0, len(queued), size):
                self._start(tuple(queued[start : start + size]), handler)

    def _handler_for(self, queue: str) -> Handler:
        if isinstance(self._handlers, Mapping):
            return self._handlers.get(queue, _missing_handler)
        return self._handlers

    def _start(self, jobs: tuple[Job, ...], handler: Handler) -> None:
        assert self._tg is not None
        unit = _Unit(jobs, handler, JobContext(jobs, self.worker_id))
        self._units.add(unit)
        unit.wrapper = self._tg.create_task(self._run_unit(unit), name=f"osqueue-job-{jobs[0].id}")

    # -- running one unit

    async def _run_unit(self, unit: _Unit) -> None:
        try:
            outcome = await self._execute(unit)
            if outcome is not None and not unit.context.lost:
                unit.settling = True
                await self._settle(unit, outcome)
        except asyncio.CancelledError:
            if unit in self._units and not unit.settling:
                # Cancelled by the TaskGroup (a side task died): release on the way out.
                self._orphaned.extend(self._abandon_unit(unit))
            raise
        finally:
            self._units.discard(unit)
            self._changed.set()

    async def _execute(self, unit: _Unit) -> _Outcome | None:
        ctx = contextvars.copy_context()
        ctx.run(_CURRENT.set, unit.context)
        arg: object = list(unit.jobs) if isinstance(unit.handler, BatchHandler) else unit.jobs[0]
        future: asyncio.Future[object]
        if unit.is_async:
            future = asyncio.create_task(_await_handler(unit.handler, arg), context=ctx)
        else:
            assert self._executor is not None
            loop = asyncio.get_running_loop()
            future = loop.run_in_executor(self._executor, self._threads.run, ctx, unit.handler, arg)
        unit.future = future
        await asyncio.wait({future})
        if future.cancelled():
            return None
        error = future.exception()  # always retrieved, even when the result is dropped
        if unit.context.lost:
            return None
        return _Outcome(None if error is not None else future.result(), error)

    async def _settle(self, unit: _Unit, outcome: _Outcome) -> None:
        """Complete or fail the unit's jobs.  Its slot is free from here on: the
        completions are handed to the claim loop first (they ride with its next
        claim), then the loop is woken to claim."""
        results = _per_job_errors(unit, outcome)
        handed = {
            job.id: self._hand(job)
            for job, error in results
            if error is None and not unit.context.is_lost(job.id) and self._can_hand()
        }
        self._changed.set()
        await asyncio.gather(
            *(self._settle_job(unit, job, err, handed.get(job.id)) for job, err in results)
        )

    def _can_hand(self) -> bool:
        """Completions can ride with the next claim: the client can, and the claim
        loop neither waits in a long poll nor is stopping."""
        return self._together and not self._parked and not self._stop.is_set()

    def _hand(self, job: Job) -> _HandedOutcome:
        future: _HandedOutcome = asyncio.get_running_loop().create_future()
        self._handed.append((job, future))
        return future

    async def _settle_job(
        self,
        unit: _Unit,
        job: Job,
        error: BaseException | None,
        handed: _HandedOutcome | None = None,
    ) -> None:
        if unit.context.is_lost(job.id):
            return
        try:
            if error is None:
                await self._complete(job, handed)
                self.counters.processed += 1
            elif isinstance(error, Retry):
                await self.client.fail(job, error=error_line(error), retry_after_s=error.after_s)
                self.counters.retried += 1
            else:
                line = error_line(error)
                log.warning(
                    "job %s failed: %s",
                    job.id,
                    line,
                    extra={"action": "fail", "job": job.id, "error": line},
                    # The traceback only when debugging: failures are routine.
                    exc_info=error if log.isEnabledFor(logging.DEBUG) else None,
                )
                await self.client.fail(job, error=line)
                self.counters.failed += 1
        except _GONE_ERRORS as exc:
            self._note_lost(job, exc)
        except Retryable as exc:
            log.warning(
                "could not settle job; it will be retried after the heartbeat timeout",
                extra={"action": "settle", "job": job.id, "error": error_line(exc)},
            )

    async def _complete(self, job: Job, handed: _HandedOutcome | None) -> None:
        """Complete ``job``: through the claim loop if it was handed there (the loop
        may hand it back), else on its own."""
        if handed is not None:
            outcome = await handed
            if isinstance(outcome, OsqueueError):
                raise outcome
            if outcome is None:
                return
        await self.client.complete(job)

    # -- heartbeats

    async def _heartbeat_loop(self) -> None:
        while True:
            await self._clock.sleep(self.heartbeat_interval_s)
            beats = [
                (unit, job)
                for unit in list(self._units)
                if not unit.settling
                for job in unit.live_jobs()
            ]
            if not beats:
                continue
            failures = [
                e
                for e in await asyncio.gather(*(self._beat(unit, job) for unit, job in beats))
                if e is not None
            ]
            if failures:
                log.warning(
                    "%d of %d heartbeats failed (%s); retrying on the next beat",
                    len(failures),
                    len(beats),
                    error_line(failures[0]),
                    extra={"action": "heartbeat", "failed": len(failures), "sent": len(beats)},
                )

    async def _beat(self, unit: _Unit, job: Job) -> OsqueueError | None:
        """Heartbeat one job; a transient error is returned (the caller logs it once)."""
        try:
            await self.client.heartbeat(job)
        except _GONE_ERRORS as exc:
            if unit.settling or unit not in self._units:
                return None
            self._note_lost(job, exc)
            if unit.context._mark_lost(job.id):
                unit.context._cancel("lease_lost")
                if unit.is_async and unit.future is not None:
                    unit.future.cancel()
        except Retryable as exc:
            return exc
        return None

    def _note_lost(self, job: Job, exc: OsqueueError) -> None:
        self.counters.lost += 1
        log.warning(
            "lost the lease of a job; its result will be dropped",
            extra={"action": "lease_lost", "job": job.id, "error": error_line(exc)},
        )


# --------------------------------------------------------------------------- helpers


def _resolve_handlers(
    handlers: Mapping[str, Handler] | Handler, queues: tuple[str, ...] | None
) -> tuple[Mapping[str, Handler] | Handler, tuple[str, ...]]:
    if isinstance(handlers, Mapping):
        if not handlers:
            raise InvalidInput("the handler mapping is empty", field="handlers")
        for name, handler in handlers.items():
            if not isinstance(name, str) or not name:
                raise InvalidInput(f"{name!r} is not a queue name", field="handlers")
            if not callable(handler):
                raise InvalidInput(f"handler for {name!r} is not callable", field="handlers")
        resolved = queues or tuple(handlers)
        missing = [q for q in resolved if q not in handlers]
        if missing:
            raise InvalidInput(f"no handler for queue(s) {', '.join(missing)}", field="handlers")
        return dict(handlers), resolved
    if not callable(handlers):
        raise InvalidInput(f"{handlers!r} is not callable", field="handlers")
    return handlers, queues or ("default",)


class _ThreadCount:
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


def _per_job_errors(unit: _Unit, outcome: _Outcome) -> list[tuple[Job, BaseException | None]]:
    if outcome.error is not None or not isinstance(unit.handler, BatchHandler):
        return [(job, outcome.error) for job in unit.jobs]
    result = outcome.result
    if not isinstance(result, Mapping):
        return [(job, None) for job in unit.jobs]
    ids = {job.id for job in unit.jobs}
    unknown = [k for k in result if k not in ids]
    if unknown:
        log.warning(
            "batch handler returned errors for jobs not in its batch",
            extra={"action": "batch_result", "unknown": unknown[:10]},
        )
    out: list[tuple[Job, BaseException | None]] = []
    for job in unit.jobs:
        value = result.get(job.id)
        if value is not None and not isinstance(value, BaseException):
            value = InvalidInput(
                f"batch handler returned {value!r} for job {job.id}; expected an exception",
                field="result",
            )
        out.append((job, value))
    return out


async def _first(*aws: Awaitable[object]) -> None:
    """Wait until the first of ``aws`` finishes.

    Coroutines are run as tasks and cancelled when another finishes first; a
    Future/Task passed in is only waited on (its owner decides its fate).
    """
    owned: list[asyncio.Future[object]] = []
    futures: list[asyncio.Future[object]] = []
    for aw in aws:
        if isinstance(aw, asyncio.Future):
            futures.append(aw)
        else:
            task: asyncio.Future[object] = asyncio.ensure_future(_as_coroutine(aw))
            owned.append(task)
            futures.append(task)
    try:
        await asyncio.wait(futures, return_when=asyncio.FIRST_COMPLETED)
    finally:
        pending = [t for t in owned if not t.done()]
        for task in pending:
            task.cancel()
        if pending:
            await asyncio.wait(pending)
    for task in owned:
        if task.done() and not task.cancelled() and (error := task.exception()) is not None:
            raise error


async def _as_coroutine(aw: Awaitable[object]) -> object:
    return await aw


def _answer(handed: list[_Handed], outcome: OsqueueError | str) -> None:
    """Resolve the futures of handed completions that are still awaited."""
    for _, future in handed:
        if not future.done():
            future.set_result(outcome)


def _unwrap(group: BaseExceptionGroup[BaseException]) -> BaseException:
    """The first real error of a TaskGroup failure (nested groups flattened)."""
    for exc in group.exceptions:
        if isinstance(exc, BaseExceptionGroup):
            return _unwrap(exc)
        if not isinstance(exc, asyncio.CancelledError):
            return exc
    return group


def _asdict(counters: WorkerCounters) -> dict[str, int]:
    return {name: getattr(counters, name) for name in WorkerCounters.__slots__}
