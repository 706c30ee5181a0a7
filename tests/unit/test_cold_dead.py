"""Dead letters out of the document in the pure state layer: SpillDead, SwapDead
(retry and purge of a dead segment, whole or filtered), stale ops, counts and
the document's encoding."""

from __future__ import annotations

from functools import partial

import msgspec
import pytest

from osqueue.errors import Conflict, CorruptDocument, InvalidInput
from osqueue.inspect.status import status_of
from osqueue.state import (
    Claimed,
    ClaimOp,
    Counted,
    Document,
    Fail,
    Policy,
    Push,
    RetryDead,
    Transition,
    decode,
    decode_segment,
    encode,
    load_op,
    stats_of,
    transition,
)
from osqueue.state.cold_dead import DeadFilter, key_holder, plan_dead_spills, plan_swap, read_dead
from osqueue.state.dead_letters import DeadRef
from osqueue.state.ops import Ok, Readmit, SetAside, SpillDead, SwapDead

T0 = 1_800_000_000.0
P = Policy(
    segment_jobs=3,
    head_jobs=2,
    load_jobs=10,
    spill_above_jobs=None,
    dead_keep_jobs=2,
    dead_spill_jobs=2,
)


class Dead:
    """A document with dead jobs, and the objects its (imaginary) broker wrote."""

    def __init__(self, n: int, queue: str = "q") -> None:
        self.doc = Document.empty()
        self.objects: dict[str, bytes] = {}
        self.n = 0
        self.now = T0
        pushes = [Push(id=f"j{i}", payload=b"p", queue=queue, max_attempts=1) for i in range(n)]
        self.run(*pushes)
        for i in range(n):  # one death per second: they die in push order
            claimed = self.run(ClaimOp("w", (queue,), 1)).results[0]
            assert isinstance(claimed, Claimed)
            job = claimed.jobs[0]
            assert job.claim is not None
            self.run(Fail(job.id, job.claim.token, error=f"boom {i % 2}"))

    def run(self, *ops: object) -> Transition:
        self.now += 1
        t = transition(self.doc, list(ops), self.now, P)  # type: ignore[arg-type]
        self.doc = t.doc
        return t

    def unique(self) -> str:
        self.n += 1
        return f"u{self.n}"

    def spill(self) -> list[SpillDead]:
        ops = []
        for plan in plan_dead_spills(self.doc, P):
            op, data = plan.build(self.unique())
            self.objects[op.ref.key] = data
            assert self.run(op).results == [Counted(len(plan.jobs))]
            ops.append(op)
        return ops

    def swap(self, ref: DeadRef, *, retry: bool, f: DeadFilter | None = None) -> SwapDead:
        jobs = read_dead(ref, self.objects[ref.key])
        swap = plan_swap(
            ref,
            jobs,
            None if f is None else f.admits,
            retry=retry,
            first_seq=self.doc.next_seq,
            unique=self.unique,
        )
        assert swap is not None
        for key, data in swap.objects:
            self.objects[key] = data
        return swap.op


def test_the_oldest_deaths_spill_beyond_the_newest_kept() -> None:
    d = Dead(7)
    assert [len(op.jobs) for op in d.spill()] == [3, 2]
    kept = sorted(j.id for j in d.doc.jobs.values() if j.status == "dead")
    assert kept == ["j5", "j6"]  # the newest two deaths stay in the document
    refs = list(d.doc.dead)
    assert [r.count for r in refs] == [3, 2]
    assert refs[0].died_to <= refs[1].died_from  # cut in the order they died
    assert [j.id for j in read_dead(refs[0], d.objects[refs[0].key])] == ["j0", "j1", "j2"]
    assert stats_of(d.doc, d.now).dead == 7
    assert stats_of(d.doc, d.now).queues["q"].dead == 7
    assert decode(encode(d.doc)) == d.doc  # the references survive a round trip
    assert len(encode(d.doc)) == d.doc.size_bytes()
    assert plan_dead_spills(d.doc, P) == []


def test_a_stale_dead_spill_fails_alone() -> None:
    d = Dead(5)
    plan = plan_dead_spills(d.doc, P)[0]
    op, _ = plan.build("u1")
    t = d.run(RetryDead((plan.jobs[0].id,)), op)
    assert t.results[0] == Counted(1)
    assert isinstance(t.results[1], Conflict)
    assert not d.doc.dead
    assert sum(1 for j in d.doc.jobs.values() if j.status == "dead") == 4


def test_retrying_a_dead_segment_applies_exactly_once() -> None:
    d = Dead(5)
    d.spill()
    ref = next(iter(d.doc.dead))
    op = d.swap(ref, retry=True)
    assert d.run(op).results == [Counted(3)]
    again = d.run(op).results[0]  # a retried submit after a lost answer
    assert isinstance(again, Conflict)
    assert not d.doc.dead
    assert stats_of(d.doc, d.now).queues["q"].depth == 3
    # the retried jobs come back through the ready segment, once each
    seg = next(iter(d.doc.segments))
    jobs = decode_segment(d.objects[seg.key])[1]
    d.run(load_op(seg, jobs, 10))
    claimed = d.run(ClaimOp("w", ("q",), 10)).results[0]
    assert isinstance(claimed, Claimed)
    assert sorted(j.id for j in claimed.jobs) == ["j0", "j1", "j2"]
    assert all(j.attempts == 1 and j.last_error is not None for j in claimed.jobs)


def test_a_retry_whose_seqs_went_stale_fails_alone() -> None:
    d = Dead(5)
    d.spill()
    ref = next(iter(d.doc.dead))
    op = d.swap(ref, retry=True)
    t = d.run(Push(id="late", payload=b"x", queue="q"), op)  # takes the reserved seq
    assert isinstance(t.results[1], Conflict)
    assert d.doc.dead.find(ref.key) == ref


def test_purging_a_dead_segment_drops_its_reference() -> None:
    d = Dead(5)
    d.spill()
    ref = next(iter(d.doc.dead))
    t = d.run(d.swap(ref, retry=False))
    assert t.results == [Counted(3)]
    assert t.dropped_segments == [ref.key]
    assert not d.doc.dead.holds(ref.key)
    assert stats_of(d.doc, d.now).dead == 2
    assert not d.doc.segments


def test_a_filtered_retry_rewrites_the_segment_minus_the_matched_jobs() -> None:
    d = Dead(5)
    d.spill()
    ref = next(iter(d.doc.dead))
    op = d.swap(ref, retry=True, f=DeadFilter(error="boom 1"))
    assert d.run(op).results == [Counted(1)]
    assert op.keep is not None
    assert [j.id for j in read_dead(op.keep, d.objects[op.keep.key])] == ["j0", "j2"]
    assert d.doc.dead.count("q") == 2
    assert stats_of(d.doc, d.now).queues["q"].depth == 1


def test_a_malformed_swap_names_its_field() -> None:
    d = Dead(5)
    d.spill()
    ref = next(iter(d.doc.dead))
    op = d.swap(ref, retry=False, f=DeadFilter(ids=frozenset({"j1"})))
    assert op.keep is not None
    bad = SwapDead(ref, DeadRef(**{**_fields(op.keep), "key": "segments/x=1.jsonl"}))
    result = d.run(bad).results[0]
    assert isinstance(result, InvalidInput)
    assert result.field == "keep.key"
    assert d.doc.dead.find(ref.key) == ref


def _fields(ref: DeadRef) -> dict[str, object]:
    return {name: getattr(ref, name) for name in ref.__struct_fields__}


def _keyed_dead() -> Dead:
    """j0..j4 pushed with keys k0..k4, all dead; j0..j2 spilled to a dead segment."""
    d = Dead(0)
    d.run(
        *[Push(id=f"j{i}", payload=b"p", queue="q", key=f"k{i}", max_attempts=1) for i in range(5)]
    )
    for _ in range(5):
        claimed = d.run(ClaimOp("w", ("q",), 1)).results[0]
        assert isinstance(claimed, Claimed)
        job = claimed.jobs[0]
        assert job.claim is not None
        d.run(Fail(job.id, job.claim.token, error="boom"))
    d.spill()
    return d


def test_a_job_retried_in_the_document_leaves_a_key_taken_since_to_its_new_holder() -> None:
    d = _keyed_dead()
    d.run(Push(id="new", payload=b"p", queue="q", key="k3"))  # j3's key was free again
    assert d.run(RetryDead(("j3", "j4"))).results == [Counted(2)]
    assert d.doc.index.keys["k3"] == "new"
    assert d.doc.jobs["j3"].key is None  # retried without it: keys stay unique
    assert d.doc.index.keys["k4"] == "j4"


def test_a_segment_retried_keeps_only_the_keys_no_live_job_took() -> None:
    d = _keyed_dead()
    d.run(Push(id="new", payload=b"p", queue="q", key="k0"))
    ref = next(iter(d.doc.dead))
    jobs = read_dead(ref, d.objects[ref.key])
    swap = plan_swap(
        ref,
        jobs,
        None,
        retry=True,
        first_seq=d.doc.next_seq + 10,
        unique=d.unique,
        holder=partial(key_holder, d.doc),
    )
    assert swap is not None
    late = Push(id="late", payload=b"p", queue="q", key="k1")  # takes k1 before the swap
    t = d.run(late, swap.op)
    assert isinstance(t.results[1], Conflict)
    assert "k1" in str(t.results[1])
    again = plan_swap(
        ref,
        jobs,
        None,
        retry=True,
        first_seq=d.doc.next_seq + 10,
        unique=d.unique,
        holder=partial(key_holder, d.doc),
    )
    assert again is not None
    assert d.run(again.op).results == [Counted(3)]
    assert d.doc.segments.keys == {"k2": "j2"}
    assert (d.doc.index.keys["k0"], d.doc.index.keys["k1"]) == ("new", "late")


def test_a_dead_segment_set_aside_is_counted_apart_and_readmitted_in_its_place() -> None:
    d = Dead(9)
    d.spill()
    refs = list(d.doc.dead)
    assert len(refs) >= 2
    first = refs[0]
    payloads = set(d.doc.dead.payloads)
    assert d.run(SetAside(first.key, "the object is missing")).results == [Ok()]
    assert d.doc.dead.find(first.key) is None  # neither listed, retried nor purged
    assert d.doc.dead.holds(first.key)  # never an orphan
    assert d.doc.dead.payloads == payloads  # its payload objects stay held
    q = stats_of(d.doc, d.now).queues["q"]
    assert q.dead == 9 - first.count
    assert (q.set_aside, q.set_aside_segments) == (first.count, 1)
    assert decode(encode(d.doc)) == d.doc  # the set-aside list survives a round trip
    assert len(encode(d.doc)) == d.doc.size_bytes()
    (entry,) = status_of("mem://x", d.doc, d.now)["set_aside_segments"]  # status, top, list
    assert (entry["key"], entry["jobs"], entry["reason"]) == (
        first.key,
        first.count,
        "the object is missing",
    )
    assert (entry["first_seq"], entry["last_seq"]) == (first.first_seq, first.last_seq)
    again = d.run(SetAside(first.key, "broken")).results[0]
    assert isinstance(again, Conflict)
    assert d.run(Readmit(first.key)).results == [Counted(first.count)]
    assert list(d.doc.dead) == refs  # back in its place by time of death
    assert not d.doc.dead.aside
    assert stats_of(d.doc, d.now).queues["q"].dead == 9


def test_a_readmit_of_a_dead_segment_not_set_aside_names_the_key() -> None:
    d = Dead(5)
    d.spill()
    ref = next(iter(d.doc.dead))
    refused = d.run(Readmit(ref.key)).results[0]  # referenced, not set aside
    assert isinstance(refused, InvalidInput)
    assert refused.field == "key"
    unknown = d.run(Readmit("dead/q/never-was.jsonl")).results[0]
    assert isinstance(unknown, InvalidInput)
    assert "dead/q/never-was.jsonl" in str(unknown)
    before = d.doc.dead.copy()
    no_reason = d.run(SetAside(ref.key, "")).results[0]
    assert isinstance(no_reason, InvalidInput)
    assert no_reason.field == "reason"
    assert d.doc.dead == before  # nothing changed


def test_a_set_aside_entry_without_a_reason_is_a_corrupt_document_naming_it() -> None:
    d = Dead(5)
    d.spill()
    ref = next(iter(d.doc.dead))
    d.run(SetAside(ref.key, "the object is missing"))
    data = encode(d.doc)
    assert b'"dead_aside":[' in data
    with pytest.raises(CorruptDocument) as caught:
        decode(data.replace(b'"reason":"the object is missing"', b'"reason":""'))
    assert caught.value.path == "$.dead_aside[0].reason"
    twice = data.replace(b'"dead_aside":[', b'"dead_aside":[' + _entry(d, ref.key) + b",")
    with pytest.raises(CorruptDocument, match="not a new dead segment"):
        decode(twice)


def _entry(d: Dead, key: str) -> bytes:
    return msgspec.json.encode(d.doc.dead.aside[key])


def test_a_retry_swap_drops_the_dead_entries_of_the_jobs_it_retries() -> None:
    d = Dead(0)
    d.run(
        *[
            Push(id=f"j{i}", payload=b"p", queue="q", max_attempts=1, result_ttl_s=600.0)
            for i in range(5)
        ]
    )
    for i in range(5):
        claimed = d.run(ClaimOp("w", ("q",), 1)).results[0]
        assert isinstance(claimed, Claimed)
        job = claimed.jobs[0]
        assert job.claim is not None
        d.run(Fail(job.id, job.claim.token, error=f"boom {i % 2}"))
    d.spill()
    ref = next(iter(d.doc.dead))
    op = d.swap(ref, retry=True, f=DeadFilter(error="boom 1"))
    assert op.retried == ("j1",)
    short = msgspec.structs.replace(op, retried=())
    result = d.run(short).results[0]
    assert isinstance(result, InvalidInput)
    assert result.field == "retried"
    stranger = msgspec.structs.replace(op, retried=("zz",))
    result = d.run(stranger).results[0]
    assert isinstance(result, InvalidInput)
    assert result.field == "retried[0]"
    entry = d.doc.finished.get("j1")
    assert entry is not None
    assert entry.status == "dead"
    assert d.run(op).results == [Counted(1)]
    assert d.doc.finished.get("j1") is None  # live again
    assert [d.doc.finished.get(i).status for i in ("j0", "j2")] == ["dead", "dead"]  # type: ignore[union-attr]
