"""Deep backlogs, proved against a plain queue (Hypothesis).

Two documents take the same random operations: ``plain`` never spills, while
``deep`` spills and loads at tiny thresholds, as often as the drawn steps say,
including spills and loads planned from a snapshot and committed steps later
(when they may have gone stale).  A claim on ``deep`` that starves on a
segment loads it and claims the rest, as the broker will.  After every step:

* every op got the same answer (claims: the same jobs in the same order, with
  the same tokens),
* the document's jobs plus the live jobs of the referenced segment objects are
  exactly the plain document's jobs (nothing lost, nothing twice, same states),
* counts, dedupe and key uniqueness agree, the size accounting is exact, and
  every referenced object exists.
"""

from __future__ import annotations

import dataclasses
from typing import Any

import msgspec
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from osqueue.errors import Conflict, OsqueueError
from osqueue.state import (
    Cancel,
    Claimed,
    ClaimOp,
    Complete,
    Counted,
    Document,
    Fail,
    Heartbeat,
    Load,
    MarkArchived,
    Op,
    Policy,
    PurgeDead,
    Push,
    Pushed,
    Release,
    Removed,
    Result,
    RetryDead,
    Spill,
    StoredJob,
    Stream,
    cancel_op,
    candidates,
    check_object,
    decode,
    decode_segment,
    encode,
    live_jobs,
    load_op,
    plan_loads,
    plan_spills,
    stats_of,
    transition,
)
from osqueue.state.dedupe_filter import ReadToConfirm

T0 = 1_800_000_000.0
#: the dedupe window outlasts every history: a spilled id is remembered as the
#: plain document remembers a queued one (beyond it, see test_segments.py)
BASE = Policy(heartbeat_timeout_s=20.0, backoff_base_s=1.0, backoff_cap_s=8.0, dedupe_window_s=1e7)
QUEUES = ("a", "b")

thresholds = st.builds(
    lambda seg, head, load, above: dataclasses.replace(
        BASE, segment_jobs=seg, head_jobs=head, load_jobs=load, spill_above_jobs=above
    ),
    st.integers(1, 4),
    st.integers(0, 2),
    st.integers(1, 3),
    st.integers(1, 3),
)

IDS = 30
push = st.tuples(
    st.just("push"),
    st.integers(0, IDS),
    st.sampled_from(QUEUES),
    st.sampled_from([0, 0, 1, -1]),
    st.sampled_from([0.0, 0.0, 0.0, 3.0]),
    st.sampled_from([None, None, None, "k0", "k1", "k2"]),
)
push_run = st.tuples(
    st.just("push_run"), st.integers(0, IDS), st.integers(2, 8), st.sampled_from(QUEUES)
)
machinery = st.tuples(
    st.sampled_from(["spill", "spill", "load", "load_first", "snapshot", "plan_load"])
)
# one_of picks a branch uniformly: a strategy listed twice is drawn twice as often
step = st.one_of(
    push,
    push_run,
    push_run,
    push_run,
    st.tuples(
        st.just("claim"), st.integers(1, 5), st.sampled_from([("a",), ("b",), QUEUES, ("b", "a")])
    ),
    st.tuples(st.sampled_from(["complete", "fail", "heartbeat", "release"]), st.integers(0, 50)),
    st.tuples(st.just("stale"), st.integers(0, 50)),
    st.tuples(st.just("cancel"), st.integers(0, IDS)),
    st.tuples(st.sampled_from(["archive", "retry_dead", "purge_dead"])),
    st.tuples(st.just("tick"), st.sampled_from([0.5, 3.0, 20.5, -2.0])),
    # the segment machinery, as the broker drives it
    machinery,
    machinery,
    machinery,
    st.tuples(st.sampled_from(["commit_spill", "commit_load"]), st.integers(0, 3)),
)

#: histories that start with a few runs of pushes, so most of them go deep
histories = st.builds(
    lambda seed, rest: [*seed, *rest],
    st.lists(push_run, min_size=1, max_size=3),
    st.lists(step, min_size=15, max_size=100),
)


class Twins:
    """The plain document, the deep one, and the segment objects the deep one's
    broker wrote."""

    def __init__(self, policy: Policy) -> None:
        self.policy = policy
        self.plain = Document.empty()
        self.deep = Document.empty()
        self.now = T0
        self.store: dict[str, list[StoredJob]] = {}
        self.written = 0
        self.pending_spills: list[Spill] = []
        self.pending_loads: list[Load] = []
        self.spills = self.loads = self.starved = 0

    # -- driving the deep document as the broker does --------------------------------

    def commit(self, ops: list[Op]) -> Any:
        t = transition(self.deep, ops, self.now, self.policy)
        self.deep = t.doc
        return t

    def spill(self, keep: bool = False) -> None:
        for plan in plan_spills(self.deep, self.policy):
            self.written += 1
            op, data = plan.build(f"u{self.written}")
            header, jobs = decode_segment(data, op.ref.key)  # the bytes round-trip
            check_object(op.ref, header)
            assert jobs == list(plan.jobs)
            self.store[op.ref.key] = jobs
            if keep:
                self.pending_spills.append(op)
                continue
            (res,) = self.commit([op]).results
            assert res == Counted(len(plan.jobs)), res  # a fresh snapshot always applies
            self.spills += 1

    def load(self, stream: Stream) -> None:
        ref = self.deep.segments.first(stream)
        assert ref is not None
        t = self.commit([load_op(ref, self.store[ref.key], self.policy.load_jobs)])
        assert isinstance(t.results[0], Counted), t.results[0]
        assert t.dropped_segments == ([] if self.deep.segments.find(ref.key) else [ref.key])
        self.loads += 1

    def load_due(self) -> None:
        for plan in plan_loads(self.deep, self.policy):
            if plan.due:
                self.load(plan.ref.stream)

    def plan_load(self) -> None:
        for plan in plan_loads(self.deep, self.policy, starved=list(self.deep.segments.streams)):
            ref = plan.ref
            self.pending_loads.append(load_op(ref, self.store[ref.key], self.policy.load_jobs))

    def commit_pending(self, pending: list[Any], i: int) -> None:
        if not pending:
            return
        op = pending.pop(i % len(pending))
        (res,) = self.commit([op]).results
        assert isinstance(res, Counted | Conflict), res

    def claim(self, op: ClaimOp) -> Result:
        got: list[StoredJob] = []
        while True:
            left = op.max_jobs - len(got)
            t = self.commit([ClaimOp(op.worker, op.queues, left)])
            (res,) = t.results
            if not isinstance(res, Claimed):
                return res
            got += res.jobs
            if not t.starved or len(got) == op.max_jobs:
                return Claimed(tuple(got))
            self.starved += 1
            for stream in sorted(t.starved):
                self.load(stream)

    def push(self, op: Push) -> Result:
        """A push, with a filter's maybe confirmed by reading, as the broker does."""
        for _ in range(4):
            (res,) = self.commit([op]).results
            if not isinstance(res, ReadToConfirm):
                return res
            for key in res.keys:
                ref = self.deep.segments.find(key)
                assert ref is not None
                if any(job.id == op.id for job in self.store[key][ref.loaded :]):
                    return Pushed(op.id, False)
            op = msgspec.structs.replace(op, absent_from=(*op.absent_from, *res.keys))
        raise AssertionError("a push asked to confirm again and again")

    def cancel(self, job_id: str) -> Result:
        if job_id in self.deep.jobs:
            return self.commit([Cancel(job_id)]).results[0]
        for ref in candidates(self.deep, job_id):
            op = cancel_op(ref, self.store[ref.key], job_id)
            if op is not None:
                return self.commit([op]).results[0]
        return self.commit([Cancel(job_id)]).results[0]

    # -- one step on both --------------------------------------------------------------

    def op_for(self, s: tuple[Any, ...]) -> Op | None:
        kind = s[0]
        if kind == "push":
            _, n, q, prio, delay, key = s
            return Push(
                id=f"j{n}", payload=b"x" * (n % 3), queue=q, priority=prio, delay_s=delay, key=key
            )
        if kind == "claim":
            return ClaimOp("w", s[2], max_jobs=s[1])
        if kind == "cancel":
            return Cancel(f"j{s[1]}")
        if kind == "archive":  # every done job (versions differ: see same_answer)
            return MarkArchived(_done_versions(self.plain))
        if kind == "retry_dead":
            return RetryDead()
        if kind == "purge_dead":
            return PurgeDead()
        claimed = sorted(j.id for j in self.plain.jobs.values() if j.status == "claimed")
        if not claimed:
            return None
        job = self.plain.jobs[claimed[s[1] % len(claimed)]]
        assert job.claim is not None
        if kind == "stale":
            return Complete(job.id, job.claim.token + 1)
        ops = {"complete": Complete, "heartbeat": Heartbeat, "release": Release}
        if kind == "fail":
            return Fail(job.id, job.claim.token, "boom")
        return ops[kind](job.id, job.claim.token)  # type: ignore[no-any-return]

    def step(self, s: tuple[Any, ...]) -> None:
        kind = s[0]
        machinery = {
            "spill": lambda: self.spill(),
            "snapshot": lambda: self.spill(keep=True),
            "load": self.load_due,
            "load_first": lambda: [self.load(st) for st in sorted(self.deep.segments.streams)],
            "plan_load": self.plan_load,
            "commit_spill": lambda: self.commit_pending(self.pending_spills, s[-1]),
            "commit_load": lambda: self.commit_pending(self.pending_loads, s[-1]),
        }
        if kind in machinery:
            machinery[kind]()
            return
        if kind == "push_run":  # several pushes in a row, so streams grow deep enough
            _, first, n, q = s
            for i in range(first, first + n):
                self.step(("push", i % (IDS + 1), q, i // 8 % 2, 0.0, f"k{i}" if i % 5 else None))
            return
        if kind == "tick":
            self.now += s[1]
            self.plain = transition(self.plain, [], self.now, BASE).doc
            self.commit([])
            return
        op = self.op_for(s)
        if op is None:
            return
        (expected,) = transition_plain(self, op)
        if isinstance(op, ClaimOp):
            got = self.claim(op)
        elif isinstance(op, Cancel):
            got = self.cancel(op.job_id)
        elif isinstance(op, Push):
            got = self.push(op)
        elif isinstance(op, MarkArchived):
            (got,) = self.commit([MarkArchived(_done_versions(self.deep))]).results
        else:
            (got,) = self.commit([op]).results
        same_answer(op, expected, got)


def _done_versions(doc: Document) -> tuple[int, ...]:
    return tuple(sorted({j.done_version for j in doc.jobs.values() if j.done_version}))


def _same(job: StoredJob) -> StoredJob:
    """A job as both documents must agree on it: the deep one commits more often,
    so the version a job was completed in differs."""
    return msgspec.structs.replace(job, done_version=0) if job.done_version else job


def transition_plain(tw: Twins, op: Op) -> list[Result]:
    t = transition(tw.plain, [op], tw.now, BASE)
    tw.plain = t.doc
    return t.results


def same_answer(op: Op, expected: Result, got: Result) -> None:
    if isinstance(expected, OsqueueError):
        assert type(got) is type(expected), (op, expected, got)
        assert getattr(got, "existing_id", None) == getattr(expected, "existing_id", None)
    elif isinstance(op, Cancel):  # a job cancelled in a segment is not in the answer
        assert isinstance(got, Removed), (op, got)
        assert got.jobs in ((), expected.jobs)  # type: ignore[union-attr]
    elif isinstance(expected, Removed):
        assert isinstance(got, Removed)
        assert [_same(j) for j in got.jobs] == [_same(j) for j in expected.jobs]
    else:
        assert got == expected, (op, expected, got)


def same_queue(tw: Twins) -> None:
    plain, deep = tw.plain, tw.deep
    spilled: dict[str, StoredJob] = {}
    for ref in deep.segments:
        assert ref.key in tw.store, "a referenced segment object is missing"
        live = live_jobs(ref, tw.store[ref.key])
        assert len(live) == ref.remaining
        for job in live:
            assert job.id not in spilled, f"{job.id} is in two segments"
            assert job.id not in deep.jobs, f"{job.id} is in a segment and the document"
            spilled[job.id] = job
    jobs = {**deep.jobs, **spilled}
    assert {i: _same(j) for i, j in jobs.items()} == {i: _same(j) for i, j in plain.jobs.items()}
    assert (deep.next_seq, deep.next_token, deep.stats) == (
        plain.next_seq,
        plain.next_token,
        plain.stats,
    )
    held = {job.key: job.id for job in spilled.values() if job.key is not None}
    assert deep.segments.keys == held
    # a spilled dedupe job's id is answered by its reference's filter (and object)
    filtered = {
        job.id
        for ref in deep.segments
        if ref.id_filter
        for job in tw.store[ref.key][ref.loaded :]
        if job.dedupe
    }
    assert set(plain.recent) <= set(deep.recent) | set(spilled) | filtered
    deep_stats, plain_stats = stats_of(deep, tw.now), stats_of(plain, tw.now)
    for q, counts in plain_stats.queues.items():
        mine = deep_stats.queues[q]
        assert (mine.depth, mine.claimed, mine.dead) == (counts.depth, counts.claimed, counts.dead)
        assert mine.spilled == sum(1 for j in spilled.values() if j.queue == q)
    assert deep.size_bytes() == len(encode(deep))


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(thresholds, histories)
def test_a_deep_queue_answers_as_a_plain_one(policy: Policy, steps: list[tuple[Any, ...]]) -> None:
    tw = Twins(policy)
    for s in steps:
        tw.step(s)
        same_queue(tw)
    data = encode(tw.deep)
    assert decode(data) == tw.deep
    assert encode(decode(data)) == data


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(thresholds, histories)
def test_spilling_after_every_step_changes_no_answer(
    policy: Policy, steps: list[tuple[Any, ...]]
) -> None:
    """The broker at its most eager: spill and load due streams after every commit."""
    tw = Twins(policy)
    for s in steps:
        tw.step(s)
        tw.spill()
        tw.load_due()
        same_queue(tw)


def test_the_machinery_is_exercised() -> None:
    """A fixed history, so a change that stops spills or loads cannot pass unseen."""
    tw = Twins(
        dataclasses.replace(BASE, segment_jobs=2, head_jobs=1, load_jobs=1, spill_above_jobs=2)
    )
    for n in range(12):
        tw.step(("push", n, "a", n % 2, 0.0, f"k{n}" if n % 3 == 0 else None))
    tw.step(("spill",))
    tw.step(("snapshot",))
    tw.step(("cancel", 5))
    for _ in range(6):
        tw.step(("claim", 2, QUEUES))
        same_queue(tw)
    tw.step(("commit_spill", 0))
    same_queue(tw)
    assert tw.spills >= 2
    assert tw.loads >= 2
    assert tw.starved >= 1
