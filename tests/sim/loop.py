"""An asyncio event loop that runs on virtual time.

``loop.time()`` is a number the loop moves itself: whenever nothing is ready
to run, it jumps straight to the next timer instead of sleeping.  Every
``asyncio.sleep``, ``wait_for`` and ``call_later`` therefore costs no real
time, and a run is a pure function of its inputs (one seeded RNG), so a seed
replays exactly.

If nothing is ready and no timer is armed while the main task is still
waiting, no event can ever wake it: the loop raises :class:`SimulationStuck`
(a liveness failure, reported like any invariant violation).

Requests to a real server (the simulation over moto or Azurite) take real
time that virtual time cannot skip.  While any is out (``real_io > 0``, kept
by :class:`sim.store.SharedStore`), the loop waits for it for real and virtual
time stands still: a request costs no virtual time, so its wall-clock latency
never expires a lease or a heartbeat.  (Simulated latency is still added
around it by the node's faulty connection.)
"""

from __future__ import annotations

import asyncio
import selectors
from collections.abc import Coroutine
from typing import Any, TypeVar

T = TypeVar("T")


class SimulationStuck(RuntimeError):
    """Every task waits on something no timer or event will ever deliver."""


#: virtual time one loop iteration costs
CPU_QUANTUM_S = 1e-6
#: loop iterations in a row with work ready (no timer awaited) that count as a livelock
MAX_BUSY_STEPS = 200_000
#: while real requests are out, wait for them in slices of this many real seconds...
REAL_WAIT_S = 0.5
#: ... and give up (a stuck run) when none answers for this long
REAL_DEADLINE_S = 120.0


class _VirtualSelector(selectors.DefaultSelector):
    """Polls real file descriptors without blocking; a timeout advances virtual time."""

    def __init__(self, loop: VirtualTimeLoop) -> None:
        super().__init__()
        self._virtual = loop
        self._steps = 0
        #: real seconds waited in a row for real requests that did not answer
        self._real_waited_s = 0.0
        #: while cancelling leftovers at the end, no deadlock or livelock is reported
        self.cleanup = False

    def select(self, timeout: float | None = None) -> list[tuple[selectors.SelectorKey, int]]:
        # Every loop iteration costs a little CPU time, as on a real machine: a timer armed
        # a few ulps ahead (a timeout rounded to nothing) fires on the next pass, not never.
        self._virtual.advance_to(self._virtual.time() + CPU_QUANTUM_S)
        now = self._virtual.time()
        self._steps = self._steps + 1 if timeout == 0 else 0
        if self._steps > MAX_BUSY_STEPS and not self.cleanup:
            raise SimulationStuck(
                f"livelock: {self._steps} loop iterations in a row at t={now:.3f}s, "
                "none of them waiting for a timer:"
                f"\n{_stacks(self._virtual)}"
            )
        ready = super().select(0)
        if ready:
            return ready
        if self._virtual.real_io and timeout != 0:
            return self._wait_real(now)
        if timeout is None:
            if self.cleanup:
                return []
            raise SimulationStuck(
                f"deadlock at t={now:.3f}s: nothing is scheduled and nothing is ready:"
                f"\n{_stacks(self._virtual)}"
            )
        if timeout > CPU_QUANTUM_S:
            self._virtual.advance_to(now + timeout - CPU_QUANTUM_S)
        return []

    def _wait_real(self, now: float) -> list[tuple[selectors.SelectorKey, int]]:
        """Real requests are out: virtual time stands still until one of them answers."""
        ready = super().select(REAL_WAIT_S)
        if ready:
            self._real_waited_s = 0.0
            return ready
        self._real_waited_s += REAL_WAIT_S
        if self._real_waited_s > REAL_DEADLINE_S and not self.cleanup:
            raise SimulationStuck(
                f"{self._virtual.real_io} real storage request(s) unanswered for "
                f"{REAL_DEADLINE_S:g} real seconds at t={now:.3f}s:\n{_stacks(self._virtual)}"
            )
        return []


def _stacks(loop: asyncio.AbstractEventLoop) -> str:
    """One line per pending task: its await chain, outermost first."""
    out = []
    for task in asyncio.all_tasks(loop):
        chain: list[str] = []
        coro: Any = task.get_coro()
        while coro is not None and len(chain) < 12:
            frame = getattr(coro, "cr_frame", None) or getattr(coro, "gi_frame", None)
            if frame is not None:
                chain.append(f"{frame.f_code.co_name}:{frame.f_lineno}")
            coro = getattr(coro, "cr_await", None) or getattr(coro, "gi_yieldfrom", None)
        out.append(f"  {task.get_name()}: {' > '.join(chain)}")
    return "\n".join(sorted(out)[:60])


class VirtualTimeLoop(asyncio.SelectorEventLoop):
    """A selector event loop whose clock is virtual (see the module docstring)."""

    def __init__(self) -> None:
        self._virtual_now = 0.0
        #: requests to a real server now in flight (virtual time waits for them)
        self.real_io = 0
        self.selector = _VirtualSelector(self)
        super().__init__(self.selector)

    def time(self) -> float:
        return self._virtual_now

    def advance_to(self, when: float) -> None:
        if when > self._virtual_now:
            self._virtual_now = when


def run_virtual(main: Coroutine[Any, Any, T]) -> T:
    """Run ``main`` to completion on a fresh :class:`VirtualTimeLoop`, then close it.

    Tasks still pending at the end are cancelled and awaited, so nothing leaks
    into the next run.
    """
    loop = VirtualTimeLoop()
    try:
        asyncio.set_event_loop(loop)
        return loop.run_until_complete(main)
    finally:
        try:
            _cancel_all(loop)
            loop.run_until_complete(loop.shutdown_asyncgens())
        finally:
            asyncio.set_event_loop(None)
            loop.close()


def _cancel_all(loop: VirtualTimeLoop) -> None:
    loop.selector.cleanup = True
    for _ in range(10):
        tasks = [t for t in asyncio.all_tasks(loop) if not t.done()]
        if not tasks:
            return
        for task in tasks:
            task.cancel()
        try:
            loop.run_until_complete(asyncio.gather(*tasks, return_exceptions=True))
        except SimulationStuck:
            continue
