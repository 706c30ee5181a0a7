"""Properties of the transitions over random operation sequences (Hypothesis)."""

from __future__ import annotations

from hypothesis import given, settings
from hypothesis import strategies as st

from osqueue.errors import LeaseLost
from osqueue.state import (
    Cancel,
    Claimed,
    ClaimOp,
    Complete,
    Document,
    Fail,
    Heartbeat,
    MarkArchived,
    Ok,
    Op,
    Policy,
    Push,
    Release,
    decode,
    encode,
    transition,
)

T0 = 1_800_000_000.0
POLICY = Policy(heartbeat_timeout_s=20.0, backoff_base_s=1.0, backoff_cap_s=8.0)
QUEUES = ("a", "b")

step = st.one_of(
    st.tuples(
        st.just("push"),
        st.integers(0, 40),
        st.sampled_from(QUEUES),
        st.integers(-2, 2),
        st.sampled_from([0.0, 0.0, 3.0]),
    ),
    st.tuples(st.just("claim"), st.integers(1, 4), st.sampled_from([("a",), ("b",), QUEUES])),
    st.tuples(st.just("complete"), st.integers(0, 50), st.booleans()),
    st.tuples(st.just("fail"), st.integers(0, 50), st.booleans()),
    st.tuples(st.just("heartbeat"), st.integers(0, 50), st.booleans()),
    st.tuples(st.just("release"), st.integers(0, 50), st.booleans()),
    st.tuples(st.just("cancel"), st.integers(0, 40)),
    st.tuples(
        st.just("archive"),
    ),
    # the broker's clock may also step back (an NTP correction)
    st.tuples(st.just("tick"), st.sampled_from([0.5, 5.0, 20.5, 25.0, -10.0])),
)


class Model:
    """What the test knows from the outside: every token issued, and to which job."""

    def __init__(self) -> None:
        self.doc = Document.empty()
        self.now = T0
        self.tokens: dict[int, str] = {}
        self.live_tokens: list[tuple[str, int]] = []
        self.stale: list[tuple[str, int]] = []
        self.completed: set[str] = set()
        self.versions: list[int] = [0]

    def pick(self, i: int, stale: bool) -> tuple[str, int] | None:
        pool = self.stale if stale else self.live_tokens
        return pool[i % len(pool)] if pool else None

    def run(self, ops: list[Op]) -> list[object]:
        before = self.doc
        t = transition(before, ops, self.now, POLICY)
        self.doc = t.doc
        self.versions.append(t.doc.version)
        return list(t.results)

    def op_for(self, s: tuple[object, ...]) -> Op | None:
        kind = s[0]
        if kind == "push":
            _, n, q, prio, delay = s
            return Push(id=f"j{n}", payload=b"x", queue=q, priority=prio, delay_s=delay)  # type: ignore[arg-type]
        if kind == "claim":
            return ClaimOp("w", s[2], max_jobs=s[1])  # type: ignore[arg-type]
        if kind == "cancel":
            return Cancel(f"j{s[1]}")
        if kind == "archive":
            return MarkArchived(
                tuple(j.done_version for j in self.doc.jobs.values() if j.done_version)
            )
        held = self.pick(s[1], s[2])  # type: ignore[arg-type]
        if held is None:
            return None
        job_id, token = held
        ops = {"complete": Complete, "heartbeat": Heartbeat, "release": Release}
        if kind == "fail":
            return Fail(job_id, token, "boom")
        return ops[kind](job_id, token)  # type: ignore[index,no-any-return]


@settings(max_examples=150, deadline=None)
@given(st.lists(step, min_size=1, max_size=60))
def test_random_histories_keep_the_invariants(steps: list[tuple[object, ...]]) -> None:
    m = Model()
    for s in steps:
        if s[0] == "tick":
            m.now += s[1]  # type: ignore[operator]
            m.run([])
        else:
            op = m.op_for(s)
            if op is None:
                continue
            stale_before = set(m.stale)
            prev = {j.id: j for j in m.doc.jobs.values()}
            (res,) = m.run([op])
            check_op(m, op, res, stale_before, prev)
        refresh_tokens(m)
        check_document(m)
    # version grows by exactly one per write
    assert m.versions == list(range(len(m.versions)))
    # the encoding round-trips exactly
    data = encode(m.doc)
    assert encode(decode(data)) == data
    assert decode(data) == m.doc


def check_op(m: Model, op: Op, res: object, stale_before: set[tuple[str, int]], prev: dict) -> None:  # type: ignore[type-arg]
    if isinstance(op, ClaimOp) and isinstance(res, Claimed):
        for job in res.jobs:
            assert job.claim is not None
            assert job.claim.token not in m.tokens, "a token was reused"
            m.tokens[job.claim.token] = job.id
        keys = [(j.priority, j.seq) for j in res.jobs]
        assert keys == sorted(keys), "claim order is priority, then FIFO"
        waiting = [
            (j.priority, j.seq)
            for j in prev.values()
            if j.status == "queued"
            and j.queue in op.queues
            and (j.run_at is None or j.run_at.timestamp() <= m.now)
        ]
        if res.jobs and waiting:
            assert keys[0] == min(waiting)
    if isinstance(op, Complete | Heartbeat | Fail | Release):
        if (op.job_id, op.token) in stale_before:
            assert isinstance(res, LeaseLost), "a stale token was accepted"
        if isinstance(op, Complete) and isinstance(res, Ok):
            assert m.doc.jobs.get(op.job_id) is None or m.doc.jobs[op.job_id].status == "done"
            m.completed.add(op.job_id)


def refresh_tokens(m: Model) -> None:
    live = []
    for token, job_id in m.tokens.items():
        job = m.doc.jobs.get(job_id)
        held = job is not None and job.claim is not None and job.claim.token == token
        if held and job is not None and job.status == "claimed":
            live.append((job_id, token))
            continue
        if (job_id, token) not in m.stale and (job is None or job.status != "done"):
            m.stale.append((job_id, token))
    m.live_tokens = live


def check_document(m: Model) -> None:
    doc = m.doc
    index = doc.index
    for job in doc.jobs.values():
        assert job.status in ("queued", "claimed", "done", "dead")
        assert (job.status == "claimed") == (job.id in index.claimed)
        assert (job.status == "done") == (job.id in index.done)
        if job.id in m.completed:
            assert job.status == "done", "a completed job came back"
    counted = sum(index.counts.values())
    assert counted == len(doc.jobs)
    # The sweep left no expired claim, and its shortcut's bound holds.
    beats = [j.claim.heartbeat_at for j in doc.jobs.values() if j.status == "claimed" and j.claim]
    for beat in beats:
        assert beat.timestamp() + POLICY.heartbeat_timeout_s >= m.now, "an expired claim stayed"
    if beats and index.heartbeat_floor is not None:
        assert index.heartbeat_floor <= min(beats)
    for job_id in m.completed:
        job = doc.jobs.get(job_id)
        assert job is None or job.status == "done"
