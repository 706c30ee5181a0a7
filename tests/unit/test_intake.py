"""A batch submitted at once shares one future (broker/core/intake.py): its answers
come back in order, one error stays with its op, and a caller that gives up
does not stop the commit or the other callers."""

from __future__ import annotations

import asyncio

import osqueue
from osqueue import NewJob
from osqueue.errors import DuplicateKey
from osqueue.state import Push, Pushed
from osqueue.storage import MemoryStorage


async def test_a_batch_is_answered_in_order_with_each_ops_own_error() -> None:
    async with osqueue.Broker(MemoryStorage(), osqueue.BrokerConfig()) as broker:
        ops = [
            Push(id="a", payload=b"1", key="k"),
            Push(id="b", payload=b"2", key="k"),  # the key is held by a: refused alone
            Push(id="c", payload=b"3"),
        ]
        first, second, third = await broker.submit_many(ops)
        assert first == Pushed("a", True)
        assert isinstance(second, DuplicateKey)
        assert third == Pushed("c", True)
        assert await broker.submit_many([]) == []


async def test_a_caller_that_gives_up_leaves_its_ops_committed_and_others_answered() -> None:
    async with osqueue.Broker(MemoryStorage(), osqueue.BrokerConfig()) as broker:
        client = broker.client()
        gave_up = asyncio.ensure_future(
            client.push_many([NewJob(b"x", id=f"g{i}") for i in range(50)])
        )
        kept = asyncio.ensure_future(
            client.push_many([NewJob(b"y", id=f"k{i}") for i in range(50)])
        )
        await asyncio.sleep(0)  # both batches are queued for the next commit
        gave_up.cancel()
        assert await kept == [f"k{i}" for i in range(50)]
        assert gave_up.cancelled()
        # queued before the caller left: committed all the same, in the same commit
        stats = await client.stats()
        assert stats.queues["default"].depth == 100
