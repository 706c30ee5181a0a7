"""The deep-queue sizes follow the claims per commit (broker/cold/demand.py)."""

from __future__ import annotations

import asyncio

import osqueue
from osqueue.broker.cold.demand import ClaimDemand
from osqueue.state import Policy

CONFIGURED = Policy(head_jobs=500, load_jobs=500, spill_above_jobs=1_000)


def sizes(d: ClaimDemand) -> tuple[int, int, int | None]:
    p = d.policy
    return p.head_jobs, p.load_jobs, p.spill_above_jobs


def test_claims_the_head_covers_keep_the_configured_sizes() -> None:
    d = ClaimDemand(CONFIGURED)
    assert not any(d.after_commit(n) for n in (0, 1, 100, 250 // 2, 3))
    assert d.policy is CONFIGURED
    assert d.after_commit(200)  # 200 rounds up to 256: twice that passes 500
    assert sizes(d) == (512, 512, 1_000)


def test_a_commit_that_claims_more_raises_the_sizes_to_twice_its_claims() -> None:
    d = ClaimDemand(CONFIGURED)
    assert d.after_commit(1_000)
    assert sizes(d) == (2_048, 2_048, 2_048)  # 1,000 rounded up to 1,024, doubled
    assert not d.after_commit(900)  # within the same power of two: nothing changes
    assert d.after_commit(5_000)
    assert sizes(d) == (16_384, 16_384, 16_384)
    # the other settings are the configured ones
    assert d.policy.segment_jobs == CONFIGURED.segment_jobs


def test_the_demand_decays_back_to_the_configured_sizes() -> None:
    d = ClaimDemand(CONFIGURED)
    d.after_commit(5_000)
    commits = 0
    while d.policy.head_jobs != CONFIGURED.head_jobs:
        d.after_commit(10)
        commits += 1
        assert commits < 100
    assert sizes(d) == (500, 500, 1_000)
    assert commits > 10  # a lull of a few commits does not shrink the head at once


def test_spilling_off_stays_off() -> None:
    d = ClaimDemand(Policy(head_jobs=10, load_jobs=10, spill_above_jobs=None))
    d.after_commit(100)
    assert sizes(d) == (256, 256, None)


async def test_a_deep_queue_nobody_claims_keeps_the_configured_head_beside_a_demand() -> None:
    """The demand is the broker's: a queue claimed in large batches must not make
    another deep queue, which nobody claims, load its segments into the document."""
    from segment_helpers import config

    from osqueue.broker import Broker
    from osqueue.storage import MemoryStorage

    async with Broker(MemoryStorage(), config()) as broker:
        q = broker.client()
        for i in range(30):
            await q.push(b"deep", queue="deep", id=f"deep{i:02d}")
        await broker.segments.settled()
        deep_in_doc = sum(1 for j in broker.document.jobs.values() if j.queue == "deep")
        assert sum(r.remaining for r in broker.document.segments if r.queue == "deep") > 20
        loaded = broker.segments.counters.loaded_jobs
        for _ in range(5):  # claims of 40 at a time raise the demand well past the head
            await q.push_many([osqueue.NewJob(b"b", queue="busy") for _ in range(40)])
            jobs = await q.claim("w", queues=["busy"], max_jobs=40)
            await asyncio.gather(*(q.complete(job) for job in jobs))
        await broker.segments.settled()
        assert broker.segments.counters.loaded_jobs == loaded  # nothing of "deep" came back
        assert sum(1 for j in broker.document.jobs.values() if j.queue == "deep") == deep_in_doc


async def test_a_queue_nobody_claims_spills_down_to_the_configured_head_beside_a_demand() -> None:
    """A spill planned while other queues' claims raised the demand leaves the
    configured head of a queue with no job claimed in the document, not the
    demand's (which would stay there, as nobody claims it)."""
    from segment_helpers import config

    from osqueue.broker import Broker
    from osqueue.storage import MemoryStorage

    async with Broker(MemoryStorage(), config()) as broker:
        q = broker.client()
        await q.push_many([osqueue.NewJob(b"b", queue="busy") for _ in range(40)])
        held = await q.claim("w", queues=["busy"], max_jobs=40)  # held: the demand stays
        assert broker.segments._policy.head_jobs >= 64
        await q.push_many([osqueue.NewJob(b"deep", queue="deep") for _ in range(300)])
        await broker.segments.settled()
        deep = [j for j in broker.document.jobs.values() if j.queue == "deep"]
        assert len(deep) <= 2 + 3  # head_jobs + spill_above_jobs of the configuration
        assert sum(r.remaining for r in broker.document.segments if r.queue == "deep") >= 295
        await asyncio.gather(*(q.complete(job) for job in held))
