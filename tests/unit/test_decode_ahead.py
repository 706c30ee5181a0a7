"""A deep queue's next load chunk is decoded while the commit loop waits for a
document write (``osqueue.broker.cold.cache.DecodeAhead``), and a load takes it
only when it is exactly the chunk the load needs."""

from __future__ import annotations

import asyncio

from backends import Wrapped
from segment_helpers import config

import osqueue
from osqueue.broker import Broker, BrokerConfig
from osqueue.broker.cold.cache import DecodeAhead, SegmentCache
from osqueue.broker.core.retry import StorageRetry
from osqueue.clock import ManualClock
from osqueue.state import DOCUMENT_KEY, StoredJob, transition
from osqueue.state.document import Document
from osqueue.state.ops import Policy, Push
from osqueue.state.planning import plan_spills
from osqueue.state.segment_codec import SegmentLines
from osqueue.storage import MemoryStorage
from osqueue.storage.port import Storage


class YieldingDocumentWrites(Wrapped):
    """Document writes that give the loop a few turns before they land, as a write
    to a remote store or through a thread does; each notes whether a chunk was
    waiting to be decoded when it started, and whether it was decoded (and none
    left waiting) by the time it landed."""

    def __init__(self, inner: Storage) -> None:
        super().__init__(inner)
        self.ahead: DecodeAhead | None = None
        self.writes: list[tuple[bool, bool]] = []

    async def write(self, key: str, data: bytes, *, if_match: str | None) -> str:
        ahead = self.ahead
        if key == DOCUMENT_KEY and ahead is not None:
            noted = bool(ahead.pending)
            for _ in range(3):
                await asyncio.sleep(0)
            self.writes.append((noted, bool(ahead._decoded) and not ahead.pending))
        return await self.inner.write(key, data, if_match=if_match)


async def test_a_deep_queue_s_next_chunk_is_decoded_during_a_write_and_taken_by_its_load() -> None:
    store = YieldingDocumentWrites(MemoryStorage())
    async with Broker(store, config(segment_jobs=12)) as broker:
        q = broker.client()
        ids = await q.push_many([osqueue.NewJob(b"p", queue="deep") for _ in range(60)])
        await broker.segments.settled()
        ahead = broker.segments.cache.ahead
        store.ahead = ahead
        seen: list[str] = []
        while len(seen) < len(ids):
            jobs = await q.claim("w", ("deep",), max_jobs=1, wait_s=5.0)
            seen += [job.id for job in jobs]
            for job in jobs:
                await q.complete(job)
            await broker.segments.settled()
        assert seen == ids  # in order, each once
        noted = [decoded for was_noted, decoded in store.writes if was_noted]
        assert len(noted) >= 5
        assert all(noted)  # every chunk noted before a write was decoded while it flew
        assert ahead.used >= len(noted) - 1  # and taken by the next load (the last may not be)
        assert not ahead.pending


def _object(n: int) -> tuple[SegmentCache, SegmentLines]:
    """A cache holding one segment object of ``n`` ready jobs, and the object."""
    policy = Policy(segment_jobs=n, head_jobs=0, load_jobs=2, spill_above_jobs=1)
    pushes = [Push(id=f"j{i:03d}", payload=b"x", queue="q") for i in range(n)]
    doc = transition(Document.empty(), pushes, 1_800_000_000.0, policy, in_place=True).doc
    (plan,) = plan_spills(doc, policy)
    op, data = plan.build("u1")
    cache = SegmentCache(MemoryStorage(), 1 << 20, StorageRetry(BrokerConfig(), ManualClock()))
    obj = SegmentLines.checked(op.ref, data)
    cache._keep(obj)
    return cache, obj


def _ids(jobs: list[StoredJob]) -> list[str]:
    return [job.id for job in jobs]


def test_a_load_takes_a_chunk_decoded_ahead_only_for_the_same_start_and_end() -> None:
    cache, obj = _object(8)
    ahead = cache.ahead
    ahead.note(obj.key, 2, 4)
    ahead.run()
    assert not ahead.pending
    # a load of another size (the claim demand changed it) decodes its own chunk:
    # the one decoded would give it the wrong job after its chunk
    assert _ids(ahead.jobs(obj, 2, 5)) == ["j002", "j003", "j004", "j005"]
    assert ahead.used == 0
    ahead.jobs(obj, 2, 4)  # (the one decoded was dropped either way)
    assert ahead.used == 0
    ahead.note(obj.key, 4, 6)
    ahead.run()
    assert _ids(ahead.jobs(obj, 4, 6)) == ["j004", "j005", "j006"]  # and the one after
    assert ahead.used == 1


def test_an_object_no_longer_kept_is_not_decoded_and_an_evicted_one_is_forgotten() -> None:
    cache, obj = _object(8)
    ahead = cache.ahead
    ahead.note(obj.key, 0, 2)
    ahead.run()
    cache.evict(obj.key)  # (a failed load, a set-aside, a delete)
    assert _ids(ahead.jobs(obj, 0, 2)) == ["j000", "j001", "j002"]  # decoded now
    ahead.note(obj.key, 2, 4)
    ahead.run()  # the object is gone: nothing decoded
    assert _ids(ahead.jobs(obj, 2, 4)) == ["j002", "j003", "j004"]
    assert ahead.used == 0
