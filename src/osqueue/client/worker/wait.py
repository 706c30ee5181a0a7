"""Waiting for whichever of several things happens first (a claim or the stop, a
backoff or the stop, idle or the grace period or a hard stop)."""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable


async def first_of(*aws: Awaitable[object]) -> None:
    """Wait until the first of ``aws`` finishes.

    Coroutines are run as tasks and cancelled when another finishes first; a
    Future/Task passed in is only waited on (its owner decides its fate).  An
    error of a task run here is raised.
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
