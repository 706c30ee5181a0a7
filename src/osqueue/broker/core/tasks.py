"""The broker's side tasks: named, supervised, and ended with the broker."""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Coroutine, Iterator
from typing import Any

log = logging.getLogger(__name__)


class SideTasks:
    """The tasks that run beside the commit loop: archive writers, the payload sweep,
    the activity log, payload deletes, the final commit of a graceful stop.

    Each is named after what it does.  One that dies of an error is logged and
    leaves the broker serving (nothing waits on it); :meth:`cancel` ends them
    all when the broker stops, so nothing of the broker outlives ``stop()``.
    """

    def __init__(self) -> None:
        self._tasks: set[asyncio.Task[None]] = set()

    def spawn(self, coro: Coroutine[Any, Any, None], name: str) -> asyncio.Task[None]:
        """Run ``coro`` as a side task named ``name`` (plus a number)."""
        task = asyncio.ensure_future(coro)
        task.set_name(f"{name}-{id(task)}")
        self._tasks.add(task)
        task.add_done_callback(self._ended)
        return task

    def _ended(self, task: asyncio.Task[None]) -> None:
        self._tasks.discard(task)
        if not task.cancelled() and task.exception() is not None:
            log.error(
                "broker side task failed",
                exc_info=task.exception(),
                extra={"action": "fail", "task": task.get_name()},
            )

    def __iter__(self) -> Iterator[asyncio.Task[None]]:
        """The side tasks that have not ended (a snapshot)."""
        return iter(list(self._tasks))

    async def cancel(self) -> None:
        """Cancel every side task (but the caller's own) and wait until each has ended."""
        tasks = [task for task in self._tasks if task is not asyncio.current_task()]
        for task in tasks:
            task.cancel()
        for task in tasks:
            with contextlib.suppress(asyncio.CancelledError, Exception):
                await task
