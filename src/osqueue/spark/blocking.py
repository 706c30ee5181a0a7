"""Run osqueue's async storage port and clients from Spark's blocking code.

Spark calls data sources and handlers from plain threads.  :func:`run` drives
one coroutine to completion on a short-lived event loop, in a helper thread
when the caller already runs a loop, so it is safe from anywhere.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
from collections.abc import Awaitable, Callable
from typing import TypeVar

from osqueue.storage.port import Storage

T = TypeVar("T")


def run(make: Callable[[], Awaitable[T]]) -> T:
    """Run the awaitable ``make()`` returns to completion and return its result."""

    async def main() -> T:
        return await make()

    try:
        asyncio.get_running_loop()
    except RuntimeError:
        return asyncio.run(main())
    with concurrent.futures.ThreadPoolExecutor(1) as pool:
        return pool.submit(asyncio.run, main()).result()


def with_storage(url: str, use: Callable[[Storage], Awaitable[T]]) -> T:
    """Open the store at ``url``, run ``use(store)``, close it; blocking."""

    async def main() -> T:
        from osqueue.storage import from_url

        store = from_url(url)
        try:
            return await use(store)
        finally:
            await store.close()

    return run(main)
