"""The remote client's deadlines and backoff run on its injected clock.

With a :class:`ManualClock` a call that finds no broker backs off and gives up
at its deadline as the test moves the clock: no real waiting.
"""

from __future__ import annotations

import asyncio
import time
import uuid
from collections.abc import AsyncIterator

import pytest

from osqueue.client.remote import RemoteClient, RemoteConfig
from osqueue.clock import ManualClock
from osqueue.errors import BrokerUnavailable
from osqueue.storage import MemoryStorage


class RecordingClock(ManualClock):
    """A ManualClock that records each sleep and lets a test wait for the next one."""

    def __init__(self) -> None:
        super().__init__()
        self.waits: list[float] = []
        self._slept = asyncio.Event()

    async def sleep(self, seconds: float) -> None:
        self.waits.append(seconds)
        self._slept.set()
        await super().sleep(seconds)

    async def next_sleep(self) -> float:
        """The length of the next sleep, once someone is parked in it."""
        count = len(self.waits)
        while len(self.waits) == count:
            self._slept.clear()
            await self._slept.wait()
        return self.waits[-1]


CONFIG = RemoteConfig(timeout_s=30.0, backoff_base_s=0.5, backoff_cap_s=4.0)


@pytest.fixture
async def client() -> AsyncIterator[tuple[RemoteClient, RecordingClock]]:
    name = f"clock-{uuid.uuid4().hex}"
    clock = RecordingClock()
    remote = RemoteClient(MemoryStorage(name), CONFIG, clock=clock)  # no document: no broker
    try:
        yield remote, clock
    finally:
        await remote.close()
        MemoryStorage.drop(name)


async def test_a_call_backs_off_on_the_clock_and_gives_up_at_its_deadline(
    client: tuple[RemoteClient, RecordingClock],
) -> None:
    remote, clock = client
    started = time.monotonic()
    call = asyncio.create_task(remote.stats())
    advanced = 0.0
    for attempt in range(1000):
        wait = await clock.next_sleep()
        # Backoff(0.5, 4.0, jitter=0.5): within [d / 2, d] of d = min(4, 0.5 * 2**n),
        # and never past the deadline.
        full = min(4.0, 0.5 * 2**attempt)
        assert min(full / 2, 30.0 - advanced) <= wait <= min(full, 30.0 - advanced)
        assert not call.done()
        clock.advance(wait)
        advanced += wait
        if advanced >= 30.0:
            break
    with pytest.raises(BrokerUnavailable, match="answered within 30s") as caught:
        await call
    assert "names no broker address" in str(caught.value.__cause__)
    assert advanced == pytest.approx(30.0)
    assert len(clock.waits) > 8  # capped at 4 s, 30 s took many tries
    assert time.monotonic() - started < 10.0  # the clock's 30 s, not the wall's


async def test_attempts_are_cut_to_what_is_left_of_the_deadline(
    client: tuple[RemoteClient, RecordingClock],
) -> None:
    remote, clock = client
    deadline = remote.failover.deadline(extra_s=5.0)  # a claim's wait adds to it
    assert remote.failover.attempt_timeout(deadline) == CONFIG.rpc_timeout_s
    clock.advance(30.0)
    assert remote.failover.attempt_timeout(deadline) == pytest.approx(5.0)
    clock.advance(10.0)
    assert remote.failover.attempt_timeout(deadline) == 0.001  # past it: fail fast
