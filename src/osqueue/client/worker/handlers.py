"""The handler API: what a handler is, how it asks for a retry, and how its failure reads.

A handler is ``def handler(job)`` or ``async def handler(job)``; one marked
with :func:`batch` receives ``list[Job]`` instead.  Returning completes the
job; raising fails it with :func:`error_line` of the exception as
``last_error``; raising :class:`Retry` asks for a retry later.
:class:`HandlerTable` maps a worker's queues to their handlers.
"""

from __future__ import annotations

import inspect
import traceback
from collections.abc import Callable, Mapping
from typing import TypeAlias

from osqueue.api import Job
from osqueue.errors import InvalidInput, OsqueueError

MAX_ERROR_CHARS = 1000


class Retry(OsqueueError):
    """The handler asked for this job to be retried later."""

    def __init__(self, after_s: float | None = None, message: str | None = None) -> None:
        if after_s is not None and not after_s >= 0:
            raise InvalidInput(f"{after_s!r} is not a number of seconds >= 0", field="after_s")
        super().__init__(message or f"retry requested (after_s={after_s})")
        self.after_s = after_s


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
        self.is_async = is_async_callable(fn)

    def __call__(self, jobs: list[Job]) -> object:
        return self.fn(jobs)

    def __repr__(self) -> str:
        return f"batch({self.fn!r})"


Handler: TypeAlias = JobHandler | BatchHandler


def batch(fn: Callable[[list[Job]], object]) -> BatchHandler:
    """Decorator: mark ``fn`` as a batch handler (see :class:`BatchHandler`)."""
    return BatchHandler(fn)


def is_async_callable(fn: object) -> bool:
    """True for an ``async def`` function, a callable object with an async
    ``__call__``, or a :class:`BatchHandler` wrapping either."""
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


class HandlerTable:
    """The handler for each queue a worker takes jobs from.

    ``handlers`` is one handler for every queue, or a mapping queue -> handler
    (then ``queues`` defaults to its keys; otherwise to ``("default",)``).  A
    job of a queue the mapping lacks fails with an error naming the queue.
    """

    __slots__ = ("_handlers", "queues")

    def __init__(
        self, handlers: Mapping[str, Handler] | Handler, queues: tuple[str, ...] | None
    ) -> None:
        self._handlers: Mapping[str, Handler] | Handler
        if isinstance(handlers, Mapping):
            _check_mapping(handlers)
            resolved = queues or tuple(handlers)
            missing = [q for q in resolved if q not in handlers]
            if missing:
                raise InvalidInput(
                    f"no handler for queue(s) {', '.join(missing)}", field="handlers"
                )
            self._handlers, self.queues = dict(handlers), resolved
            return
        if not callable(handlers):
            raise InvalidInput(f"{handlers!r} is not callable", field="handlers")
        self._handlers, self.queues = handlers, queues or ("default",)

    def for_queue(self, queue: str) -> Handler:
        if isinstance(self._handlers, Mapping):
            return self._handlers.get(queue, _missing_handler)
        return self._handlers


def _check_mapping(handlers: Mapping[str, Handler]) -> None:
    if not handlers:
        raise InvalidInput("the handler mapping is empty", field="handlers")
    for name, handler in handlers.items():
        if not isinstance(name, str) or not name:
            raise InvalidInput(f"{name!r} is not a queue name", field="handlers")
        if not callable(handler):
            raise InvalidInput(f"handler for {name!r} is not callable", field="handlers")


def _missing_handler(job: Job) -> None:
    raise InvalidInput(f"this worker has no handler for queue {job.queue!r}", field="queue")
