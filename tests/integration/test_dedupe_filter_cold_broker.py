"""Dedupe of dead segments and objects of waiting children through a real broker on
every backend (memory, file, moto S3, Azurite): jobs pushed with ids spill dead or
waiting without tombstones, and the same ids pushed again are answered once (the
broker reads the dead segment or the object to confirm), before and after a retry
of the dead segment, a load of the object, a set-aside and a takeover."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest
from backends import BACKENDS, backend_url
from cold_helpers import cold_config
from segment_helpers import filter_false_positive

from osqueue.api import NewJob
from osqueue.broker import Broker
from osqueue.state.cold_dead import DeadFilter


@pytest.fixture(params=BACKENDS)
def url(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[str]:
    with backend_url(request, request.param, tmp_path, "dedupecold") as found:
        yield found


async def kill(broker: Broker, ids: list[str]) -> None:
    """Push ``ids`` (each pushed with its id: dedupe) to die at their first failure."""
    q = broker.client()
    for job_id in ids:
        assert await q.push(b"first", id=job_id, max_attempts=1) == job_id
    for _ in ids:
        for job in await q.claim("w", max_jobs=1):
            await q.fail(job, error="downstream down")
    await broker.segments.settled()


async def test_dead_spilled_ids_pushed_again_are_answered_once(url: str) -> None:
    ids = [f"d1-{i:03d}" for i in range(14)]
    async with Broker(url, cold_config()) as broker:
        q = broker.client()
        await kill(broker, ids)
        doc = broker.document
        assert doc.dead
        assert doc.recent == {}  # no tombstone: the dead segments' filters answer
        assert all(ref.id_filter for ref in doc.dead)
        again = await q.push_many([NewJob(b"again", id=i) for i in ids])
        assert again == ids
        assert await q.push(b"once more", id=ids[3]) == ids[3]
        stats = await q.stats()
        assert stats.depth == 0  # no second job
        assert stats.queues["default"].dead == 14
        # retried: the jobs move to ready segments (their filters come along)
        assert await broker.segments.dead.act(DeadFilter(), retry=True) == 14
        await broker.segments.settled()
        assert await q.push_many([NewJob(b"again", id=i) for i in ids]) == ids
        assert (await q.stats()).depth == 14
    async with Broker(url, cold_config()) as taken:  # a takeover: the filters are in the document
        q = taken.client()
        assert await q.push(b"after takeover", id=ids[0]) == ids[0]
        assert (await q.stats()).depth == 14
        got: list[str] = []
        while len(got) < 14:
            jobs = await q.claim("w", max_jobs=5, wait_s=30.0)
            for job in jobs:
                await q.complete(job)
            got.extend(job.id for job in jobs)
        assert sorted(got) == ids  # each once


async def test_a_purged_dead_segment_still_answers_its_ids(url: str) -> None:
    ids = [f"d2-{i:03d}" for i in range(10)]
    async with Broker(url, cold_config()) as broker:
        q = broker.client()
        await kill(broker, ids)
        assert await broker.segments.dead.act(DeadFilter(), retry=False) == 10
        assert set(broker.document.recent) == set(ids)  # purged: tombstones now
        assert await q.push_many([NewJob(b"again", id=i) for i in ids]) == ids
        assert (await q.stats()).depth == 0


async def test_waiting_spilled_ids_pushed_again_are_answered_once(url: str) -> None:
    async with Broker(url, cold_config()) as broker:
        q = broker.client()
        parent = await q.push(b"parent", id="w1-parent")
        kids = [f"w1-kid-{i:03d}" for i in range(12)]
        for kid in kids:
            assert await q.push(b"kid", id=kid, after=[parent]) == kid
        await broker.segments.settled()
        doc = broker.document
        assert doc.waiting_cold
        assert doc.recent == {}
        assert all(ref.id_filter for ref in doc.waiting_cold)
        again = await q.push_many([NewJob(b"again", id=k, after=[parent]) for k in kids])
        assert again == kids
        stats = await q.stats()
        assert stats.queues["default"].waiting == 12  # no second job
        (job,) = await q.claim("w", max_jobs=5, wait_s=30.0)
        assert job.id == parent
        await q.complete(job)
        got: list[str] = []
        while len(got) < 12:
            await broker.segments.settled()
            jobs = await q.claim("w", max_jobs=5, wait_s=30.0)
            for job in jobs:
                await q.complete(job)
            got.extend(job.id for job in jobs)
        assert sorted(got) == kids  # each once
        # loaded and finished: tombstones answer now
        assert await q.push(b"late", id=kids[5], after=[parent]) == kids[5]
        assert (await q.stats()).depth == 0


async def test_an_id_a_dead_filter_only_may_hold_is_read_and_applied(url: str) -> None:
    ids = [f"d3-{i:03d}" for i in range(10)]
    async with Broker(url, cold_config()) as broker:
        q = broker.client()
        await kill(broker, ids)
        refs = list(broker.document.dead)
        fake = filter_false_positive(ids, refs)  # a dead segment's filter may hold it
        assert await q.push(b"new", id=fake) == fake
        assert (await q.stats()).depth == 1
