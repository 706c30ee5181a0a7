"""Where the objects of a spill are built: on the commit loop when small, in a thread
when large.

Building an object is a byte join and a SHA-256 (about 1.6 ms per MB).  A thread
costs more than that for a few jobs, and a small build on the loop keeps the order of
what happens the loop's own (the simulator replays a seed byte for byte only if no
small build waits on a thread).  The ids of the objects are drawn by the caller, on
the loop, for the same reason.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from typing import TypeVar

T = TypeVar("T")

#: a spill of at least this many jobs builds its objects in a thread, off the commit loop
BUILD_IN_THREAD_JOBS = 5_000


async def build_objects(jobs: int, build: Callable[[], T]) -> T:
    """``build()`` for a spill of ``jobs`` jobs: at once if below
    :data:`BUILD_IN_THREAD_JOBS`, else in a thread."""
    if jobs < BUILD_IN_THREAD_JOBS:
        return build()
    return await asyncio.to_thread(build)
