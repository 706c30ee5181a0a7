"""What bounds the dead letters a document holds, and what a commit pays for them
(memory storage): the commit loop's hold while a dead spill is written (deaths
do not pile up in the document faster than they leave), the one check a commit
costs while no queue is near its dead spill, and the head a claim demand may
add, bounded in bytes."""

from __future__ import annotations

import asyncio
import dataclasses
from datetime import UTC, datetime

import pytest
from backends import Wrapped
from segment_helpers import config

import osqueue.broker.cold.dead as dead_module
from osqueue.broker import Broker
from osqueue.broker.cold.demand import ClaimDemand
from osqueue.state import Document, Policy, SegmentRef
from osqueue.state.cold_dead import DEAD_PREFIX, dead_spill_room
from osqueue.storage import MemoryStorage
from osqueue.storage.port import Storage

#: a queue keeps 2 dead jobs; 2 more dead ones spill
_DEAD = {"dead_keep_jobs": 2, "dead_spill_jobs": 2, "spill_above_jobs": None}


class Gated(Wrapped):
    """Dead segments land, then wait for :attr:`gate` before their writer hears back."""

    def __init__(self, inner: Storage) -> None:
        super().__init__(inner)
        self.gate = asyncio.Event()
        self.gate.set()
        self.arrived = asyncio.Event()

    async def put(self, key: str, data: bytes) -> None:
        await self.inner.put(key, data)
        if key.startswith(DEAD_PREFIX):
            self.arrived.set()
            await self.gate.wait()


async def kill(broker: Broker, n: int, queue: str = "default", at: int = 0) -> None:
    """Push ``n`` jobs of ``queue`` that die at their first failure; fail each."""
    q = broker.client()
    for i in range(at, at + n):
        await q.push(b"p", queue=queue, max_attempts=1, id=f"{queue}-{i:03d}")
        (job,) = await q.claim("w", queues=[queue], max_jobs=1)
        await q.fail(job, error="boom")


def dead_in_document(doc: Document, queue: str = "default") -> int:
    return doc.index.counts.get((queue, "dead"), 0)


async def _held(broker: Broker) -> None:
    """Until a commit waits for the dead spill in flight (turns of the loop, no timer)."""
    for _ in range(10_000):
        if broker.segments.counters.held_commits:
            return
        await asyncio.sleep(0)
    pytest.fail("no commit waited for the dead spill being written")


async def test_past_spill_hold_bytes_a_commit_waits_for_the_dead_spill_being_written() -> None:
    store = Gated(MemoryStorage())
    async with Broker(store, config(**_DEAD, spill_hold_bytes=1)) as broker:
        store.gate.clear()
        await kill(broker, 4)  # the 4th death plans a spill of the 2 oldest
        await store.arrived.wait()
        version = broker.document.version
        q = broker.client()
        late = asyncio.ensure_future(q.push(b"late", id="late"))
        await _held(broker)
        assert not late.done()
        assert broker.document.version == version  # nothing was written meanwhile
        store.gate.set()
        await late
        # one commit took the push and the SpillDead: the spilled deaths left with it
        assert broker.document.version == version + 1
        assert dead_in_document(broker.document) == 2
        assert broker.document.dead.count("default") == 2
        assert "late" in broker.document.jobs


async def test_with_spill_hold_bytes_none_deaths_never_wait_for_a_dead_spill() -> None:
    store = Gated(MemoryStorage())
    async with Broker(store, config(**_DEAD, spill_hold_bytes=None)) as broker:
        store.gate.clear()
        await kill(broker, 4)
        await store.arrived.wait()
        await kill(broker, 3, at=4)  # committed while the spill is being written
        assert broker.segments.dead.writing
        assert broker.segments.counters.held_commits == 0
        assert dead_in_document(broker.document) == 7
        store.gate.set()
        await broker.segments.settled()
        assert dead_in_document(broker.document) <= 3


async def test_the_dead_spill_room_is_the_deaths_until_the_nearest_queue_s_mark() -> None:
    async with Broker(MemoryStorage(), config(**{**_DEAD, "dead_spill_jobs": 5})) as broker:
        doc = broker.document
        policy = broker.config.policy()
        assert dead_spill_room(doc, policy) == 7  # keep 2 + spill 5: none dead yet
        await kill(broker, 3, queue="a")
        await kill(broker, 1, queue="b")
        doc = broker.document
        assert dead_spill_room(doc, policy) == 4  # "a" is 4 deaths from 7
        assert dead_spill_room(doc, policy, exclude={"a"}) == 6
        assert dead_spill_room(doc, dataclasses.replace(policy, dead_keep_jobs=None)) is None


async def test_a_commit_scans_the_dead_counts_once_per_room_and_misses_no_spill(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    scans: list[int] = []
    original = dead_module.plan_dead_spills

    def counting(doc: Document, policy: Policy, exclude: frozenset[str] | set[str] = frozenset()):  # type: ignore[no-untyped-def]
        scans.append(doc.version)
        return original(doc, policy, exclude)

    monkeypatch.setattr(dead_module, "plan_dead_spills", counting)
    async with Broker(MemoryStorage(), config(**{**_DEAD, "dead_spill_jobs": 10})) as broker:
        q = broker.client()
        for i in range(20):  # commits with nothing dead: one counter check each
            await q.push(b"x", queue="busy", id=f"x{i}")
        assert len(scans) <= 1
        scans.clear()
        # 11 deaths over three queues: no queue reaches keep 2 + spill 10 = 12
        await kill(broker, 5, queue="a")
        await kill(broker, 3, queue="b")
        await kill(broker, 3, queue="c")
        assert broker.segments.dead.counters.spilled_jobs == 0
        assert len(scans) <= 3  # (not one per commit: 33 commits went by)
        # "a" reaches its mark: the spill is planned at that very commit
        await kill(broker, 7, queue="a", at=5)
        await broker.segments.settled()
        assert broker.segments.dead.counters.spilled_jobs == 10
        assert broker.document.dead.count("a") == 10
        assert dead_in_document(broker.document, "a") == 2


def _ref(count: int, size_bytes: int) -> SegmentRef:
    at = datetime(2026, 11, 26, tzinfo=UTC)
    return SegmentRef(
        key="segments/q/p0/00000000000000000001=x.jsonl",
        queue="q",
        priority=0,
        first_seq=1,
        last_seq=count,
        count=count,
        size_bytes=size_bytes,
        sha256="0" * 64,
        next_seq=1,
        next_created_at=at,
        min_id="a",
        max_id="b",
    )


def test_a_claim_demand_grows_the_head_and_the_loads_to_a_byte_bound_at_most() -> None:
    configured = Policy(head_jobs=500, load_jobs=500, spill_above_jobs=1_000)
    demand = ClaimDemand(configured, 2 * 1024 * 1024)
    jobs_300_bytes = _ref(20_000, 20_000 * 300)
    jobs_30_bytes = _ref(20_000, 20_000 * 30)
    assert demand.sizes(jobs_300_bytes) == (500, 500)  # no demand yet
    assert demand.after_commit(10_000)
    assert demand.policy.head_jobs == 32_768  # twice the claims, a power of two
    cap = 2 * 1024 * 1024 // 300
    assert demand.sizes(jobs_300_bytes) == (cap, cap)  # 2 MiB of 300-byte jobs
    assert demand.sizes(jobs_30_bytes) == (32_768, 32_768)  # the demand fits in 2 MiB
    huge = _ref(10, 10 * 10 * 1024 * 1024)  # 10 MiB a job: never below the configured
    assert demand.sizes(huge) == (500, 500)
    unbounded = ClaimDemand(configured, None)
    unbounded.after_commit(10_000)
    assert unbounded.sizes(jobs_300_bytes) == (32_768, 32_768)
