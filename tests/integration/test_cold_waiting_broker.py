"""Waiting children in objects through a real broker on every backend (memory, file,
moto S3, Azurite): a fan-in and a fan-out move out of the document and come back
when their parents end, a cold child is cancelled by id, a takeover reads no
object, and the orphan sweep keeps what is referenced.

Thresholds are tiny (an object holds a few children).  Tests wait for the
broker's cold work with ``broker.segments.settled()`` (no sleeps).
"""

from __future__ import annotations

import asyncio
from collections.abc import Iterator
from pathlib import Path

import pytest
from backends import BACKENDS, Counting, Wrapped, backend_url
from segment_helpers import config

from osqueue.api import NewJob, Stats
from osqueue.broker import Broker, BrokerConfig
from osqueue.errors import InvalidInput, JobNotFound
from osqueue.state import DOCUMENT_KEY, Document, decode
from osqueue.state.waiting_refs import WAITING_PREFIX
from osqueue.storage import from_url
from osqueue.storage.port import Storage

SMALL_WAITING = {
    "waiting_spill_above_jobs": 5,
    "waiting_object_jobs": 4,
    "waiting_load_below_queued": 6,
}


def cold_config(**kw: object) -> BrokerConfig:
    return config(**{**SMALL_WAITING, **kw})


@pytest.fixture(params=BACKENDS)
def url(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[str]:
    with backend_url(request, request.param, tmp_path, "waiting") as found:
        yield found


def waiting(stats: Stats) -> int:
    return sum(q.waiting for q in stats.queues.values())


async def stored(storage: Storage) -> Document:
    return decode((await storage.read(DOCUMENT_KEY)).data)


async def run_all(broker: Broker) -> list[str]:
    """Claim and complete until nothing is queued or waiting (claims wait for loads)."""
    q = broker.client()
    got: list[str] = []
    while True:
        await broker.segments.settled()
        stats = await q.stats()
        if not stats.depth and not waiting(stats):
            return got
        jobs = await q.claim("w", max_jobs=5, wait_s=30.0)
        for job in jobs:
            await q.complete(job)
        got.extend(job.id for job in jobs)


async def test_a_fan_in_leaves_the_document_and_runs_once_after_its_parent(url: str) -> None:
    storage = from_url(url)
    async with Broker(url, cold_config()) as broker:
        q = broker.client()
        parent = await q.push(b"parent")
        children = [await q.push(b"c%d" % i, after=[parent]) for i in range(30)]
        await broker.segments.settled()
        doc = await stored(storage)
        hot = [j for j in doc.jobs.values() if j.status == "waiting"]
        assert len(hot) < 5  # fewer than waiting_spill_above_jobs stay
        assert sum(ref.count for ref in doc.waiting_cold) == 30 - len(hot)
        assert len(await storage.list(WAITING_PREFIX)) == len(doc.waiting_cold)
        assert waiting(await q.stats()) == 30
        (job,) = await q.claim("w", max_jobs=10, wait_s=30.0)
        assert job.id == parent  # never a child
        await q.complete(job)
        assert sorted(await run_all(broker)) == sorted(children)  # each exactly once
        assert not broker.document.waiting_cold
        counters = broker.segments.waiting.counters
        assert counters.loaded_jobs == counters.spilled_jobs == 30 - len(hot)
        await broker.segments.settled()
    assert await storage.list(WAITING_PREFIX) == []  # loaded objects are deleted
    await storage.close()


async def test_a_child_of_many_parents_waits_in_one_object_for_the_last(url: str) -> None:
    async with Broker(url, cold_config()) as broker:
        q = broker.client()
        parents = [await q.push(b"p%d" % i) for i in range(8)]
        child = await q.push(b"child", after=parents)
        await broker.segments.settled()
        (ref,) = broker.document.waiting_cold
        assert ref.count == 1
        done: list[str] = []
        while len(done) < len(parents):
            jobs = await q.claim("w", max_jobs=3, wait_s=30.0)
            assert child not in [j.id for j in jobs]
            for job in jobs:
                await q.complete(job)
            done.extend(j.id for j in jobs)
            await broker.segments.settled()
        assert await run_all(broker) == [child]


async def test_a_cold_child_is_cancelled_by_id(url: str) -> None:
    async with Broker(url, cold_config()) as broker:
        q = broker.client()
        parent = await q.push(b"parent")
        children = [await q.push(b"c%d" % i, after=[parent]) for i in range(6)]
        await broker.segments.settled()
        assert children[2] not in broker.document.jobs
        await q.cancel(children[2])
        assert (await q.result(children[2])).status == "cancelled"
        with pytest.raises(JobNotFound):
            await q.cancel(children[2])
        assert waiting(await q.stats()) == 5
        (job,) = await q.claim("w", max_jobs=1, wait_s=30.0)
        await q.complete(job)
        assert sorted(await run_all(broker)) == sorted(c for c in children if c != children[2])


async def test_a_takeover_reads_no_object_and_releases_the_children(url: str) -> None:
    first = Broker(url, cold_config())
    await first.start()
    q = first.client()
    parent = await q.push(b"parent")
    children = [await q.push(b"c%d" % i, after=[parent]) for i in range(12)]
    await first.segments.settled()
    assert first.document.waiting_cold
    for task in first.tasks():  # it dies where it stands
        task.cancel()
    await asyncio.gather(*first.tasks(), return_exceptions=True)
    storage = Counting(from_url(url))
    async with Broker(storage, cold_config()) as second:
        assert [k for k in storage.gets if k.startswith(WAITING_PREFIX)] == []
        assert waiting(await second.client().stats()) == 12
        q2 = second.client()
        (job,) = await q2.claim("w", max_jobs=5, wait_s=30.0)
        assert job.id == parent
        await q2.complete(job)
        assert sorted(await run_all(second)) == sorted(children)
    await storage.close()


async def test_the_orphan_sweep_keeps_referenced_objects_and_deletes_orphans(url: str) -> None:
    storage = from_url(url)
    orphan = f"{WAITING_PREFIX}never-referenced.jsonl"
    async with Broker(url, cold_config()) as broker:
        await storage.put(orphan, b'{"format":1}\n')
        q = broker.client()
        parent = await q.push(b"parent")
        for i in range(6):
            await q.push(b"c%d" % i, after=[parent])
        await broker.segments.settled()
        referenced = {ref.key for ref in broker.document.waiting_cold}
        assert referenced
        segments = broker.segments
        suspects = await segments.sweep(set())
        assert suspects == {orphan}
        await q.push(b"a commit")
        await segments.settled()
        suspects = await segments.sweep(suspects)
        await q.push(b"the next commit deletes it")
        await segments.settled()
        left = set(await storage.list(WAITING_PREFIX))
        assert orphan not in left
        assert referenced <= left
    await storage.close()


class Gated(Wrapped):
    """A storage wrapper whose puts under ``waiting/`` wait for ``opened``."""

    def __init__(self, inner: Storage) -> None:
        super().__init__(inner)
        self.entered = asyncio.Event()
        self.opened = asyncio.Event()

    async def put(self, key: str, data: bytes) -> None:
        if key.startswith(WAITING_PREFIX):
            self.entered.set()
            await self.opened.wait()
        await self.inner.put(key, data)


async def test_while_children_are_written_the_commit_loop_may_hold(url: str) -> None:
    """A spill of children being written says so (``writing``: what the commit loop's
    ``spill_hold_bytes`` hold waits on), and stops saying so once its op is submitted."""
    storage = Gated(from_url(url))
    async with Broker(storage, cold_config()) as broker:
        q = broker.client()
        parent = await q.push(b"parent")
        await q.push_many([NewJob(b"c", after=(parent,)) for _ in range(8)])
        await storage.entered.wait()
        cold = broker.segments.waiting
        assert cold.writing
        assert not broker.document.waiting_cold
        storage.opened.set()
        await cold.written()
        assert not cold.writing
        await broker.segments.settled()
        assert sum(ref.count for ref in broker.document.waiting_cold) == 8
    await storage.close()


@pytest.fixture(params=("memory", "file"))
def local_url(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[str]:
    with backend_url(request, request.param, tmp_path, "waiting-aside") as found:
        yield found


async def test_a_missing_or_broken_object_is_set_aside_and_readmitted_once(
    local_url: str,
) -> None:
    url = local_url
    storage = from_url(url)
    async with Broker(url, cold_config()) as broker:
        q = broker.client()
        parent = await q.push(b"parent")
        children = [await q.push(b"c%d" % i, after=[parent]) for i in range(30)]
        await broker.segments.settled()
        lost, broken = list(broker.document.waiting_cold)[:2]
        saved = {ref.key: await storage.get(ref.key) for ref in (lost, broken)}
        await storage.delete(lost.key)
        await storage.put(broken.key, saved[broken.key][:-2] + b"x\n")
        (job,) = await q.claim("w", max_jobs=10, wait_s=30.0)
        assert job.id == parent
        await q.complete(job)
        first = await run_all(broker)  # the rest of the children run
        aside = lost.count + broken.count
        assert len(first) == 30 - aside
        doc = broker.document
        assert set(doc.waiting_cold.aside) == {lost.key, broken.key}
        stats = (await q.stats()).queues["default"]
        assert (stats.waiting, stats.set_aside, stats.set_aside_segments) == (0, aside, 2)
        assert broker.segments.waiting.counters.set_aside == 2
        suspects = await broker.segments.sweep(set())  # two sweeps: never orphans
        await q.push(b"a commit", queue="other")
        await broker.segments.settled()
        await broker.segments.sweep(suspects)
        await q.push(b"another commit", queue="other")
        await broker.segments.settled()
        assert broken.key in await storage.list(WAITING_PREFIX)
        for job in await q.claim("w", queues=["other"], max_jobs=5):
            await q.complete(job)
        with pytest.raises(InvalidInput, match="still missing"):
            await q.readmit_segment(lost.key)
        for key, data in saved.items():  # restored from a backup
            await storage.put(key, data)
        assert await q.readmit_segment(lost.key) == lost.count
        assert await q.readmit_segment(broken.key) == broken.count
        with pytest.raises(InvalidInput, match="not set aside"):
            await q.readmit_segment(broken.key)
        got = first + await run_all(broker)  # its parent finished meanwhile: due at once
        assert sorted(got) == sorted(children)  # every child, exactly once
        assert len(got) == len(set(got))
        assert not broker.document.waiting_cold
    await storage.close()
