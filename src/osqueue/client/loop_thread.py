"""A private event loop on its own thread, for sync callers of async clients.

Scripts and Spark executors call the sync twins; each call is submitted to
this loop and waited for, so one async client (its channel, its batchers)
serves every thread of the process.
"""

from __future__ import annotations

import asyncio
import threading
from collections.abc import Coroutine
from typing import Any, TypeVar

from osqueue.errors import ShuttingDown

T = TypeVar("T")


class LoopThread:
    """Runs coroutines on a private event loop in a daemon thread."""

    def __init__(self, name: str = "osqueue-client") -> None:
        self._loop = asyncio.new_event_loop()
        self._ready = threading.Event()
        self._closed = False
        self._thread = threading.Thread(target=self._main, name=name, daemon=True)
        self._thread.start()
        self._ready.wait()

    def _main(self) -> None:
        asyncio.set_event_loop(self._loop)
        self._loop.call_soon(self._ready.set)
        try:
            self._loop.run_forever()
        finally:
            self._loop.run_until_complete(self._loop.shutdown_asyncgens())
            self._loop.close()

    @property
    def loop(self) -> asyncio.AbstractEventLoop:
        return self._loop

    def run(self, coro: Coroutine[Any, Any, T]) -> T:
        """Run ``coro`` on the loop and return its result (or raise its error)."""
        if self._closed:
            coro.close()
            raise ShuttingDown("the client is closed")
        if threading.current_thread() is self._thread:
            coro.close()
            raise RuntimeError("a sync client method was called from its own event loop thread")
        return asyncio.run_coroutine_threadsafe(coro, self._loop).result()

    def close(self) -> None:
        """Stop the loop and join its thread (idempotent)."""
        if self._closed:
            return
        self._closed = True
        self._loop.call_soon_threadsafe(self._loop.stop)
        self._thread.join()
