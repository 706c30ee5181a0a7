"""Growth bound: the document stays under ``max_document_bytes`` whatever the load.

When pushes outpace work, pushes beyond the cap get ``QueueFull`` (backpressure),
nothing already queued is dropped, and pushes succeed again once workers catch up.
At high throughput the dedupe tombstones of finished jobs count against the cap too.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field, replace

from sim import run_virtual
from sim.bench import Bench

from osqueue.api import NewJob
from osqueue.broker import BrokerConfig
from osqueue.broker.inproc.client import LocalClient
from osqueue.errors import OsqueueError, QueueFull

CAP = 64 * 1024
CONFIG = BrokerConfig(lease_s=5.0, heartbeat_timeout_s=30.0, max_document_bytes=CAP)


@dataclass
class Tally:
    acked: list[str] = field(default_factory=list)
    refused: int = 0

    def count(self, results: list[str | OsqueueError]) -> None:
        for result in results:
            if isinstance(result, QueueFull):
                self.refused += 1
            elif isinstance(result, str):
                self.acked.append(result)
            else:
                raise result


async def until(done: Callable[[], Awaitable[bool]], interval_s: float = 5.0) -> None:
    """Poll on virtual time until ``done`` (no real time passes)."""
    while True:
        if await done():
            return
        await asyncio.sleep(interval_s)


async def work(q: LocalClient, *, max_jobs: int, seconds_per_job: float) -> None:
    while True:
        jobs = await q.claim("w", ["default"], max_jobs=max_jobs, wait_s=1)
        if seconds_per_job:
            for job in jobs:
                await asyncio.sleep(seconds_per_job)
                await q.complete(job)
        else:
            await asyncio.gather(*(q.complete(job) for job in jobs))


def test_pushes_outpacing_work_get_queue_full_and_nothing_queued_is_dropped() -> None:
    async def scenario() -> tuple[Tally, Tally, list[str], list[str], list[int]]:
        async with Bench("growth-outpace", config=CONFIG) as bench:
            broker = await bench.start("b1")
            q = broker.client()
            tally, late = Tally(), Tally()

            async def producer(p: int) -> None:
                for i in range(400):
                    batch = [NewJob(b"p" * 200, id=f"p{p}-{i}-{k}") for k in range(4)]
                    tally.count(await q.push_results(batch))
                    await asyncio.sleep(0.05)

            async def drained() -> bool:
                return not (await bench.document()).index.count("default", "queued")

            worker = asyncio.ensure_future(work(q, max_jobs=2, seconds_per_job=0.25))
            await asyncio.gather(*(producer(p) for p in range(3)))
            await until(drained)  # the producers stopped; the worker caught up
            late.count(await q.push_results([NewJob(b"l", id=f"late-{i}") for i in range(10)]))
            await until(drained)
            worker.cancel()
            await bench.settle(2 * CONFIG.lease_s)
            sizes = [len(item.data) for item in bench.store.landed]
            doc = await bench.document()
            return tally, late, await bench.archived_ids(), sorted(doc.jobs), sizes

    tally, late, archived, live, sizes = run_virtual(scenario())
    assert tally.refused > 100  # backpressure really happened
    assert late.refused == 0  # and it lifted once the workers caught up
    assert max(sizes) <= CAP
    assert live == []
    assert archived == sorted(tally.acked + late.acked)  # each acknowledged job, once


def test_high_throughput_keeps_the_document_under_the_cap() -> None:
    """Fast work: few jobs are live at once, but every finished job leaves a dedupe
    tombstone for ``dedupe_window_s``; those bytes count against the cap too."""

    async def scenario() -> tuple[Tally, list[int], list[str]]:
        async with Bench("growth-throughput", config=CONFIG) as bench:
            broker = await bench.start("b1")
            q = broker.client()
            tally = Tally()
            worker = asyncio.ensure_future(work(q, max_jobs=50, seconds_per_job=0))
            for i in range(300):  # 20 jobs a second for five minutes
                # 26-character ids, like the ULIDs clients choose: 29 bytes per tombstone
                batch = [NewJob(b"x", id=f"j{i:012d}-{k:012d}") for k in range(20)]
                tally.count(await q.push_results(batch))
                await asyncio.sleep(1.0)
            await asyncio.sleep(5.0)
            worker.cancel()
            await bench.settle(2 * CONFIG.lease_s)
            sizes = [len(item.data) for item in bench.store.landed]
            return tally, sizes, await bench.archived_ids()

    tally, sizes, archived = run_virtual(scenario())
    assert len(tally.acked) + tally.refused == 6000
    assert tally.refused > 0  # the tombstones filled the cap: pushes were told to wait
    assert max(sizes) <= CAP, f"the document reached {max(sizes)} bytes (cap {CAP})"
    assert archived == sorted(tally.acked)


def test_growth_bound_with_a_config_of_its_own() -> None:
    """The cap is the broker's configuration, not a constant: half of it, half the room."""

    async def scenario() -> int:
        config = replace(CONFIG, max_document_bytes=CAP // 2)
        async with Bench("growth-half", config=config) as bench:
            q = (await bench.start("b1")).client()
            tally = Tally()
            for i in range(100):
                tally.count(await q.push_results([NewJob(b"p" * 200, id=f"j{i}")]))
            return len(tally.acked)

    accepted_at_half = run_virtual(scenario())
    assert 0 < accepted_at_half < 100
