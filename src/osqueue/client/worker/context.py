"""What a running handler can know about its job: :func:`current_context`.

Each handler invocation runs in a copy of the event loop's
:mod:`contextvars` context (:func:`context_for`) in which
:func:`current_context` answers its :class:`JobContext`, in an async task and
in a sync handler's thread alike.  The worker marks a context lost (lease
lost, or released at shutdown) from the event loop; the handler polls
:attr:`JobContext.lost`, blocks in :meth:`JobContext.wait_lost`, or registers
:meth:`JobContext.on_cancel`.
"""

from __future__ import annotations

import contextvars
import logging
import threading
from collections.abc import Callable, Sequence
from typing import Literal, TypeAlias

from osqueue.api import Job
from osqueue.errors import OsqueueError

log = logging.getLogger(__name__)

CancelReason: TypeAlias = Literal["lease_lost", "shutdown"]


class NoJobContext(OsqueueError, LookupError):
    """No job is running here: current_context() is only available inside a handler."""


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


def context_for(job_context: JobContext) -> contextvars.Context:
    """A copy of the running context in which :func:`current_context` is ``job_context``."""
    ctx = contextvars.copy_context()
    ctx.run(_CURRENT.set, job_context)
    return ctx


def current_context() -> JobContext:
    """The :class:`JobContext` of the handler that is running (async task or thread)."""
    try:
        return _CURRENT.get()
    except LookupError:
        raise NoJobContext() from None


def current_job_lost() -> bool:
    """True if the running handler's job is no longer owned by this worker."""
    return current_context().lost
