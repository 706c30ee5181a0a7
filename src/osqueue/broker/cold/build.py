"""Where the objects of a spill are built (on the commit loop when small, in a thread
when large), and how they are stored (whole, retried with backoff).

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

from osqueue.broker.core.retry import StorageRetry
from osqueue.errors import StorageError
from osqueue.storage.port import Storage

T = TypeVar("T")

#: tries of a cold object's write before its spill is given up (planned again later)
PUT_ATTEMPTS = 3
#: a spill of at least this many jobs builds its objects in a thread, off the commit loop
BUILD_IN_THREAD_JOBS = 5_000


async def build_objects(jobs: int, build: Callable[[], T]) -> T:
    """``build()`` for a spill of ``jobs`` jobs: at once if below
    :data:`BUILD_IN_THREAD_JOBS`, else in a thread."""
    if jobs < BUILD_IN_THREAD_JOBS:
        return build()
    return await asyncio.to_thread(build)


async def put_object(storage: Storage, retry: StorageRetry, key: str, data: bytes) -> None:
    """Store a new cold object whole (``put``), tried :data:`PUT_ATTEMPTS` times with
    backoff; the last error is raised."""
    attempt = 0
    while True:
        try:
            await storage.put(key, data)
            return
        except StorageError as exc:
            attempt += 1
            if attempt >= PUT_ATTEMPTS:
                raise
            await retry.wait(attempt - 1, exc)
