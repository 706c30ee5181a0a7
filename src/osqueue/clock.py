"""Time, injected.

Everything that needs the time takes a :class:`Clock`.  Production code uses
:class:`SystemClock`; tests and the simulation use :class:`ManualClock`, which
only moves when told to, so leases, heartbeats and backoff are tested instantly.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable
from typing import Protocol


class Clock(Protocol):
    def now(self) -> float:
        """Wall-clock seconds since the Unix epoch (as written into the document)."""
        ...

    def monotonic(self) -> float:
        """Seconds on a clock that never jumps (for timeouts)."""
        ...

    async def sleep(self, seconds: float) -> None:
        """Sleep ``seconds`` of this clock's time."""
        ...


class Timer(Protocol):
    def cancel(self) -> object: ...


class SystemClock:
    #: ``time.time`` itself (a builtin is not bound to the instance): the broker
    #: reads the clock several times a commit, and a method around it is a frame each
    now = staticmethod(time.time)

    def call_later(self, delay_s: float, callback: Callable[[], object]) -> Timer:
        """Run ``callback`` on the running loop after ``delay_s`` (a cheap timer)."""
        return asyncio.get_running_loop().call_later(max(0.0, delay_s), callback)

    monotonic = staticmethod(time.monotonic)

    async def sleep(self, seconds: float) -> None:
        await asyncio.sleep(max(0.0, seconds))


class ManualClock:
    """A clock that moves only when :meth:`advance` is called.

    ``sleep`` parks until enough time has been advanced, so a test can run a
    broker's lease renewal or a worker's heartbeat timer without waiting.
    """

    def __init__(self, start: float = 1_800_000_000.0) -> None:
        self._now = start
        self._mono = 0.0
        self._sleepers: list[tuple[float, asyncio.Future[None]]] = []

    def now(self) -> float:
        return self._now

    def monotonic(self) -> float:
        return self._mono

    async def sleep(self, seconds: float) -> None:
        if seconds <= 0:
            await asyncio.sleep(0)
            return
        fut: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        self._sleepers.append((self._mono + seconds, fut))
        await fut

    def call_later(self, delay_s: float, callback: Callable[[], object]) -> Timer:
        """Run ``callback`` once ``delay_s`` of this clock's time has passed."""
        fut: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        fut.add_done_callback(lambda f: None if f.cancelled() else callback())
        self._sleepers.append((self._mono + max(0.0, delay_s), fut))
        return fut

    def advance(self, seconds: float) -> None:
        """Move time forward and wake every sleeper whose deadline passed."""
        self._now += seconds
        self._mono += seconds
        due = [s for s in self._sleepers if s[0] <= self._mono]
        self._sleepers = [s for s in self._sleepers if s[0] > self._mono]
        for _, fut in due:
            if not fut.done():
                fut.set_result(None)

    def jump(self, seconds: float) -> None:
        """Move the wall clock only (a skewed or corrected clock); monotonic time stays."""
        self._now += seconds

    @property
    def sleepers(self) -> int:
        return sum(1 for _, f in self._sleepers if not f.done())
