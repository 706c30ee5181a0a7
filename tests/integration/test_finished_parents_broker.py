"""A push naming a parent whose entry of the record of finished jobs was sealed, through
a real broker on every backend: the broker reads the object and places the
child (also after a takeover, which read no object), whether the entry was
sealed before dependencies came into use (with its result) or while they were
(held only for children); an unknown parent or an unreadable object is
``JobNotFound``, never taken for done."""

from __future__ import annotations

import asyncio
from collections.abc import Iterator
from pathlib import Path

import pytest
from backends import BACKENDS, Counting, backend_url
from segment_helpers import config

from osqueue.api import NewJob
from osqueue.broker import Broker, BrokerConfig
from osqueue.errors import JobNotFound
from osqueue.ids import new_id
from osqueue.state.finished_refs import FINISHED_PREFIX
from osqueue.storage import from_url


def sealing(**kw: object) -> BrokerConfig:
    return config(finished_seal_above_entries=4, finished_object_entries=5, **kw)


@pytest.fixture(params=BACKENDS)
def url(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[str]:
    with backend_url(request, request.param, tmp_path, "parents") as found:
        yield found


async def finish(broker: Broker, n: int, *, result: bool) -> list[str]:
    """Push, claim and complete ``n`` jobs on queue ``w`` (with a result each if asked)."""
    q = broker.client()
    done: list[str] = []
    for i in range(n):
        done.append(await q.push(b"p%d" % i, queue="w"))
        (job,) = await q.claim("w", queues=("w",), wait_s=30.0)
        await q.complete(job, result={"i": i} if result else None)
    await broker.segments.settled()
    return done


async def child_state(broker: Broker, parent: str) -> str:
    """Push a child of ``parent`` on queue ``c``; how it stands once placed."""
    q = broker.client()
    child = await q.push(b"child", queue="c", after=[parent])
    found = [j for j in broker.document.jobs.values() if j.id == child]
    return found[0].status if found else "gone"


def sealed_ids(broker: Broker, done: list[str]) -> list[str]:
    doc = broker.document
    return [i for i in done if i not in doc.finished and i not in doc.jobs]


async def test_a_child_of_a_sealed_parent_is_placed_also_after_a_takeover(url: str) -> None:
    first = Broker(url, sealing())
    await first.start()
    with_results = await finish(first, 10, result=True)  # sealed before dependencies
    assert first.document.dependencies_at is None
    early = sealed_ids(first, with_results)
    assert early, "some entries with results were sealed"
    assert await child_state(first, early[0]) == "queued"  # the documented gap, closed
    held = await finish(first, 10, result=False)  # kept for children only, sealed apart
    refs = list(first.document.finished.sealed)
    assert any(r.held for r in refs)
    late = sealed_ids(first, held)
    assert late
    assert await child_state(first, late[-1]) == "queued"
    assert first.segments.finished.counters.parent_reads >= 2
    for task in first.tasks():  # it dies where it stands
        task.cancel()
    await asyncio.gather(*first.tasks(), return_exceptions=True)
    storage = Counting(from_url(url))
    async with Broker(storage, sealing()) as second:
        assert [k for k in storage.gets if k.startswith(FINISHED_PREFIX)] == []
        assert await child_state(second, late[0]) == "queued"
        assert await child_state(second, early[-1]) == "queued"
        assert [k for k in storage.gets if k.startswith(FINISHED_PREFIX)]
        with pytest.raises(JobNotFound):
            await second.client().push(b"orphan", queue="c", after=["never-pushed"])
    await storage.close()


async def test_an_unreadable_object_finds_no_parent(url: str) -> None:
    storage = from_url(url)
    async with Broker(url, sealing()) as broker:
        done = await finish(broker, 10, result=True)
        sealed = sealed_ids(broker, done)
        assert sealed
        (ref,) = broker.document.finished.sealed.candidates(sealed[0], broker.clock.now())
        await storage.delete(ref.key)
        with pytest.raises(JobNotFound):
            await broker.client().push(b"child", queue="c", after=[sealed[0]])
        assert broker.segments.finished.counters.broken >= 1
    await storage.close()


async def test_a_batch_naming_a_sealed_parent_and_its_own_children_is_placed_whole(
    url: str,
) -> None:
    async with Broker(url, sealing()) as broker:
        done = await finish(broker, 10, result=True)
        sealed = sealed_ids(broker, done)
        assert sealed
        q = broker.client()
        head, middle, tail = new_id(), new_id(), new_id()
        jobs = [
            NewJob(b"head", id=head, queue="c", after=[sealed[0]]),
            NewJob(b"middle", id=middle, queue="c", after=[head]),
            NewJob(b"tail", id=tail, queue="c", after=[middle, sealed[-1]]),
        ]
        assert await q.push_many(jobs) == [head, middle, tail]
        jobs_now = broker.document.jobs
        assert jobs_now[head].status == "queued"
        assert jobs_now[middle].after == (head,)
        assert jobs_now[tail].after == (middle,)


async def test_a_sealed_result_within_a_waiting_objects_id_bounds_is_read(url: str) -> None:
    """``result()`` of a job whose entry was sealed, its id inside the id bounds of
    an object of waiting children: those bounds said "maybe queued" and the
    sealed object was not asked."""
    config = sealing(waiting_spill_above_jobs=3, waiting_object_jobs=10)
    async with Broker(url, config) as broker:
        q = broker.client()
        await q.push(b"parent", id="par", queue="parents")
        for n in range(6):
            await q.push(b"child", id=f"k{n}", queue="kids", after=["par"])
        await broker.segments.settled()
        assert broker.document.waiting_cold.refs
        for n in range(8):  # ids inside those bounds, finished with a result, sealed
            await q.push(b"x", id=f"k1-{n}", queue="w")
            (job,) = await q.claim("w", queues=("w",))
            await q.complete(job, result={"n": n})
        await broker.segments.settled()
        doc = broker.document
        sealed = [f"k1-{n}" for n in range(8) if f"k1-{n}" not in doc.finished]
        assert sealed
        assert doc.waiting_cold.may_hold(sealed[0])  # the bounds hold it
        assert sealed[0] not in doc.jobs
        found = await q.result(sealed[0])
        assert found.status == "done"
        assert found.value == {"n": int(sealed[0][-1])}
