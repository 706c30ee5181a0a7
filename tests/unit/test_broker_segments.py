"""The broker's segment I/O in detail (memory storage): failed spills, objects in
flight and the sweep, unreadable segments, the cache's budget, payloads of
spilled jobs, long-poll claims at a barrier, the sweep on its interval, and a
graceful stop with segment work in flight."""

from __future__ import annotations

import asyncio

import pytest
from backends import Wrapped
from segment_helpers import config

import osqueue
from osqueue.broker import Broker
from osqueue.clock import ManualClock
from osqueue.errors import StorageError
from osqueue.state import (
    DOCUMENT_KEY,
    SEGMENT_PREFIX,
    ClaimOp,
    Complete,
    Document,
    Push,
    check_segment,
    claimable,
    encode,
    plan_spills,
    transition,
)
from osqueue.storage import MemoryStorage
from osqueue.storage.port import Storage

T0 = 1_800_000_000.0


class Gated(Wrapped):
    """A storage wrapper whose segment writes land, then wait for :attr:`gate`
    before their caller hears back (and can fail before landing)."""

    def __init__(self, inner: Storage) -> None:
        super().__init__(inner)
        self.gate = asyncio.Event()
        self.gate.set()
        #: a segment write arrived (and waits for the gate)
        self.arrived = asyncio.Event()
        self.put_errors = 0

    async def put(self, key: str, data: bytes) -> None:
        if key.startswith(SEGMENT_PREFIX) and self.put_errors:
            self.put_errors -= 1
            raise StorageError("injected: 503 on a segment write")
        await self.inner.put(key, data)
        if key.startswith(SEGMENT_PREFIX):
            self.arrived.set()
            await self.gate.wait()


async def pushed(broker: Broker, n: int, start: int = 0) -> list[str]:
    q = broker.client()
    return [await q.push(b"p%d" % i, id=f"j{i:03d}") for i in range(start, start + n)]


async def test_a_spill_whose_jobs_changed_fails_alone_and_its_object_is_deleted() -> None:
    store = Gated(MemoryStorage())
    async with Broker(store, config()) as broker:
        q = broker.client()
        store.gate.clear()
        await pushed(broker, 5)  # j002..j004 are planned; their object waits
        await store.arrived.wait()
        (written,) = broker.segments.writing
        await q.cancel("j003")  # a job of the snapshot changes
        store.gate.set()
        await broker.segments.settled()
        assert broker.segments.counters.failed_spills == 1
        assert written not in await store.list(SEGMENT_PREFIX)  # deleted at once
        assert written not in broker.segments.writing
        await pushed(broker, 2, start=5)  # planned again from what is there now
        await broker.segments.settled()
        (ref,) = broker.document.segments
        assert (ref.first_seq, ref.count) == (3, 3)  # j002, j004, j005
        assert "j003" not in broker.document.jobs
        assert await store.list(SEGMENT_PREFIX) == [ref.key]


async def _held(broker: Broker) -> None:
    """Until a commit waits for the spill in flight (turns of the loop, no timer)."""
    for _ in range(10_000):
        if broker.segments.counters.held_commits:
            return
        await asyncio.sleep(0)
    pytest.fail("no commit waited for the spill being written")


async def test_past_spill_hold_bytes_a_commit_waits_for_the_spill_being_written() -> None:
    store = Gated(MemoryStorage())
    async with Broker(store, config(spill_hold_bytes=1)) as broker:
        store.gate.clear()
        await pushed(broker, 5)  # j002..j004 are planned; their object waits
        await store.arrived.wait()
        version = broker.document.version
        late = asyncio.ensure_future(broker.client().push(b"late", id="late"))
        await _held(broker)
        assert not late.done()
        assert broker.document.version == version  # nothing was written meanwhile
        store.gate.set()
        await late
        # one commit took the push and dropped the spilled tail
        assert broker.document.version == version + 1
        (ref,) = broker.document.segments
        assert (ref.first_seq, ref.count) == (3, 3)  # j002..j004
        assert set(broker.document.jobs) == {"j000", "j001", "late"}


async def test_a_commit_waits_for_a_spill_no_longer_than_the_lease_renewal() -> None:
    clock = ManualClock(T0)
    store = Gated(MemoryStorage())
    async with Broker(store, config(spill_hold_bytes=1, lease_s=30.0), clock=clock) as broker:
        store.gate.clear()
        await pushed(broker, 5)
        await store.arrived.wait()
        late = asyncio.ensure_future(broker.client().push(b"late", id="late"))
        await _held(broker)
        waited = 0.0
        while not late.done():  # committed with the object still being written
            clock.advance(0.5)
            waited += 0.5
            for _ in range(5):
                await asyncio.sleep(0)
        assert waited <= broker.config.renew_interval_s + 0.5
        await late
        assert broker.segments.spills.writing
        assert not broker.document.segments
        store.gate.set()
        await broker.segments.settled()
        assert len(list(broker.document.segments)) == 1


async def test_with_spill_hold_bytes_none_commits_never_wait_for_a_spill() -> None:
    store = Gated(MemoryStorage())
    async with Broker(store, config(spill_hold_bytes=None)) as broker:
        store.gate.clear()
        await pushed(broker, 5)
        await store.arrived.wait()
        await broker.client().push(b"late", id="late")
        assert broker.segments.spills.writing
        assert broker.segments.counters.held_commits == 0
        store.gate.set()
        await broker.segments.settled()


def test_spill_hold_bytes_must_be_a_whole_number_or_none() -> None:
    for bad in (0, -1, 1.5, "8MB"):
        with pytest.raises(osqueue.InvalidInput) as err:
            config(spill_hold_bytes=bad)
        assert err.value.field == "spill_hold_bytes"


async def test_an_object_being_written_is_never_swept() -> None:
    store = Gated(MemoryStorage())
    async with Broker(store, config()) as broker:
        store.gate.clear()
        await pushed(broker, 5)
        await store.arrived.wait()  # the object landed; its Spill is not submitted yet
        (written,) = await store.list(SEGMENT_PREFIX)
        assert broker.segments.writing == {written}
        suspects = await broker.segments.sweep(set())
        suspects = await broker.segments.sweep(suspects | {written})
        assert suspects == set()
        await broker.client().push(b"a commit")
        store.gate.set()
        await broker.segments.settled()
        (ref,) = broker.document.segments
        assert ref.key == written
        assert await broker.segments.sweep({written}) == set()
        assert await store.list(SEGMENT_PREFIX) == [written]


async def test_a_segment_write_that_keeps_failing_is_planned_again() -> None:
    store = Gated(MemoryStorage())
    async with Broker(store, config()) as broker:
        store.put_errors = 3  # every try of the first spill
        await pushed(broker, 5)
        await broker.segments.settled()
        assert not broker.document.segments
        assert await store.list(SEGMENT_PREFIX) == []
        await pushed(broker, 1, start=5)
        await broker.segments.settled()
        (ref,) = broker.document.segments
        assert (ref.count, await store.list(SEGMENT_PREFIX)) == (4, [ref.key])


async def test_the_cache_keeps_objects_within_its_budget() -> None:
    store = MemoryStorage()
    async with Broker(store, config(segment_cache_bytes=1)) as broker:
        q = broker.client()
        for name in ("a", "b", "c"):
            for i in range(8):
                await q.push(b"x", queue=name, id=f"{name}{i}")
        await broker.segments.settled()
        refs = list(broker.document.segments)
        assert len({ref.queue for ref in refs}) == 3
        for ref in refs:
            await broker.segments.cache.fetch(ref)
            assert len(broker.segments.cache) == 1  # one object over the budget: alone
        assert broker.segments.cache.bytes == refs[-1].size_bytes


async def test_payload_objects_of_spilled_jobs_survive_the_payload_sweep() -> None:
    clock = ManualClock()
    store = MemoryStorage()
    cfg = config(inline_payload_max_bytes=16, payload_sweep_interval_s=5.0, lease_s=10.0)
    async with Broker(store, cfg, clock=clock) as broker:
        q = broker.client()
        ids = [await q.push(b"%d" % i * 40) for i in range(8)]
        await broker.segments.settled()
        spilled = [i for i in ids if i not in broker.document.jobs]
        assert spilled
        for _ in range(16):  # three sweeps, the lease renewed meanwhile
            for _ in range(20):
                await asyncio.sleep(0)
            clock.advance(1.0)
        await broker.segments.settled()
        assert len(await store.list("payloads/")) == 8
        assert broker.counters.payloads_swept == 0
        got = []
        while len(got) < 8:
            got.extend(await q.claim("w", max_jobs=8, wait_s=60.0))
        assert [j.payload for j in got] == [b"%d" % i * 40 for i in range(8)]


async def test_the_orphan_sweep_runs_with_the_payload_sweep_on_its_interval() -> None:
    clock = ManualClock()
    store = MemoryStorage()
    orphan = "segments/default/p0/00000000000000000003=orphan.jsonl"
    cfg = config(payload_sweep_interval_s=5.0, lease_s=10.0)
    async with Broker(store, cfg, clock=clock) as broker:
        await pushed(broker, 8)
        await broker.segments.settled()
        referenced = {ref.key for ref in broker.document.segments}
        await store.put(orphan, b"never referenced")
        for _ in range(11):  # sweeps at 5 s and 10 s; renewals commit in between
            for _ in range(20):
                await asyncio.sleep(0)
            clock.advance(1.0)
        await broker.client().push(b"a commit")
        await broker.segments.settled()
        assert set(await store.list(SEGMENT_PREFIX)) == referenced
        assert broker.segments.counters.swept == 1


async def test_a_long_poll_claim_at_a_barrier_with_nothing_read_waits_for_one_load() -> None:
    """A takeover of a queue whose head is empty: the first claim stops at the
    barrier, and its long poll is answered by the commit that loads."""
    store = MemoryStorage()
    policy = config().policy()
    ops = [Push(f"j{i:03d}", b"p", dedupe=False) for i in range(8)]  # a tail of 2: no spill
    doc = transition(Document.empty(), ops, T0, policy).doc
    for plan in plan_spills(doc, policy):
        op, data = plan.build("u1")
        await store.put(op.ref.key, data)
        doc = transition(doc, [op], T0, policy).doc
    doc = transition(doc, [ClaimOp("gone", ("default",), 2)], T0, policy).doc
    doc = transition(doc, [Complete("j000", 1), Complete("j001", 2)], T0, policy).doc
    assert doc.segments
    assert not claimable(doc, ["default"], T0)
    await store.write(DOCUMENT_KEY, encode(doc), if_match=None)
    clock = ManualClock(T0)  # nothing advances it: only a commit can answer the claim
    async with Broker(store, config(), clock=clock) as broker:
        broker.segments.cache.evict(next(iter(broker.document.segments)).key)
        commits = broker.commits
        (job,) = await broker.client().claim("w", max_jobs=1, wait_s=3600.0)
        assert job.id == "j002"
        assert broker.commits - commits <= 3  # the claim, the load, the claim again


async def test_a_graceful_stop_with_segment_work_in_flight_leaves_a_consistent_queue() -> None:
    store = Gated(MemoryStorage())
    broker = Broker(store, config())
    await broker.start()
    await pushed(broker, 8)
    await broker.segments.settled()
    store.gate.clear()
    await pushed(broker, 4, start=8)  # a spill waits on its write
    await store.arrived.wait()
    await broker.stop()
    assert broker.segments.writing == set()
    async with Broker(store.inner, config()) as second:
        q = second.client()
        got = []
        while (await q.stats()).depth:
            got.extend(j.id for j in await q.claim("w", max_jobs=5, wait_s=30.0))
        assert got == [f"j{i:03d}" for i in range(12)]
        assert isinstance(second.document, osqueue.state.Document)


async def test_a_large_spill_is_built_off_the_loop_and_its_objects_check() -> None:
    store = MemoryStorage()
    cfg = config(segment_jobs=10_000, head_jobs=100, load_jobs=2_000, spill_above_jobs=100)
    async with Broker(store, cfg) as broker:
        q = broker.client()
        ids = await q.push_many([osqueue.NewJob(b"p", id=f"big{i:05d}") for i in range(6_000)])
        await broker.segments.settled()
        (ref,) = broker.document.segments
        assert ref.count >= 5_000  # one spill of that many: built in a thread
        check_segment(ref, await store.get(ref.key))
        got: list[str] = []
        while jobs := await q.claim("w", max_jobs=1_000):
            got.extend(job.id for job in jobs)
            await broker.segments.settled()
        assert got == ids
        assert broker.segments.counters.set_aside == 0


def test_a_transition_lists_the_jobs_it_claimed() -> None:
    policy = config().policy()
    ops = [Push(f"d{i:03d}", b"p", queue="deep", dedupe=False) for i in range(8)]
    doc = transition(Document.empty(), ops, T0, policy).doc
    for plan in plan_spills(doc, policy):
        doc = transition(doc, [plan.build("u1")[0]], T0, policy).doc
    assert "deep" in doc.segments.barriers
    pushes = [Push(f"b{i}", b"p", queue="busy", dedupe=False) for i in range(2)]
    doc = transition(doc, pushes, T0, policy).doc
    t = transition(doc, [ClaimOp("w", ("busy",), 2), ClaimOp("v", ("deep",), 3)], T0, policy)
    assert len(t.claimed_jobs) == 4  # (the deep one stops at its barrier, after its head of 2)
    assert [(job.id, job.status) for job in t.claimed_jobs] == [
        ("b0", "claimed"),
        ("b1", "claimed"),
        ("d000", "claimed"),
        ("d001", "claimed"),
    ]


def _counting_heap_walks(monkeypatch: pytest.MonkeyPatch) -> list[int]:
    from osqueue.broker.cold import manager

    walks: list[int] = []
    count = manager.jobs_ahead

    def counted(*args: object, **kw: object) -> int:
        walks.append(1)
        return count(*args, **kw)  # type: ignore[arg-type]

    monkeypatch.setattr(manager, "jobs_ahead", counted)
    return walks


async def test_another_queue_s_claims_neither_load_a_deep_queue_nor_walk_its_heap(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """The estimate of a deep queue's jobs before its barrier is lowered by its own
    claims only: claims of another queue (the deep one holding a claimed job)
    load none of its segments, and no commit of theirs counts its heap."""
    async with Broker(MemoryStorage(), config()) as broker:
        q = broker.client()
        await q.push_many([osqueue.NewJob(b"p", queue="deep") for _ in range(40)])
        await broker.segments.settled()
        assert broker.document.segments
        held = await q.claim("w", ("deep",), max_jobs=1)
        await broker.segments.settled()
        loads = broker.segments.counters.loads
        walks = _counting_heap_walks(monkeypatch)
        for _ in range(10):
            await q.push_many([osqueue.NewJob(b"b", queue="busy") for _ in range(2)])
            assert len(await q.claim("w", ("busy",), max_jobs=2)) == 2
            await broker.segments.settled()
        assert broker.segments.counters.loads == loads
        assert walks == []
        assert len(held) == 1


async def test_a_deep_queue_s_heap_is_counted_every_few_loads_and_every_job_comes_out(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    from osqueue.broker.cold.manager import _RECOUNT_LOADS

    async with Broker(MemoryStorage(), config()) as broker:
        q = broker.client()
        ids = await q.push_many([osqueue.NewJob(b"p", queue="deep") for _ in range(120)])
        await broker.segments.settled()
        loads = broker.segments.counters.loads
        walks = _counting_heap_walks(monkeypatch)
        seen: list[str] = []
        while len(seen) < len(ids):
            jobs = await q.claim("w", ("deep",), max_jobs=2, wait_s=5.0)
            assert jobs
            seen += [job.id for job in jobs]
            for job in jobs:
                await q.complete(job)
            await broker.segments.settled()
        assert seen == ids  # in order, each once
        loaded = broker.segments.counters.loads - loads
        assert loaded >= 3 * _RECOUNT_LOADS
        assert len(walks) <= loaded // 3  # not one a load (their estimate trusted between)


async def test_a_deep_queue_loading_more_than_the_trust_bound_counts_its_heap_each_load(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Loads of more than ``_RECOUNT_JOBS`` jobs: the heap is counted before each
    is planned, so jobs put back can never make the document take on eight such
    loads that nothing needs."""
    from osqueue.broker.cold.manager import _RECOUNT_JOBS

    size = _RECOUNT_JOBS + 4
    big = config(head_jobs=size, load_jobs=size, spill_above_jobs=size, segment_jobs=4 * size)
    async with Broker(MemoryStorage(), big) as broker:
        q = broker.client()
        await q.push_many([osqueue.NewJob(b"p", queue="deep") for _ in range(6 * size)])
        await broker.segments.settled()
        assert broker.document.segments
        loads = broker.segments.counters.loads
        walks = _counting_heap_walks(monkeypatch)
        taken = 0
        while taken < 5 * size:
            jobs = await q.claim("w", ("deep",), max_jobs=size // 2, wait_s=5.0)
            taken += len(jobs)
            await broker.segments.settled()
        loaded = broker.segments.counters.loads - loads
        assert loaded >= 3
        assert len(walks) >= loaded - 2  # (a load a starved claim asked for is not counted first)


async def test_after_a_claim_stops_at_the_barrier_claims_within_the_head_never_do() -> None:
    """A claim larger than the head stops at the barrier (and its load goes at
    once).  The jobs it took count: the estimate of the jobs before the barrier
    starts again from none, so each later load is planned a commit before the
    claims that need it, and no claim of at most ``head_jobs`` stops again."""
    # (head_max_bytes=1: the configured sizes, whatever the claims)
    small = config(head_jobs=4, load_jobs=4, spill_above_jobs=4, segment_jobs=50, head_max_bytes=1)
    async with Broker(MemoryStorage(), small) as broker:
        q = broker.client()
        ids = await q.push_many([osqueue.NewJob(b"p", queue="deep") for _ in range(120)])
        await broker.segments.settled()
        assert broker.document.segments
        counters = broker.segments.counters
        first = await q.claim("w", ("deep",), max_jobs=10)
        assert [job.id for job in first] == ids[:4]  # the head, then the barrier
        assert counters.starved == 1
        await broker.segments.settled()
        seen = [job.id for job in first]
        while len(seen) < 100:
            jobs = await q.claim("w", ("deep",), max_jobs=2, wait_s=5.0)
            assert len(jobs) == 2
            seen += [job.id for job in jobs]
            await broker.segments.settled()
        assert seen == ids[:100]
        assert counters.starved == 1
        assert counters.loads >= 20


async def test_a_stream_s_next_segment_is_read_before_the_load_that_reaches_it() -> None:
    """Once a stream's first segment has two loads or fewer left, its second one is
    read ahead, so the load that crosses into it finds it read (a read then would
    make that commit's claims stop at the barrier and wait)."""
    async with Broker(MemoryStorage(), config(segment_jobs=12)) as broker:
        q = broker.client()
        ids = await q.push_many([osqueue.NewJob(b"p", queue="deep") for _ in range(60)])
        await broker.segments.settled()
        cache, counters = broker.segments.cache, broker.segments.counters
        seen: list[str] = []
        crossed = 0
        while len(seen) < 40:
            refs = broker.document.segments.streams[("deep", 0)]
            if len(refs) > 1 and refs[0].remaining <= 2 * 3:  # two loads of 3 left
                assert refs[1].key in cache
                crossed += 1
            jobs = await q.claim("w", ("deep",), max_jobs=1, wait_s=5.0)
            seen += [job.id for job in jobs]
            await broker.segments.settled()
        assert seen == ids[:40]
        assert crossed >= 3
        assert counters.starved == 0


async def test_a_next_segment_the_cache_cannot_keep_beside_the_first_is_not_read_ahead() -> None:
    """With room for one object only, reading the second ahead would push out the
    first while its loads still need it (read again, and again): each object is
    read once, when it becomes the first."""
    store = MemoryStorage()
    async with Broker(store, config(segment_jobs=12)) as broker:
        q = broker.client()
        ids = await q.push_many([osqueue.NewJob(b"p", queue="deep") for _ in range(60)])
        await broker.segments.settled()
        sizes = [ref.size_bytes for ref in broker.document.segments.streams[("deep", 0)]]
    one = config(segment_jobs=12, segment_cache_bytes=max(sizes) * 3 // 2)
    async with Broker(store, one) as broker:
        q = broker.client()
        cache = broker.segments.cache
        seen: list[str] = []
        while len(seen) < len(ids):
            jobs = await q.claim("w", ("deep",), max_jobs=1, wait_s=5.0)
            seen += [job.id for job in jobs]
            await broker.segments.settled()
        assert seen == ids
        assert cache.reads == len(sizes)  # each object once
