"""What a commit skips when the queue does not use a capability, and that the
capability still works the first time it is used (issue 24, item 6): the
header's cached parts, the owner the lease hands again, the history's minute
check, the segment manager's and the claim demand's shortcuts, the intake's
urgent flag."""

from __future__ import annotations

import asyncio
import random
from datetime import UTC, datetime

import msgspec
import pytest
from segment_helpers import config

from osqueue.broker import Broker, BrokerConfig
from osqueue.broker.cold.demand import ClaimDemand, _power_of_two
from osqueue.broker.core.intake import Intake
from osqueue.broker.core.lifecycle import Lifecycle
from osqueue.broker.core.retry import StorageRetry
from osqueue.broker.lease.hold import Lease
from osqueue.broker.observe.counters import BrokerCounters
from osqueue.clock import ManualClock
from osqueue.state import (
    ClaimOp,
    Document,
    Load,
    MarkArchived,
    Policy,
    Push,
    SetAside,
    decode,
    encode,
    new_queue_id,
    to_datetime,
    transition,
)
from osqueue.state.codec import _FOLD_BYTES
from osqueue.state.history import HistorySample
from osqueue.state.model import (
    FORMAT,
    BrokerInfo,
    BrokerPerf,
    Header,
    QueueTotals,
    StoredSettings,
    WorkerSeen,
)
from osqueue.storage import MemoryStorage

T0 = 1_800_000_000.0  # a whole minute


def _header_of(doc: Document) -> bytes:
    """The header as msgspec writes the :class:`Header` struct (the reference)."""
    return msgspec.json.encode(
        Header(
            format=FORMAT,
            version=doc.version,
            broker=doc.broker,
            next_token=doc.next_token,
            next_seq=doc.next_seq,
            archived_through=doc.archived_through,
            stats=doc.stats,
            queue_id=doc.queue_id,
            history=doc.history,
            queue_settings=doc.queue_settings,
            dependencies_at=doc.dependencies_at,
            queue_totals=doc.queue_totals,
        )
    )


def _owner(until: float, workers: tuple[WorkerSeen, ...] = ()) -> BrokerInfo:
    return BrokerInfo(
        id="b-1",
        address="10.0.0.1:7070",
        epoch=2,
        lease_until=to_datetime(until),
        lease_s=10.0,
        heartbeat_timeout_s=30.0,
        perf=BrokerPerf(window_s=60.0, commits=3, ops=9, p50_ms=0.5, p99_ms=1.0),
        workers=workers,
    )


def _sample(minute: float, pushed: int) -> HistorySample:
    return HistorySample(
        at=datetime.fromtimestamp(minute, UTC),
        pushed=pushed,
        completed=0,
        failed=0,
        dead=0,
        depth={"q": pushed},
    )


@pytest.mark.parametrize("full", [False, True])
def test_the_header_is_byte_for_byte_the_header_struct(full: bool) -> None:
    doc = Document()
    assert doc.header_bytes() == _header_of(doc)  # broker null, every default omitted
    if full:
        doc.queue_id = new_queue_id()
        doc.broker = _owner(T0 + 10)
        doc.history = (_sample(T0 - 60, 1), _sample(T0, 2))
        doc.set_queue_settings("q", StoredSettings(paused=True))
        doc.note_dependencies(to_datetime(T0))
        doc.queue_totals = {"q": QueueTotals(pushed=3, completed=2)}
    doc.version, doc.next_token, doc.next_seq, doc.archived_through = 7, 11, 13, 5
    assert doc.header_bytes() == _header_of(doc)
    assert decode(encode(doc)) == doc
    assert len(encode(doc)) == doc.size_bytes()


@pytest.mark.parametrize(
    ("jobs", "tombstones"), [(0, 0), (1, 0), (2, 0), (300, 0), (3, 1200), (300, 6000)]
)
def test_the_jobs_are_joined_once_and_the_document_is_whole(jobs: int, tombstones: int) -> None:
    """A document whose jobs outweigh the rest, and pass ``_FOLD_BYTES``, is joined
    with its header folded into the first job (one copy of the jobs); any other
    is joined part by part.  Both give the whole document: every job, in order, and the
    length the push cap counts."""
    doc = Document(queue_id=new_queue_id())
    doc.broker = _owner(T0 + 10)
    for i in range(tombstones):  # ids of jobs long gone: more bytes than the jobs
        doc.add_tombstone(f"01GONE{i:020d}", to_datetime(T0))
    pushes = [Push(f"j{i}", b"%d" % i, "q", i % 3, 0.0, None, 5) for i in range(jobs)]
    transition(doc, pushes, T0, in_place=True)
    data = encode(doc)
    assert decode(data) == doc
    assert len(data) == doc.size_bytes()
    listed = msgspec.json.decode(data)["jobs"]
    assert [job["id"] for job in listed] == list(doc.jobs)
    folded = doc.jobs_bytes >= _FOLD_BYTES and doc.jobs_bytes > len(data) - doc.jobs_bytes
    assert folded == (jobs == 300 and not tombstones)  # (each path is taken)


def test_the_header_follows_a_new_broker_and_a_new_history() -> None:
    doc = Document(queue_id=new_queue_id())
    doc.broker = _owner(T0 + 10)
    doc.history = (_sample(T0, 1),)
    first = doc.header_bytes()
    assert doc.header_bytes() == first  # the cached parts, unchanged
    seen = WorkerSeen(worker="w-1", seen_at=to_datetime(T0), queues=("q",))
    doc.broker = _owner(T0 + 10, (seen,))  # an equal lease, one more worker
    doc.history = (_sample(T0, 1), _sample(T0 + 60, 4))
    assert doc.header_bytes() == _header_of(doc) != first
    assert b'"w-1"' in doc.header_bytes()
    copied = doc.copy()
    copied.broker = _owner(T0 + 20)
    assert copied.header_bytes() == _header_of(copied)
    assert doc.header_bytes() == _header_of(doc)  # the copy's change is not the original's


def test_a_commit_in_a_new_minute_samples_the_history_the_last_commit_kept() -> None:
    doc = Document()
    t = transition(doc, [], T0 + 1, in_place=True)
    kept = t.doc.history
    assert [s.at.timestamp() for s in kept] == [T0]
    for now in (T0 + 2, T0 + 59.999):  # the same minute: the same tuple, unsampled
        assert transition(doc, [], now, in_place=True).doc.history is kept
    later = transition(doc, [], T0 + 60, in_place=True).doc.history
    assert [s.at.timestamp() for s in later] == [T0, T0 + 60]
    # a clock that steps back samples nothing
    assert transition(doc, [], T0 + 30, in_place=True).doc.history is later


def _reference_demand(configured: Policy, claims: list[int]) -> list[int]:
    """The head size after each commit, as the demand was computed before its shortcut."""
    demand, head, out = 0.0, configured.head_jobs, []
    for claimed in claims:
        demand = max(float(claimed), demand * 0.9)
        head = max(configured.head_jobs, 2 * _power_of_two(int(demand)))
        out.append(head)
    return out


@pytest.mark.parametrize("seed", range(20))
def test_the_claim_demand_shortcut_changes_no_size(seed: int) -> None:
    rng = random.Random(seed)
    configured = Policy(head_jobs=rng.choice([1, 2, 3, 100, 500, 512]), spill_above_jobs=1_000)
    claims = [
        rng.choice([0, 1, 2, rng.randrange(0, 300), rng.randrange(0, 5_000)]) for _ in range(400)
    ]
    demand = ClaimDemand(configured)
    heads = []
    for claimed in claims:
        demand.after_commit(claimed)
        heads.append(demand.policy.head_jobs)
    assert heads == _reference_demand(configured, claims)


def _lease(clock: ManualClock, counters: BrokerCounters) -> Lease:
    cfg = BrokerConfig(lease_s=10.0, address="10.0.0.1:7070")
    retry = StorageRetry(cfg, clock)
    return Lease(MemoryStorage(), cfg, clock, broker_id="b-1", counters=counters, retry=retry)


def test_the_lease_hands_the_same_owner_until_something_in_it_changes() -> None:
    clock = ManualClock(start=T0)
    counters = BrokerCounters()
    lease = _lease(clock, counters)
    first = lease.owner(T0, closing=False)
    assert lease.owner(T0 + 0.0002, closing=False) is first  # the same millisecond
    renewed = lease.owner(T0 + 0.002, closing=False)
    assert renewed is not first
    assert renewed.lease_until == to_datetime(T0 + 10.002)
    counters.workers.claimed("w-1", ("q",), T0 + 0.002)  # a new worker: shown at once
    with_worker = lease.owner(T0 + 0.002, closing=False)
    assert [w.worker for w in with_worker.workers] == ["w-1"]
    closing = lease.owner(T0 + 0.002, closing=True)
    assert (closing.address, closing.lease_s, closing.workers) == (None, 0.0, ())
    assert lease.owner(T0 + 0.002, closing=False, epoch=9).epoch == 9


def test_a_commit_within_a_millisecond_of_the_last_names_the_same_owner() -> None:
    clock = ManualClock(start=T0)
    counters = BrokerCounters()
    lease = _lease(clock, counters)
    first = lease.owner(T0, closing=False, mono=5.0)
    # the next millisecond's commits: the same owner, its lease at most 1 ms short
    assert lease.owner(T0 + 0.0009, closing=False, mono=5.0009) is first
    counters.workers.claimed("w-1", ("q",), T0 + 0.0009)  # a new worker: shown at once
    with_worker = lease.owner(T0 + 0.0009, closing=False, mono=5.0009)
    assert [w.worker for w in with_worker.workers] == ["w-1"]
    assert lease.owner(T0 + 0.001, closing=False, mono=5.001) is with_worker
    later = lease.owner(T0 + 0.003, closing=False, mono=5.003)  # a millisecond on
    assert later.lease_until == to_datetime(T0 + 10.003)
    # a closing commit and a new epoch are never the reused one
    closing = lease.owner(T0 + 0.0031, closing=True, mono=5.0031)
    assert closing.lease_s == 0.0
    assert lease.owner(T0 + 0.0032, closing=False, mono=5.0032).lease_s == 10.0
    lease.epoch += 1
    assert lease.owner(T0 + 0.0033, closing=False, mono=5.0033).epoch == lease.epoch


def test_only_the_broker_s_segment_ops_make_the_intake_urgent() -> None:
    intake = Intake(BrokerConfig(), Lifecycle.__new__(Lifecycle), BrokerCounters())
    intake.mark_archived(3)
    assert intake.internal
    assert not intake.urgent
    load = Load("q", 0, "segments/x", 0, ())
    intake.add_internal(load)
    assert intake.urgent
    assert intake.holds(load)
    taken = intake.take_internal()
    assert taken == [MarkArchived((3,)), load]
    assert not intake.urgent
    assert not intake.internal


async def test_a_queue_without_segments_spills_once_its_backlog_passes_the_threshold() -> None:
    clock = ManualClock(start=T0)
    async with Broker(MemoryStorage(), config(), clock=clock) as broker:
        q = broker.client()
        for i in range(3):  # below spill_above_jobs (3 ready behind the head of 2)
            await q.push(b"p", id=f"j{i:03d}")
        await broker.segments.settled()
        assert not broker.document.segments.streams
        for i in range(3, 12):
            await q.push(b"p", id=f"j{i:03d}")
        await broker.segments.settled()
        await q.claim("w", ("default",), max_jobs=1)  # a commit that takes the spill
        await broker.segments.settled()
        assert broker.document.segments.streams
        got = []
        while len(got) < 11:
            got += await q.claim("w", ("default",), max_jobs=5, wait_s=5.0)
        assert sorted(j.id for j in got) == [f"j{i:03d}" for i in range(1, 12)]


def test_push_and_claim_counts_reach_the_transition() -> None:
    doc = Document()
    ops = [Push(f"j{i}", b"p", "q", 0, 0.0, None, 5) for i in range(3)]
    t = transition(doc, ops, T0, in_place=True)
    assert len(t.claimed_jobs) == 0
    assert t.doc.stats.pushed == 3
    t = transition(doc, [ClaimOp("w", ("q",), 2), ClaimOp("w", ("q",), 5)], T0, in_place=True)
    assert len(t.claimed_jobs) == 3
    assert (t.doc.stats.pushed, t.doc.stats.completed) == (3, 0)


async def test_the_first_result_and_the_first_dependency_of_a_queue_are_honoured() -> None:
    clock = ManualClock(start=T0)
    async with Broker(MemoryStorage(), BrokerConfig(lease_s=600.0), clock=clock) as broker:
        q = broker.client()
        for name in ("plain", "valued"):
            await q.push(name.encode(), queue="q", id=name)
        plain, valued = await q.claim("w", ("q",), max_jobs=2)
        await q.complete(plain)  # no result, no TTL, no dependency: no record
        assert not broker.document.finished.entries
        await q.complete(valued, result={"n": 1})  # the queue's first result: kept
        kept = await q.result("valued")
        assert (kept.status, kept.value) == ("done", {"n": 1})
        parent = await q.push(b"parent", queue="q", id="parent")
        await q.push(b"child", queue="q", id="child", after=(parent,))
        (job,) = await q.claim("w", ("q",), max_jobs=5)
        assert job.id == "parent"  # the child waits for it
        await q.complete(job)
        (child,) = await q.claim("w", ("q",))
        assert child.id == "child"


async def test_an_urgent_op_of_the_broker_s_own_sent_while_the_loop_yields_is_committed() -> None:
    """The commit loop yields once after a commit before it parks; a segment op
    added then calls no wake-up (nothing is parked yet), so the loop must see it
    when it resumes, not sleep until the lease renewal (a manual clock: never)."""
    clock = ManualClock(start=T0)
    async with Broker(MemoryStorage(), BrokerConfig(lease_s=3600.0), clock=clock) as broker:
        await broker.client().push(b"p", queue="q")
        commits = broker.commits
        broker._intake.add_internal(SetAside("segments/none", "test"))  # the loop yields now
        for _ in range(20):
            await asyncio.sleep(0)
        assert broker.commits == commits + 1
        assert not broker._intake.internal


@pytest.mark.parametrize("seed", range(4))
def test_a_time_rounds_to_its_nearest_millisecond_as_the_decimal_rounding_does(seed: int) -> None:
    # to_datetime rounds by an integer round(ts * 1000) (no decimal formatting, once a
    # commit); away from a half millisecond it gives what round(ts, 3) gave.
    rng = random.Random(seed)
    checked = 0
    for _ in range(20_000):
        ts = rng.uniform(0.0, 4_000_000_000.0)
        if abs((ts * 1000) % 1 - 0.5) < 1e-3:  # within a microsecond of a tie: either is right
            continue
        got = to_datetime(ts)
        assert got == datetime.fromtimestamp(round(ts, 3), UTC), ts
        assert got.microsecond % 1000 == 0, ts
        assert abs(got.timestamp() - ts) <= 0.0005 + 1e-6, ts
        checked += 1
    assert checked > 19_000
    assert to_datetime(T0 + 0.0004) == to_datetime(T0)
    assert to_datetime(T0 + 0.0006) == to_datetime(T0 + 0.001)
