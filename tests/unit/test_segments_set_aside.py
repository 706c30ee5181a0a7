"""Segment objects are checked (size and SHA-256) on every read; a missing or
broken one is set aside, its queue flows on, and a readmit brings it back.

Runs on the memory and file stores (the real-storage segment suites run the
same broker paths on S3 and Azure).
"""

from __future__ import annotations

import re
from collections.abc import Iterator
from pathlib import Path

import pytest
from metrics_helpers import scrape, value
from segment_helpers import config

from osqueue.broker import Broker
from osqueue.broker.cold.read import find_spilled, jobs_after, read_spilled
from osqueue.errors import CorruptDocument, InvalidInput, JobNotFound
from osqueue.inspect.status import status_of
from osqueue.state import (
    SegmentRef,
    decode,
    decode_segment,
    encode,
)
from osqueue.storage import MemoryStorage
from osqueue.storage.port import Storage
from osqueue.storage.url import from_url


@pytest.fixture(params=["memory", "file"])
def store(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[Storage]:
    if request.param == "memory":
        yield MemoryStorage()
    else:
        yield from_url(f"file://{tmp_path}")


ALL = [f"j{i:03d}" for i in range(8)]


async def eight_jobs(broker: Broker) -> SegmentRef:
    """j000..j007 pushed: a head in the document, then segments; returns the
    first segment's reference."""
    q = broker.client()
    for i in range(8):
        await q.push(b"p%d" % i, id=f"j{i:03d}")
    await broker.segments.settled()
    first = next(iter(broker.document.segments))
    assert first.count >= 2
    return first


async def ids_in(store: Storage, ref: SegmentRef) -> list[str]:
    _, jobs = decode_segment(await store.get(ref.key), ref.key)
    return [job.id for job in jobs]


async def others(store: Storage, ref: SegmentRef) -> list[str]:
    """Every job but those of ``ref``'s object, in claim order."""
    inside = await ids_in(store, ref)
    return [i for i in ALL if i not in inside]


async def drain(broker: Broker) -> list[tuple[str, bytes]]:
    """Claim and complete until nothing more comes (loads included)."""
    q = broker.client()
    got: list[tuple[str, bytes]] = []
    for _ in range(40):
        await broker.segments.settled()
        jobs = await q.claim("w", max_jobs=10)
        if not jobs:
            await broker.segments.settled()
            jobs = await q.claim("w", max_jobs=10)
            if not jobs:
                return got
        for job in jobs:
            got.append((job.id, job.payload))
            await q.complete(job)
    raise AssertionError("the queue never ran dry")


def same_size_tamper(data: bytes) -> bytes:
    """The object with the first job's payload replaced by other bytes of the
    same encoded length (``b'HAC'`` is ``SEFD`` in base64, as ``pN`` is ``cD?=``)."""
    tampered = re.sub(rb'"payload":"cD.="', b'"payload":"SEFD"', data, count=1)
    assert tampered != data
    assert len(tampered) == len(data)
    return tampered


async def test_a_segment_rewritten_with_the_same_size_is_never_delivered(store: Storage) -> None:
    async with Broker(store, config()) as broker:
        ref = await eight_jobs(broker)
        expected = await others(store, ref)
        broker.segments.cache.evict(ref.key)  # (it was read ahead)
        await store.put(ref.key, same_size_tamper(await store.get(ref.key)))
        got = await drain(broker)
        assert b"HAC" not in b"".join(payload for _, payload in got)
        assert [job_id for job_id, _ in got] == expected
        entry = broker.document.segments.aside[ref.key]
        assert "sha256" in entry.reason
        assert entry.ref == ref
        assert broker.segments.counters.set_aside == 1


@pytest.mark.parametrize("damage", ["truncated", "deleted"])
async def test_a_broken_or_missing_segment_is_set_aside_and_the_queue_flows_on(
    store: Storage, damage: str
) -> None:
    async with Broker(store, config()) as broker:
        ref = await eight_jobs(broker)
        expected = await others(store, ref)
        broker.segments.cache.evict(ref.key)
        if damage == "deleted":
            await store.delete(ref.key)
        else:
            await store.put(ref.key, (await store.get(ref.key))[:-40])
        got = await drain(broker)
        assert [job_id for job_id, _ in got] == expected
        doc = broker.document
        assert doc.segments.find(ref.key) is None
        assert ref.key in doc.segments.aside
        stats = await broker.client().stats()
        queue = stats.queues["default"]
        assert (queue.depth, queue.spilled, queue.set_aside, queue.set_aside_segments) == (
            0,
            0,
            ref.count,
            1,
        )
        assert broker.segments.counters.failed_loads == 0  # not tried again and again
        reads = broker.segments.cache.reads
        await broker.client().push(b"more", id="later")
        assert [job_id for job_id, _ in await drain(broker)] == ["later"]
        assert broker.segments.cache.reads == reads
        # The set-aside object stays referenced: stored state keeps it, and so
        # does a decode of the stored document.
        stored = decode((await store.read("queue.json"))[0])
        assert stored.segments.aside[ref.key].ref == ref
        assert stored.segments.holds(ref.key)


async def test_status_and_metrics_show_the_set_aside_segment(store: Storage) -> None:
    cfg = config(metrics_listen="127.0.0.1:0")
    async with Broker(store, cfg) as broker:
        ref = await eight_jobs(broker)
        broker.segments.cache.evict(ref.key)
        await store.delete(ref.key)
        await drain(broker)
        snapshot = status_of("memory://x", broker.document, 0.0)
        n = ref.count
        assert snapshot["set_aside"] == n
        (listed,) = snapshot["set_aside_segments"]
        assert (listed["key"], listed["jobs"], listed["queue"]) == (ref.key, n, "default")
        assert "missing" in listed["reason"]
        assert snapshot["queues"]["default"]["set_aside"] == n
        samples = await scrape(broker.metrics_address)
        assert value(samples, "osqueue_queue_set_aside", queue="default") == n
        assert value(samples, "osqueue_segments_set_aside", queue="default") == 1


async def test_readmit_after_restoring_delivers_its_jobs_exactly_once(store: Storage) -> None:
    async with Broker(store, config()) as broker:
        ref = await eight_jobs(broker)
        inside = await ids_in(store, ref)
        original = await store.get(ref.key)
        broker.segments.cache.evict(ref.key)
        await store.put(ref.key, same_size_tamper(original))
        first = await drain(broker)
        q = broker.client()
        with pytest.raises(InvalidInput, match="still fails its check") as refused:
            await q.readmit_segment(ref.key)
        assert refused.value.field == "key"
        assert ref.key in broker.document.segments.aside  # nothing changed
        await store.delete(ref.key)
        with pytest.raises(InvalidInput, match="still missing"):
            await q.readmit_segment(ref.key)
        await store.put(ref.key, original)
        assert await q.readmit_segment(ref.key) == len(inside)
        assert not broker.document.segments.aside
        second = await drain(broker)
        ids = [job_id for job_id, _ in first + second]
        assert sorted(ids) == ALL  # each exactly once
        assert [job_id for job_id, _ in second] == inside
        assert all(payload == b"p%d" % int(job_id[1:]) for job_id, payload in second)
        with pytest.raises(InvalidInput, match="not set aside"):
            await q.readmit_segment(ref.key)


async def test_a_readmit_goes_back_in_seq_order_before_later_segments(store: Storage) -> None:
    async with Broker(store, config()) as broker:
        q = broker.client()
        for i in range(14):
            await q.push(b"p%d" % i, id=f"j{i:03d}")
        await broker.segments.settled()
        first, second, *_ = broker.document.segments
        original = await store.get(first.key)
        broker.segments.cache.evict(first.key)
        await store.delete(first.key)
        head = await q.claim("w", max_jobs=2)
        await broker.segments.settled()
        assert first.key in broker.document.segments.aside
        await store.put(first.key, original)
        await q.readmit_segment(first.key)
        assert next(iter(broker.document.segments)).key == first.key
        rest = await drain(broker)
        ids = [j.id for j in head] + [job_id for job_id, _ in rest]
        assert sorted(ids) == [f"j{i:03d}" for i in range(14)]
        assert len(ids) == 14
        assert second.first_seq > first.last_seq


async def test_the_codec_requires_a_sha256_on_every_reference() -> None:
    async with Broker(MemoryStorage(), config()) as broker:
        await eight_jobs(broker)
        raw = encode(broker.document)
    assert b'"sha256":"' in raw
    without = re.sub(rb',"sha256":"[0-9a-f]{64}"', b"", raw)
    with pytest.raises(CorruptDocument, match="sha256"):
        decode(without)
    bad = re.sub(rb'"sha256":"[0-9a-f]{64}"', b'"sha256":"' + b"g" * 64 + b'"', raw)
    with pytest.raises(CorruptDocument, match="sha256") as caught:
        decode(bad)
    assert str(caught.value.path).endswith(".sha256")


async def test_the_readers_outside_the_broker_refuse_a_tampered_segment(store: Storage) -> None:
    async with Broker(store, config()) as broker:
        ref = await eight_jobs(broker)
        doc = broker.document
    inside = await ids_in(store, ref)
    await store.put(ref.key, same_size_tamper(await store.get(ref.key)))
    with pytest.raises(CorruptDocument, match="does not match its reference") as caught:
        await read_spilled(store, ref)  # Spark's partitions and `osqueue jobs` read this way
    assert ref.key in str(caught.value)
    with pytest.raises(CorruptDocument, match=re.escape(ref.key)):
        await jobs_after(store, doc, after=None, limit=100)
    with pytest.raises(CorruptDocument, match="sha256"):
        await find_spilled(store, doc, inside[-1])  # the dashboard's job page


async def test_a_cancel_that_reads_a_tampered_segment_sets_it_aside(store: Storage) -> None:
    async with Broker(store, config()) as broker:
        ref = await eight_jobs(broker)
        inside = await ids_in(store, ref)
        broker.segments.cache.evict(ref.key)
        await store.put(ref.key, same_size_tamper(await store.get(ref.key)))
        with pytest.raises(JobNotFound):
            await broker.client().cancel(inside[-1])
        await broker.segments.settled()
        assert ref.key in broker.document.segments.aside
        assert broker.document.segments.aside[ref.key].ref.remaining == len(inside)


async def test_a_queue_whose_only_jobs_are_set_aside_is_not_removed(store: Storage) -> None:
    async with Broker(store, config()) as broker:
        ref = await eight_jobs(broker)
        broker.segments.cache.evict(ref.key)
        await store.delete(ref.key)
        await drain(broker)  # every other job done: the set-aside ones are left
        q = broker.client()
        with pytest.raises(InvalidInput, match=f"still holds {ref.count} live job") as refused:
            await q.set_queue("default", remove=True)
        assert refused.value.field == "queue"
        assert "default" in broker.document.queue_totals
        assert ref.key in broker.document.segments.aside
