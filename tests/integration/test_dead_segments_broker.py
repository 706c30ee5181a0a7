"""Dead letters in dead segments through a real broker on every backend (memory,
file, moto S3, Azurite): the spill of old deaths, counts from the references,
listing and paging, retry (all, by filter) exactly once across a restart,
purge, and the orphan sweep of ``dead/``.

Thresholds are tiny (a queue keeps 2 dead jobs, a dead segment holds 4), so
every test spills many times.  Tests wait with ``broker.segments.settled()``.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest
from backends import BACKENDS, backend_url
from remote_helpers import fast_config, quiet_broker_config
from segment_helpers import config

from osqueue.broker import Broker, BrokerConfig
from osqueue.client.remote import connect
from osqueue.errors import InvalidInput, JobNotFound
from osqueue.server.runner import BrokerServer
from osqueue.server.server import ServerConfig
from osqueue.state import DOCUMENT_KEY, Document, decode
from osqueue.state.cold_dead import DEAD_PREFIX, read_dead
from osqueue.storage import from_url
from osqueue.storage.port import Storage

_DEAD = {"dead_keep_jobs": 2, "dead_spill_jobs": 2, "spill_above_jobs": None}


def dead_config() -> BrokerConfig:
    return config(**_DEAD)


@pytest.fixture(params=BACKENDS)
def url(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[str]:
    with backend_url(request, request.param, tmp_path, "dead") as found:
        yield found


async def stored(storage: Storage) -> Document:
    return decode((await storage.read(DOCUMENT_KEY)).data)


async def kill(broker: Broker, n: int, queue: str = "default") -> list[str]:
    """Push ``n`` jobs that die at their first failure, fail each, let the spills settle."""
    q = broker.client()
    ids = [await q.push(b"p%d" % i, queue=queue, max_attempts=1) for i in range(n)]
    for i in range(n):
        for job in await q.claim("w", queues=[queue], max_jobs=1):
            await q.fail(job, error=f"error {i % 3}")
    await broker.segments.settled()
    return ids


async def drain(broker: Broker, queue: str = "default") -> list[str]:
    q = broker.client()
    got: list[str] = []
    while (await q.stats()).queues[queue].depth:
        jobs = await q.claim("w", queues=[queue], max_jobs=5, wait_s=30.0)
        for job in jobs:
            await q.complete(job)
        got.extend(job.id for job in jobs)
    return got


async def test_old_deaths_spill_to_dead_segments_counted_from_their_references(url: str) -> None:
    storage = from_url(url)
    async with Broker(url, dead_config()) as broker:
        ids = await kill(broker, 14)
        doc = broker.document
        refs = list(doc.dead)
        assert refs
        assert sum(1 for j in doc.jobs.values() if j.status == "dead") <= 3
        assert set(await storage.list(DEAD_PREFIX)) == {ref.key for ref in refs}
        assert (await stored(storage)).dead == doc.dead
        spilled = [j.id for ref in refs for j in read_dead(ref, await storage.get(ref.key))]
        in_doc = [j.id for j in doc.jobs.values() if j.status == "dead"]
        assert sorted(spilled + in_doc) == sorted(ids)  # each in one place exactly
        stats = await broker.client().stats()
        assert stats.dead == 14
        assert stats.queues["default"].dead == 14
        listed = await broker.client().dead_jobs(limit=5)
        page2 = await broker.client().dead_jobs(offset=5)
        assert sorted(j.id for j in listed + page2) == sorted(ids)
        errors = await broker.client().dead_jobs(error="error 1")
        assert {j.last_error for j in errors} == {"error 1"}
        assert len(errors) == len([i for i in range(14) if i % 3 == 1])
    await storage.close()


async def test_a_retry_of_all_brings_every_dead_job_back_exactly_once(url: str) -> None:
    storage = from_url(url)
    async with Broker(url, dead_config()) as broker:
        ids = await kill(broker, 14)
        seen: list[tuple[int, int]] = []
        n = await broker.client().retry_dead(progress=lambda jobs, left: seen.append((jobs, left)))
        assert n == 14
        assert seen[-1] == (14, 0)
        await broker.segments.settled()
        assert not broker.document.dead
        assert await storage.list(DEAD_PREFIX) == []  # deleted after their swaps
        got = await drain(broker)
        assert sorted(got) == sorted(ids)
        assert len(got) == len(set(got))
        assert (await broker.client().stats()).dead == 0
    await storage.close()


async def test_a_paged_retry_resumes_after_a_restart_and_retries_none_twice(url: str) -> None:
    storage = from_url(url)
    async with Broker(url, dead_config()) as broker:
        ids = await kill(broker, 14)
        first = await broker.client().retry_dead(max_segments=1)
        assert 0 < first < 14
    async with Broker(url, dead_config()) as broker:  # a new broker takes over
        rest = await broker.client().retry_dead()
        assert first + rest == 14
        got = await drain(broker)
        assert sorted(got) == sorted(ids)
        assert len(got) == len(set(got))
    await storage.close()


async def test_purge_by_filter_rewrites_the_segments_and_keeps_the_rest(url: str) -> None:
    storage = from_url(url)
    async with Broker(url, dead_config()) as broker:
        await kill(broker, 14)
        purged = await broker.client().purge_dead(error="error 0")
        assert purged == len([i for i in range(14) if i % 3 == 0])
        await broker.segments.settled()
        left = await broker.client().dead_jobs()
        assert len(left) == 14 - purged
        assert all(j.last_error != "error 0" for j in left)
        assert (await broker.client().stats()).dead == 14 - purged
        assert set(await storage.list(DEAD_PREFIX)) == {r.key for r in broker.document.dead}
        with pytest.raises(JobNotFound):
            await broker.client().retry_dead(["never-was"])
    await storage.close()


async def test_the_orphan_sweep_deletes_a_dead_orphan_and_keeps_referenced_ones(url: str) -> None:
    storage = from_url(url)
    orphan = "dead/default/000000000000001=never-referenced.jsonl"
    async with Broker(url, dead_config()) as broker:
        await storage.put(orphan, b'{"format":1}\n')
        await kill(broker, 10)
        referenced = {ref.key for ref in broker.document.dead}
        assert referenced
        segments = broker.segments
        suspects = await segments.sweep(set())
        assert suspects == {orphan}
        await broker.client().push(b"a commit")
        await segments.settled()
        suspects = await segments.sweep(suspects)
        await broker.client().push(b"the next commit deletes it")
        await segments.settled()
        left = set(await storage.list(DEAD_PREFIX))
        assert orphan not in left
        assert referenced <= left
    await storage.close()


async def test_retry_and_purge_of_all_over_grpc_reach_the_dead_segments(tmp_path: Path) -> None:
    url = f"file://{tmp_path}"
    settings = quiet_broker_config(dead_keep_jobs=2, dead_spill_jobs=2, segment_jobs=4)
    server = BrokerServer(url, ServerConfig(listen="127.0.0.1:0"), settings)
    await server.start()
    try:
        remote = await connect(url, config=fast_config())
        try:
            for i in range(10):
                await remote.push(b"p", max_attempts=1)
                (job,) = await remote.claim("w")
                await remote.fail(job, error=f"e{i}")
            await server.broker.segments.settled()
            assert server.broker.document.dead  # most of them in dead segments
            assert (await remote.stats()).dead == 10
            assert await remote.retry_dead() == 10
            stats = await remote.stats()
            assert (stats.dead, stats.depth) == (0, 10)
            for _ in range(10):
                (job,) = await remote.claim("w", wait_s=10.0)
                await remote.fail(job, error="again")
            await server.broker.segments.settled()
            assert await remote.purge_dead() == 10
            assert (await remote.stats()).dead == 0
        finally:
            await remote.close()
    finally:
        await server.stop()


async def test_the_payload_objects_of_jobs_in_dead_segments_are_never_orphans(url: str) -> None:
    async with Broker(url, config(**{**_DEAD, "inline_payload_max_bytes": 8})) as broker:
        q = broker.client()
        for _ in range(8):
            await q.push(b"a payload too large to sit inline", max_attempts=1)
            (job,) = await q.claim("w")
            await q.fail(job, error="boom")
        await broker.segments.settled()
        doc = broker.document
        held = doc.dead.payloads
        assert held
        assert not any(broker.payloads.orphan(key, doc) for key in held)
        assert await broker.client().purge_dead() == 8
        doc = broker.document
        assert all(broker.payloads.orphan(key, doc) for key in held)  # the sweep's now


@pytest.fixture(params=("memory", "file"))
def local_url(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[str]:
    with backend_url(request, request.param, tmp_path, "dead-aside") as found:
        yield found


async def test_a_missing_or_broken_dead_segment_is_set_aside_and_readmitted_once(
    local_url: str,
) -> None:
    url = local_url
    storage = from_url(url)
    async with Broker(url, dead_config()) as broker:
        ids = await kill(broker, 14)
        lost, broken = list(broker.document.dead)[:2]
        saved = {ref.key: await storage.get(ref.key) for ref in (lost, broken)}
        await storage.delete(lost.key)  # a careless lifecycle rule
        await storage.put(broken.key, saved[broken.key][:-2] + b"x\n")  # a bit flipped
        listed = await broker.client().dead_jobs()  # the rest is listed
        await broker.segments.settled()
        doc = broker.document
        assert set(doc.dead.aside) == {lost.key, broken.key}
        aside = lost.count + broken.count
        assert len(listed) == 14 - aside
        stats = (await broker.client().stats()).queues["default"]
        assert (stats.dead, stats.set_aside, stats.set_aside_segments) == (14 - aside, aside, 2)
        assert broker.segments.dead.counters.set_aside == 2
        suspects = await broker.segments.sweep(set())  # never orphans
        await broker.client().push(b"a commit", queue="other")
        await broker.segments.settled()
        await broker.segments.sweep(suspects)
        await broker.client().push(b"another commit", queue="other")
        await broker.segments.settled()
        assert broken.key in await storage.list(DEAD_PREFIX)
        assert await broker.client().retry_dead() == 14 - aside  # set-aside jobs not used
        first = await drain(broker)
        with pytest.raises(InvalidInput, match="still missing"):
            await broker.client().readmit_segment(lost.key)
        with pytest.raises(InvalidInput, match="still fails its check"):
            await broker.client().readmit_segment(broken.key)
        for key, data in saved.items():  # restored from a backup
            await storage.put(key, data)
        assert await broker.client().readmit_segment(lost.key) == lost.count
        assert await broker.client().readmit_segment(broken.key) == broken.count
        with pytest.raises(InvalidInput, match="not set aside"):
            await broker.client().readmit_segment(lost.key)
        assert not broker.document.dead.aside
        assert (await broker.client().stats()).queues["default"].dead == aside
        assert await broker.client().retry_dead() == aside
        got = first + await drain(broker)
        assert sorted(got) == sorted(ids)  # every job back, exactly once
        assert len(got) == len(set(got))
    await storage.close()
