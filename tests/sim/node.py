"""What every simulated process has: a pause switch and its own clock.

A :class:`Gate` models SIGSTOP/SIGCONT: while it is closed the node's storage
calls and clock sleeps do not return, so the node makes no progress at any
await point (the CPU work between awaits is instantaneous anyway).

A :class:`NodeClock` is the node's view of time: the virtual loop's time plus
an epoch and a per-node skew that can jump (an NTP correction, a VM resume).
Its monotonic clock never jumps, runs at the same rate on every node, and
starts where the node booted (monotonic clocks of two machines share no
origin, so a broker that compared its monotonic time with another's would
be caught: leases are judged on the observer's own).  It satisfies
:class:`osqueue.clock.Clock`.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable

#: 2027-01-15T08:00:00Z: far from any hour or day boundary tests might care about.
EPOCH_S = 1_800_000_000.0


class Gate:
    """Open: the node runs.  Closed: it is paused at its next await point."""

    def __init__(self) -> None:
        self._open = asyncio.Event()
        self._open.set()

    @property
    def paused(self) -> bool:
        return not self._open.is_set()

    def pause(self) -> None:
        self._open.clear()

    def resume(self) -> None:
        self._open.set()

    async def passage(self) -> None:
        """Return at once while open; wait for the resume while paused."""
        if not self._open.is_set():
            await self._open.wait()


class NodeClock:
    """A node's clock: shared virtual time, its own skew, and its pause gate."""

    def __init__(
        self, gate: Gate, *, skew_s: float = 0.0, epoch_s: float = EPOCH_S, boot_s: float = 0.0
    ) -> None:
        self.gate = gate
        self.skew_s = skew_s
        self.epoch_s = epoch_s
        #: how long before the run the node booted (its monotonic clock's lead)
        self.boot_s = boot_s

    def now(self) -> float:
        return self.epoch_s + asyncio.get_running_loop().time() + self.skew_s

    def monotonic(self) -> float:
        return asyncio.get_running_loop().time() + self.boot_s

    async def sleep(self, seconds: float) -> None:
        await asyncio.sleep(max(0.0, seconds))
        await self.gate.passage()

    def call_later(self, delay_s: float, callback: Callable[[], object]) -> asyncio.Task[None]:
        """Run ``callback`` once ``delay_s`` has passed and the node is not paused (what
        the commit loop does with a clock that has only ``sleep``; the delayed-object
        manager's load timer needs this method, else it arms no timer at all)."""
        sleeper = asyncio.ensure_future(self.sleep(delay_s))
        sleeper.add_done_callback(lambda f: None if f.cancelled() else callback())
        return sleeper

    def jump(self, seconds: float) -> None:
        """Move this node's wall clock (not its monotonic clock)."""
        self.skew_s += seconds
