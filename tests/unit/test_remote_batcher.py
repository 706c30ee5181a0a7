"""The client-side batcher: coalescing, bounds, per-item outcomes, cancellation."""

from __future__ import annotations

import asyncio

import pytest

from osqueue.client.batcher import Batcher
from osqueue.errors import InvalidInput, LeaseLost, ShuttingDown


class Recorder:
    """A send function that records its batches and can be held open."""

    def __init__(self) -> None:
        self.batches: list[list[int]] = []
        self.gate = asyncio.Event()
        self.gate.set()
        self.sent = asyncio.Condition()

    async def send(self, items: list[int]) -> list[int | BaseException]:
        async with self.sent:
            self.batches.append(list(items))
            self.sent.notify_all()
        await self.gate.wait()
        return [LeaseLost(f"odd {i}") if i % 2 else i * 10 for i in items]

    async def wait_batches(self, n: int) -> None:
        async with self.sent:
            await self.sent.wait_for(lambda: len(self.batches) >= n)


async def test_calls_made_together_go_in_one_batch_with_their_own_outcomes() -> None:
    rec = Recorder()
    batcher: Batcher[int, int] = Batcher(rec.send, name="t")
    outcomes = await asyncio.gather(*(batcher.submit(i) for i in range(6)), return_exceptions=True)
    assert rec.batches == [[0, 1, 2, 3, 4, 5]]
    assert outcomes[0::2] == [0, 20, 40]
    assert all(isinstance(o, LeaseLost) for o in outcomes[1::2])
    assert (batcher.batches, batcher.items) == (1, 6)


async def test_items_and_bytes_bound_each_batch() -> None:
    rec = Recorder()
    batcher: Batcher[int, int] = Batcher(
        rec.send, name="t", max_items=3, max_bytes=100, size_of=lambda i: 40
    )
    await batcher.submit_many(list(range(0, 14, 2)))
    assert rec.batches == [[0, 2], [4, 6], [8, 10], [12]]


async def test_calls_wait_while_batches_are_in_flight_then_go_together() -> None:
    rec = Recorder()
    rec.gate.clear()
    batcher: Batcher[int, int] = Batcher(rec.send, name="t", max_in_flight=1)
    first = asyncio.ensure_future(batcher.submit(0))
    await rec.wait_batches(1)
    later = [asyncio.ensure_future(batcher.submit(i)) for i in (2, 4, 6)]
    await asyncio.sleep(0)  # let them queue behind the batch in flight
    assert rec.batches == [[0]]
    rec.gate.set()
    assert await first == 0
    assert await asyncio.gather(*later) == [20, 40, 60]
    assert rec.batches == [[0], [2, 4, 6]]


async def test_a_caller_that_gives_up_before_sending_is_left_out() -> None:
    rec = Recorder()
    rec.gate.clear()
    batcher: Batcher[int, int] = Batcher(rec.send, name="t", max_in_flight=1)
    first = asyncio.ensure_future(batcher.submit(0))
    await rec.wait_batches(1)
    quitter = asyncio.ensure_future(batcher.submit(2))
    stayer = asyncio.ensure_future(batcher.submit(4))
    await asyncio.sleep(0)
    quitter.cancel()
    rec.gate.set()
    assert await first == 0
    assert await stayer == 40
    assert rec.batches == [[0], [4]]


async def test_a_failing_send_fails_its_batch_only() -> None:
    calls = 0

    async def send(items: list[int]) -> list[int | BaseException]:
        nonlocal calls
        calls += 1
        if calls == 1:
            raise ShuttingDown("boom")
        return items

    batcher: Batcher[int, int] = Batcher(send, name="t")
    with pytest.raises(ShuttingDown):
        await batcher.submit(1)
    assert await batcher.submit(2) == 2


async def test_close_sends_what_is_queued_and_refuses_new_items() -> None:
    rec = Recorder()
    batcher: Batcher[int, int] = Batcher(rec.send, name="t")
    queued = asyncio.ensure_future(batcher.submit(8))
    await asyncio.sleep(0)  # queued, dispatch scheduled
    await batcher.close()
    assert await queued == 80
    with pytest.raises(ShuttingDown):
        await batcher.submit(2)


def test_bounds_are_checked() -> None:
    async def send(items: list[int]) -> list[int | BaseException]:
        return list(items)

    with pytest.raises(InvalidInput):
        Batcher(send, name="t", max_items=0)
