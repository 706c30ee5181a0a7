"""Delayed jobs in objects through a real broker on every backend (memory, file,
moto S3, Azurite): spill and load ahead, never claimed early, claimable when due
with no other commit coming, cancel, dedupe and keys of spilled delayed jobs,
retries with backoff, the orphan sweep, and a takeover that reads no object.

Thresholds are tiny (an object holds a few jobs), and a manual clock moves time,
so no test waits for a due time.  The broker's work is awaited with
``broker.segments.settled()`` and turns of the loop (no sleeps).
"""

from __future__ import annotations

import asyncio
from collections.abc import Iterator
from pathlib import Path

import pytest
from backends import BACKENDS, Counting, backend_url
from segment_helpers import DELAYED_T0 as T0
from segment_helpers import delayed_config as config

from osqueue.broker import Broker
from osqueue.broker.cold.read import sort_key
from osqueue.clock import ManualClock
from osqueue.errors import DuplicateKey, InvalidInput, JobNotFound
from osqueue.inspect.jobs import list_page, payload_by_id
from osqueue.state import DOCUMENT_KEY, Document, decode
from osqueue.state.cold_delayed import DELAYED_PREFIX
from osqueue.storage import from_url
from osqueue.storage.port import Storage


@pytest.fixture(params=BACKENDS)
def url(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[str]:
    with backend_url(request, request.param, tmp_path, "delayed") as found:
        yield found


async def stored(storage: Storage) -> Document:
    return decode((await storage.read(DOCUMENT_KEY)).data)


async def advance(broker: Broker, clock: ManualClock, seconds: float) -> None:
    """Move the clock, let its timers fire (turns of the loop), then wait until the
    broker's segment work (reads, loads and their commits) settled."""
    clock.advance(seconds)
    for _ in range(30):
        await asyncio.sleep(0)
    await broker.segments.settled()


async def push_delayed(broker: Broker, delays: list[float], **kw: object) -> list[str]:
    q = broker.client()
    ids = [
        await q.push(b"p%d" % i, delay_s=d, id=f"d{i}", **kw)  # type: ignore[arg-type]
        for i, d in enumerate(delays)
    ]
    await broker.segments.settled()
    return ids


async def test_delayed_jobs_spill_load_ahead_and_are_claimed_when_due_never_early(
    url: str,
) -> None:
    storage = from_url(url)
    clock = ManualClock(T0)
    async with Broker(url, config(), clock=clock) as broker:
        q = broker.client()
        ids = await push_delayed(broker, [1000.0 + i for i in range(8)])
        doc = broker.document
        assert not doc.jobs
        assert sum(ref.count for ref in doc.delayed) == 8
        keys = {ref.key for ref in doc.delayed}
        assert set(await storage.list(DELAYED_PREFIX)) == keys
        assert (await stored(storage)).delayed == doc.delayed
        stats = (await q.stats()).queues["default"]
        assert (stats.depth, stats.delayed) == (8, 8)
        assert await q.claim("w", max_jobs=8, wait_s=0) == []
        # a lead before the first is due: the timer loads (no other commit comes)
        await advance(broker, clock, 990.0)
        assert ids[0] in broker.document.jobs
        assert ids[1] in broker.document.jobs
        assert ids[2] not in broker.document.jobs  # a chunk: only what is due in the lead
        assert await q.claim("w", max_jobs=8, wait_s=0) == []  # loaded, not due yet
        waiting = asyncio.ensure_future(q.claim("w", max_jobs=1, wait_s=3600.0))
        await advance(broker, clock, 0.0)
        assert not waiting.done()
        await advance(broker, clock, 10.0)  # the first is due: the parked claim gets it
        (job,) = await asyncio.wait_for(waiting, 30.0)
        assert job.id == ids[0]
        await q.complete(job)
        await advance(broker, clock, 20.0)  # all due now, all loaded
        jobs = await q.claim("w", max_jobs=8, wait_s=0)
        assert [j.id for j in jobs] == ids[1:]
        for j in jobs:
            await q.complete(j)
        await broker.segments.settled()
        assert not broker.document.delayed
        assert await storage.list(DELAYED_PREFIX) == []  # loaded objects are deleted
    await storage.close()


async def test_cancel_dedupe_and_keys_of_spilled_delayed_jobs(url: str) -> None:
    clock = ManualClock(T0)
    async with Broker(url, config(), clock=clock) as broker:
        q = broker.client()
        keyed = await q.push(b"k", delay_s=540.0, key="the-key", id="keyed")
        ids = await push_delayed(broker, [500.0, 510.0, 520.0, 530.0])
        assert "keyed" not in broker.document.jobs
        assert ids[2] not in broker.document.jobs
        # a retried push of a spilled id is the same job; a held key is refused
        assert await q.push(b"again", delay_s=500.0, id=ids[1]) == ids[1]
        with pytest.raises(DuplicateKey):
            await q.push(b"other", key="the-key")
        await q.cancel(ids[2])  # found in its object by the id bounds
        with pytest.raises(JobNotFound):
            await q.cancel(ids[2])
        assert (await q.stats()).queues["default"].delayed == 4
        await advance(broker, clock, 600.0)
        jobs = await q.claim("w", max_jobs=10, wait_s=0)
        assert sorted(j.id for j in jobs) == sorted([ids[0], ids[1], ids[3], keyed])
        assert not broker.document.delayed


async def test_retries_with_backoff_spill_and_come_back_once_each(url: str) -> None:
    clock = ManualClock(T0)
    async with Broker(
        url, config(backoff_base_s=1000.0, backoff_cap_s=1000.0), clock=clock
    ) as broker:
        q = broker.client()
        ids = [await q.push(b"p%d" % i) for i in range(5)]
        jobs = await q.claim("w", max_jobs=5, wait_s=0)
        for job in jobs:
            await q.fail(job, error="downstream is down")
        await broker.segments.settled()
        spilled = sum(ref.remaining for ref in broker.document.delayed)
        assert spilled >= 4
        assert spilled + len(broker.document.jobs) == 5
        await advance(broker, clock, 995.0)
        assert await q.claim("w", max_jobs=5, wait_s=0) == []  # loaded, never early
        await advance(broker, clock, 5.0)
        again = await q.claim("w", max_jobs=10, wait_s=0)
        assert sorted(j.id for j in again) == sorted(ids)
        assert all(j.attempts == 2 for j in again)


async def test_the_orphan_sweep_deletes_unreferenced_delayed_objects_only(url: str) -> None:
    storage = from_url(url)
    orphan = f"{DELAYED_PREFIX}default/001800000100=never-referenced.jsonl"
    clock = ManualClock(T0)
    async with Broker(url, config(), clock=clock) as broker:
        await storage.put(orphan, b'{"format":1}\n')
        await push_delayed(broker, [500.0, 510.0, 520.0, 530.0])
        referenced = {ref.key for ref in broker.document.delayed}
        assert referenced
        segments = broker.segments
        suspects = await segments.sweep(set())
        assert suspects == {orphan}
        await broker.client().push(b"a commit")
        await segments.settled()
        suspects = await segments.sweep(suspects)
        await broker.client().push(b"the next commit deletes it")
        await segments.settled()
        left = set(await storage.list(DELAYED_PREFIX))
        assert orphan not in left
        assert left == referenced  # the referenced objects stay
    await storage.close()


async def test_a_takeover_reads_no_delayed_object_and_serves_them_when_due(url: str) -> None:
    clock = ManualClock(T0)
    first = Broker(url, config(), clock=clock)
    await first.start()
    ids = await push_delayed(first, [500.0, 510.0, 520.0, 530.0, 540.0])
    doc = first.document
    assert sum(ref.count for ref in doc.delayed) == 4
    assert list(doc.jobs) == ids[4:]
    for task in first.tasks():  # it dies where it stands
        task.cancel()
    await asyncio.gather(*first.tasks(), return_exceptions=True)
    storage = Counting(from_url(url))
    async with Broker(storage, config(), clock=clock) as second:
        assert [key for key in storage.gets if key.startswith(DELAYED_PREFIX)] == []
        assert second.document.delayed == doc.delayed
        q = second.client()
        assert (await q.stats()).queues["default"].delayed == 5
        await advance(second, clock, 600.0)
        jobs = await q.claim("w", max_jobs=10, wait_s=0)
        assert sorted(j.id for j in jobs) == sorted(ids)
    await storage.close()


async def test_listing_pages_through_delayed_objects_in_claim_order(url: str) -> None:
    clock = ManualClock(T0)
    async with Broker(url, config(), clock=clock) as broker:
        q = broker.client()
        ids = await push_delayed(broker, [900.0 - 10 * i for i in range(9)])  # due in reverse
        ready = await q.push(b"now", id="ready")
        await broker.segments.settled()
        assert sum(ref.remaining for ref in broker.document.delayed) >= 8
        shown, left = await list_page(url, "default", None, 4, None)
        assert [item.job.id for item in shown] == ids[:4]  # claim order: seq, not due time
        assert left == 6
        after = sort_key(shown[-1].job)
        rest, _ = await list_page(url, "default", None, 0, after)
        assert [item.job.id for item in rest] == [*ids[4:], ready]
        spilled = next(item for item in shown if item.segment is not None)
        assert spilled.segment.startswith(DELAYED_PREFIX)  # type: ignore[union-attr]
        found = await payload_by_id(url, ids[1])
        assert found == b"p1"


async def test_a_missing_delayed_object_is_set_aside_and_readmitted_once_restored(
    url: str,
) -> None:
    storage = from_url(url)
    clock = ManualClock(T0)
    async with Broker(url, config(segment_jobs=2), clock=clock) as broker:
        q = broker.client()
        ids = await push_delayed(broker, [500.0, 510.0, 520.0, 530.0])
        refs = sorted(broker.document.delayed, key=lambda r: r.next_run_at)
        assert len(refs) == 2
        lost = refs[0]
        data = await storage.get(lost.key)
        await storage.delete(lost.key)  # a careless lifecycle rule
        await advance(broker, clock, 600.0)
        assert lost.key in broker.document.delayed.aside
        assert broker.segments.delayed.counters.set_aside == 1
        jobs = await q.claim("w", max_jobs=10, wait_s=0)  # the other object flows on
        assert sorted(j.id for j in jobs) == ids[2:]
        stats = (await q.stats()).queues["default"]
        assert (stats.set_aside, stats.set_aside_segments) == (2, 1)
        with pytest.raises(InvalidInput):
            await q.readmit_segment(lost.key)  # still missing
        await storage.put(lost.key, data)
        assert await q.readmit_segment(lost.key) == 2
        await advance(broker, clock, 0.0)
        await q.stats()  # a commit: the readmitted object is due, and loads
        await broker.segments.settled()
        jobs = await q.claim("w", max_jobs=10, wait_s=0)
        assert sorted(j.id for j in jobs) == ids[:2]
    await storage.close()


async def test_a_spilled_delayed_id_pushed_again_is_deduped_by_its_filter_across_a_restart(
    url: str,
) -> None:
    """A delayed object carries the filter of its jobs' ids (no tombstone in the
    document); after a restart, a push of one of those ids is answered as the job
    it is (the broker reads the object), and each job runs once.  A job cancelled
    while spilled leaves its tombstone when the load that skips it commits."""
    clock = ManualClock(T0)
    settings = config(dedupe_window_s=3600.0)  # the window outlasts the due times
    async with Broker(url, settings, clock=clock) as broker:
        ids = await push_delayed(broker, [500.0, 510.0, 520.0, 530.0, 540.0])
        spilled = [i for i in ids if i not in broker.document.jobs]
        assert len(spilled) >= 3
        await broker.client().cancel(spilled[1])
    storage = from_url(url)
    doc = await stored(storage)
    assert doc.recent == {}  # no tombstone: the delayed objects' filters answer
    assert all(ref.id_filter for ref in doc.delayed)
    async with Broker(url, settings, clock=clock) as broker:
        q = broker.client()
        for job_id in ids:
            assert await q.push(b"again", delay_s=500.0, id=job_id) == job_id
        assert broker.document.recent == {}
        assert (await q.stats()).queues["default"].delayed == len(ids) - 1
        await advance(broker, clock, 600.0)
        assert spilled[1] in broker.document.recent  # the load skipped it: its tombstone
        assert await q.push(b"again", id=spilled[1]) == spilled[1]
        jobs = await q.claim("w", max_jobs=10, wait_s=0)
        assert sorted(j.id for j in jobs) == sorted(i for i in ids if i != spilled[1])
        assert all(j.payload != b"again" for j in jobs)
        stats = (await q.stats()).queues["default"]
        assert (stats.depth, stats.claimed) == (0, len(ids) - 1)  # nothing applied twice
    await storage.close()
