"""Compaction through a real broker on every backend (memory, file, moto S3,
Azurite): a slowly built backlog's small segments are merged, the merged
objects hold exactly what the references say, claim order, cancels, keys and
retried pushes work across them, a compaction whose parts changed fails alone,
and a broker dying mid-compaction loses nothing (its object is an orphan)."""

from __future__ import annotations

import asyncio

import pytest
from backends import Wrapped
from segment_helpers import config
from test_segments_broker import drain, push_spilled, segment_keys, stored, url

from osqueue.broker import Broker, BrokerConfig
from osqueue.clock import ManualClock
from osqueue.errors import DuplicateKey
from osqueue.state import SEGMENT_PREFIX, decode_segment
from osqueue.state.segment_codec import decode_checked
from osqueue.storage import MemoryStorage, from_url
from osqueue.storage.port import Storage

__all__ = ["url"]  # the backends fixture


def compacting() -> BrokerConfig:
    """The small segment settings, merging segments of up to 4 jobs into up to 40."""
    return config(compact_jobs=40)


async def test_a_slowly_built_backlog_is_compacted_and_drains_in_order(url: str) -> None:
    storage = from_url(url)
    async with Broker(url, compacting()) as broker:
        ids = await push_spilled(broker, 60)
        counters = broker.segments.counters
        refs = list(broker.document.segments)
        assert counters.compactions >= 1
        assert len(refs) < counters.spills  # merged: fewer references than spills
        assert max(ref.count for ref in refs) > 4  # segment_jobs: a merged one is larger
        assert await segment_keys(storage) == {ref.key for ref in refs}  # parts deleted
        assert (await stored(storage)).segments == broker.document.segments
        for ref in refs:  # each object holds exactly what its reference says
            header, jobs = decode_segment(await storage.get(ref.key), ref.key)
            assert (header.first_seq, header.last_seq, header.count) == (
                ref.first_seq,
                ref.last_seq,
                ref.count,
            )
            assert [job.seq for job in jobs] == sorted(job.seq for job in jobs)
        assert (await broker.client().stats()).queues["default"].depth == 60
        assert await drain(broker) == ids
        await broker.segments.settled()
        assert await segment_keys(storage) == set()
    await storage.close()


async def test_cancels_keys_and_retried_pushes_work_across_merged_segments(url: str) -> None:
    async with Broker(url, compacting()) as broker:
        q = broker.client()
        ids = await push_spilled(broker, 10)
        assert await q.push(b"keyed", id="job-k", key="k-1") == "job-k"
        ids += ["job-k", *await push_spilled(broker, 30)]
        assert broker.segments.counters.compactions >= 1
        merged = max(broker.document.segments, key=lambda ref: ref.count)
        assert merged.count > 4
        assert "job-k" not in broker.document.jobs
        assert broker.document.segments.keys == {"k-1": "job-k"}
        assert await q.push(b"again", id="job-k", key="k-1") == "job-k"  # a retry: once
        with pytest.raises(DuplicateKey):
            await q.push(b"other", key="k-1")
        victim = decode_segment(await from_url(url).get(merged.key), merged.key)[1][-1].id
        await q.cancel(victim)
        got = await drain(broker)
        assert got == [i for i in ids if i != victim]


class GatedMerge(Wrapped):
    """A storage whose writes of merged segments (more jobs than ``segment_jobs``)
    land, then wait for :attr:`gate` before their caller hears back."""

    def __init__(self, inner: Storage) -> None:
        super().__init__(inner)
        self.gate = asyncio.Event()
        self.arrived = asyncio.Event()
        self.merged: list[str] = []

    async def put(self, key: str, data: bytes) -> None:
        await self.inner.put(key, data)
        if key.startswith(SEGMENT_PREFIX) and data.count(b"\n") > 5:
            self.merged.append(key)
            self.arrived.set()
            await self.gate.wait()


async def test_a_compaction_whose_part_changed_fails_alone_and_its_object_is_deleted() -> None:
    store = GatedMerge(MemoryStorage())
    async with Broker(store, compacting()) as broker:
        q = broker.client()
        ids = [await q.push(b"p%d" % i) for i in range(40)]
        await store.arrived.wait()
        (written,) = store.merged
        assert written in broker.segments.writing  # never an orphan while in flight
        assert broker.segments.compactor.busy
        part = list(broker.document.segments)[2]  # the plan's first part
        victim = decode_segment(await store.get(part.key), part.key)[1][1].id
        await q.cancel(victim)  # a part changes before the compaction commits
        store.gate.set()
        await broker.segments.settled()
        assert broker.segments.counters.failed_compactions >= 1
        assert written not in await store.list(SEGMENT_PREFIX)
        assert written not in broker.segments.writing
        assert await drain(broker) == [i for i in ids if i != victim]


async def test_a_broker_dying_mid_compaction_loses_nothing_and_leaves_an_orphan() -> None:
    inner = MemoryStorage()
    store = GatedMerge(inner)
    first = Broker(store, compacting())
    await first.start()
    q = first.client()
    ids = [await q.push(b"p%d" % i) for i in range(40)]
    await store.arrived.wait()  # the merged object is written, its commit not made
    (orphan,) = store.merged
    for task in first.tasks():  # it dies where it stands
        task.cancel()
    await asyncio.gather(*first.tasks(), return_exceptions=True)
    # (a manual clock: the first broker's lease has run out by its time)
    async with Broker(inner, config(), clock=ManualClock()) as second:
        assert orphan not in {ref.key for ref in second.document.segments}
        segments = second.segments
        suspects = await segments.sweep(await segments.sweep(set()))
        assert orphan in suspects
        await second.client().push(b"a commit")
        await segments.settled()
        assert orphan not in await inner.list(SEGMENT_PREFIX)
        assert (await drain(second))[: len(ids)] == ids


class ReadsSegments(Wrapped):
    """A storage that records the segment objects read from it."""

    def __init__(self, inner: Storage) -> None:
        super().__init__(inner)
        self.read_keys: list[str] = []

    async def get(self, key: str) -> bytes:
        if key.startswith(SEGMENT_PREFIX):
            self.read_keys.append(key)
        return await self.inner.get(key)


async def test_parts_this_brokers_spills_wrote_are_merged_without_reading_them_back() -> None:
    store = ReadsSegments(MemoryStorage())
    async with Broker(store, compacting()) as broker:
        ids = await push_spilled(broker, 60)
        assert broker.segments.counters.compactions >= 1
        merged = [ref for ref in broker.document.segments if ref.count > 4]  # segment_jobs
        assert merged
        read = {_first_seq(key) for key in store.read_keys}  # (the loads' read-ahead)
        for ref in merged:  # no part of it was read: merged from the lines the spills wrote
            assert not any(ref.first_seq <= seq <= ref.last_seq for seq in read), ref
        assert (await stored(store)).segments == broker.document.segments
        for ref in broker.document.segments:  # what is stored is what the references say
            decode_checked(ref, await store.inner.get(ref.key))
        assert await drain(broker) == ids
        assert store.read_keys  # loads read (and check) what is stored, as before


def _first_seq(key: str) -> int:
    """The first seq a segment key names (``.../<first_seq:020d>=<unique>.jsonl``)."""
    return int(key.rsplit("/", 1)[1].split("=")[0])
