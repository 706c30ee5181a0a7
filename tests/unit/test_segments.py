"""Deep backlogs in the pure state layer: Spill, Load, claims at barriers, cancels,
keys, dedupe, counts, and the planning helpers the broker calls."""

from __future__ import annotations

import dataclasses

import msgspec
import pytest

from osqueue.errors import Conflict, DuplicateKey, InvalidInput, JobNotFound
from osqueue.state import (
    Cancel,
    Claimed,
    ClaimOp,
    Complete,
    Counted,
    Document,
    Load,
    MarkArchived,
    Policy,
    Push,
    Pushed,
    Removed,
    SegmentRef,
    Spill,
    StoredJob,
    Transition,
    apply,
    cancel_op,
    candidates,
    claimable,
    decode_segment,
    encode,
    encode_segment,
    jobs_ahead,
    live_jobs,
    load_op,
    plan_loads,
    plan_spills,
    stats_of,
    transition,
)
from osqueue.state.dedupe_filter import ReadToConfirm
from osqueue.state.planning import sizes_changed
from osqueue.state.segment_codec import SegmentLines

T0 = 1_800_000_000.0
P = Policy(segment_jobs=3, head_jobs=2, load_jobs=2, spill_above_jobs=3)


def push(i: int | str, **kw: object) -> Push:
    return Push(id=f"j{i}", payload=b"p", **kw)  # type: ignore[arg-type]


class Deep:
    """A document and the segment objects its (imaginary) broker wrote."""

    def __init__(self, ops: list[Push], policy: Policy = P) -> None:
        self.policy = policy
        self.doc = transition(Document.empty(), ops, T0, policy).doc
        self.objects: dict[str, list[StoredJob]] = {}
        self.n = 0

    def run(self, *ops: object, now: float = T0) -> Transition:
        t = transition(self.doc, list(ops), now, self.policy)  # type: ignore[arg-type]
        self.doc = t.doc
        return t

    def spill(self) -> list[SegmentRef]:
        refs = []
        for plan in plan_spills(self.doc, self.policy):
            self.n += 1
            op, data = plan.build(f"u{self.n}")
            self.objects[op.ref.key] = decode_segment(data)[1]
            assert self.run(op).results == [Counted(len(plan.jobs))]
            refs.append(op.ref)
        return refs

    def load(self, ref: SegmentRef | None = None, n: int = 2) -> Transition:
        ref = ref or next(iter(self.doc.segments))
        current = self.doc.segments.find(ref.key)
        assert current is not None
        return self.run(load_op(current, self.objects[ref.key], n))

    def claim(
        self, n: int = 10, queues: tuple[str, ...] = ("default",), now: float = T0
    ) -> list[str]:
        t = self.run(ClaimOp("w", queues, n), now=now)
        (res,) = t.results
        assert isinstance(res, Claimed)
        return [j.id for j in res.jobs]


def test_a_spill_moves_the_oldest_tail_out_and_claims_stop_at_its_barrier() -> None:
    d = Deep([push(i) for i in range(8)])
    (ref,) = d.spill()
    # the head (j0, j1) stays, the next segment_jobs (j2..j4) spill, the rest stays
    assert (ref.first_seq, ref.last_seq, ref.count, ref.next_seq) == (3, 5, 3, 3)
    assert sorted(d.doc.jobs) == ["j0", "j1", "j5", "j6", "j7"]
    assert stats_of(d.doc, T0).queues["default"].depth == 8
    t = d.run(ClaimOp("w", ("default",), 10))
    assert [j.id for j in t.results[0].jobs] == ["j0", "j1"]  # type: ignore[union-attr]
    assert t.starved == {("default", 0)}
    assert not claimable(d.doc, ["default"], T0)
    t = d.load()
    assert t.results == [Counted(2)]
    assert claimable(d.doc, ["default"], T0)
    assert d.claim() == ["j2", "j3"]
    t = d.load()
    assert t.dropped_segments == [ref.key]
    assert d.claim() == ["j4", "j5", "j6", "j7"]
    assert not d.doc.segments


def test_claim_order_across_priorities_and_queues_stops_at_the_first_barrier() -> None:
    ops = [push(i, priority=0) for i in range(6)] + [push(f"h{i}", priority=-1) for i in range(2)]
    ops.append(push("b0", queue="b"))
    d = Deep(ops)
    d.spill()  # priority 0: j0, j1 stay, j2..j4 spill
    # -1 first, then p0's head, then the barrier: b0 (seq 9) waits though it is ready
    t = d.run(ClaimOp("w", ("default", "b"), 10))
    assert [j.id for j in t.results[0].jobs] == ["jh0", "jh1", "j0", "j1"]  # type: ignore[union-attr]
    assert t.starved == {("default", 0)}
    d.load(n=3)
    assert d.claim(10, ("b", "default")) == ["j2", "j3", "j4", "j5", "jb0"]


def test_a_delayed_job_inside_a_segments_range_waits_until_the_loads_pass_it() -> None:
    ops = [push(0), push(1), push(2), push("d", delay_s=5.0)] + [push(i) for i in range(3, 7)]
    d = Deep(ops)
    (ref,) = d.spill()  # j2, j3, j4: jd is not ready, it stays in the document
    assert ref.first_seq < d.doc.jobs["jd"].seq < ref.last_seq
    later = T0 + 10  # jd is due
    assert d.claim(now=later) == ["j0", "j1"]
    d.load(n=1)  # j2: the barrier moves to j3, past jd
    assert d.claim(now=later) == ["j2", "jd"]


def _snapshot(d: Deep) -> Spill:
    (plan,) = plan_spills(d.doc, d.policy)
    op, data = plan.build("snap")
    d.objects[op.ref.key] = decode_segment(data)[1]
    return op


def test_a_spill_whose_snapshot_went_stale_fails_alone_and_changes_nothing() -> None:
    d = Deep([push(i) for i in range(6)])
    op = _snapshot(d)
    d.run(ClaimOp("w", max_jobs=3))  # j2 is claimed after the snapshot
    before = dict(d.doc.jobs)
    t = d.run(op, push(99))
    assert isinstance(t.results[0], Conflict)
    assert t.results[1] == Pushed("j99", True)
    assert not d.doc.segments
    assert {k: v for k, v in d.doc.jobs.items() if k != "j99"} == before


def test_a_spill_must_come_after_the_streams_last_segment() -> None:
    d = Deep([push(i) for i in range(9)])
    stale = _snapshot(d)
    d.spill()  # the same jobs, under another key
    assert isinstance(d.run(stale).results[0], Conflict)
    again = d.run(Spill(d.doc.segments.first(("default", 0)), stale.jobs))  # type: ignore[arg-type]
    assert isinstance(again.results[0], Conflict)  # referenced already


@pytest.mark.parametrize(
    ("change", "field"),
    [
        (lambda op: Spill(msgspec.structs.replace(op.ref, count=9), op.jobs), "ref.count"),
        (lambda op: Spill(msgspec.structs.replace(op.ref, key="other/x"), op.jobs), "ref.key"),
        (lambda op: Spill(msgspec.structs.replace(op.ref, key="segments//x"), op.jobs), "ref.key"),
        (lambda op: Spill(msgspec.structs.replace(op.ref, min_id="a"), op.jobs), "ref.min_id"),
        (
            lambda op: Spill(msgspec.structs.replace(op.ref, keyed={"j2": "k"}), op.jobs),
            "ref.keyed",
        ),
        (lambda op: Spill(op.ref, op.jobs[::-1]), "jobs[1].seq"),
        (lambda op: Spill(op.ref, (*op.jobs[:2], op.jobs[1])), "jobs[2].seq"),  # not rising
        (lambda op: Spill(op.ref, (*op.jobs[:2], "j2")), "jobs[2]"),  # type: ignore[arg-type]
        (lambda op: Spill(op.ref, ()), "jobs"),
        (
            lambda op: Spill(
                op.ref, (*op.jobs[:2], msgspec.structs.replace(op.jobs[2], priority=5))
            ),
            "jobs[2].queue",
        ),
        (
            lambda op: Spill(
                op.ref, (*op.jobs[:2], msgspec.structs.replace(op.jobs[2], status="claimed"))
            ),
            "jobs[2].status",
        ),
        (
            lambda op: Spill(
                op.ref, (*op.jobs[:2], msgspec.structs.replace(op.jobs[2], queue="x"))
            ),
            "jobs[2].queue",
        ),
        (
            lambda op: Spill(
                op.ref,
                (*op.jobs[:2], msgspec.structs.replace(op.jobs[2], run_at=op.jobs[2].created_at)),
            ),
            "jobs[2].status",
        ),
    ],
)
def test_a_malformed_spill_names_its_field(change: object, field: str) -> None:
    d = Deep([push(i) for i in range(6)])
    op = change(_snapshot(d))  # type: ignore[operator]
    (res,) = d.run(op).results
    assert isinstance(res, InvalidInput)
    assert res.field == field
    assert len(d.doc.jobs) == 6


def test_a_load_checks_its_reference_and_its_chunk() -> None:
    d = Deep([push(i) for i in range(12)])
    first, second = d.spill() + d.spill()
    jobs1, jobs2 = d.objects[first.key], d.objects[second.key]
    conflicts = [
        Load("segments/default/none.jsonl", 0, tuple(jobs1[:1]), jobs1[1]),  # not referenced
        load_op(second, jobs2, 1),  # not its stream's first
        Load(first.key, 1, tuple(jobs1[1:2]), jobs1[2]),  # loaded 0, not 1
    ]
    for op in conflicts:
        assert isinstance(d.run(op).results[0], Conflict), op
    invalid = {
        "jobs[0].seq": Load(first.key, 0, tuple(jobs1[1:2]), jobs1[2]),
        "next_job": Load(first.key, 0, tuple(jobs1[:1])),
        "jobs": Load(first.key, 0, tuple(jobs1 + jobs1[:1])),
        "key": Load("queue.json", 0, tuple(jobs1[:1]), jobs1[1]),
    }
    for field, op in invalid.items():
        (res,) = d.run(op).results
        assert isinstance(res, InvalidInput), (field, res)
        assert res.field == field
    assert d.doc.segments.find(first.key) == first


def test_a_load_with_the_objects_lines_keeps_them_as_the_jobs_encodings() -> None:
    plain, lined = Deep([push(i) for i in range(8)]), Deep([push(i) for i in range(8)])
    (ref,) = plain.spill()
    (same,) = lined.spill()
    data = encode_segment(lined.objects[same.key])
    obj = SegmentLines.parse(data, same.key)
    op = load_op(same, lined.objects[same.key], 2)
    assert lined.run(msgspec.structs.replace(op, lines=tuple(obj.lines[:2]))).results == [
        Counted(2)
    ]
    plain.load(ref, n=2)
    renamed = encode(lined.doc).replace(same.key.encode(), ref.key.encode())
    assert renamed == encode(plain.doc)  # byte for byte what encoding the jobs gives
    assert lined.doc.size_bytes() == len(encode(lined.doc))
    last = (lined.objects[same.key][2],)
    bad = [
        ("lines", Load(same.key, 2, last, None, lines=tuple(obj.lines[:2]))),
        ("lines[0]", Load(same.key, 2, last, None, lines=(b"junk",))),
        ("lines[0]", Load(same.key, 2, last, None, lines=("x",))),  # type: ignore[arg-type]
    ]
    for field, wrong in bad:
        (res,) = lined.run(wrong).results
        assert isinstance(res, InvalidInput), (field, res)
        assert res.field == field
    assert lined.run(Load(same.key, 2, last, None, lines=(obj.lines[2],))).results == [Counted(1)]


def test_a_load_names_its_chunks_first_wrong_job_and_puts_the_rest_in_as_one_by_one() -> None:
    lined = Deep([push(i, key=f"k{i}") for i in range(8)])
    plain = Deep([push(i, key=f"k{i}") for i in range(8)])
    (ref,), (same,) = lined.spill(), plain.spill()
    jobs = lined.objects[ref.key]
    obj = SegmentLines.parse(encode_segment(jobs), ref.key)
    good = msgspec.structs.replace(load_op(ref, jobs, 3), lines=tuple(obj.lines[:3]))
    a, b, c = good.jobs
    wrong = {  # (the chunk is checked in one pass; a wrong job is still named)
        "jobs[1].status": (a, msgspec.structs.replace(b, status="claimed"), c),
        "jobs[2].queue": (a, b, msgspec.structs.replace(c, queue="x")),
        "jobs[1].seq": (a, a, c),
    }
    for field, chunk in wrong.items():
        (res,) = lined.run(msgspec.structs.replace(good, jobs=chunk)).results
        assert isinstance(res, InvalidInput), (field, res)
        assert res.field == field
    assert lined.run(good).results == [Counted(3)]  # at once, with its lines
    plain.load(same, n=3)  # job by job
    for doc in (lined.doc, plain.doc):
        assert doc.index.keys == {f"k{i}": f"j{i}" for i in range(8)}
    x, y = lined.doc.index, plain.doc.index
    assert (x.counts, x.queued) == (y.counts, y.queued)
    assert sorted(x.ready["default"]) == sorted(y.ready["default"])
    assert lined.claim(10) == plain.claim(10) == [f"j{i}" for i in range(8)]


def test_a_retried_push_of_a_spilled_job_is_recognised_and_its_key_stays_held() -> None:
    d = Deep([push(i, key=f"k{i}") for i in range(6)])
    (ref,) = d.spill()
    assert ref.keyed == {"j2": "k2", "j3": "k3", "j4": "k4"}
    t = d.run(push(3, key="k3"), push(7, key="k4"), push(8, key="k9"))
    # the reference's id filter may hold j3: the broker reads the object to confirm
    # (tests/unit/test_dedupe_filter.py; through a broker: test_segments_broker.py)
    assert isinstance(t.results[0], ReadToConfirm)
    assert t.results[0].keys == (ref.key,)
    assert isinstance(t.results[1], DuplicateKey)
    assert t.results[1].existing_id == "j4"
    assert t.results[2] == Pushed("j8", True)
    d.load(n=3)  # back in the document: the index holds the keys now
    assert d.doc.segments.keys == {}
    assert d.doc.index.keys["k4"] == "j4"


def test_a_partial_load_leaves_the_keys_of_the_jobs_still_spilled() -> None:
    d = Deep([push(i, key=f"k{i}") for i in range(6)])
    d.spill()  # j2..j4
    d.load(n=2)  # j2 and j3 come back; j4's key stays with the reference
    (left,) = d.doc.segments
    assert left.keyed == {"j4": "k4"}
    assert left.cancelled == ()
    assert d.doc.segments.keys == {"k4": "j4"}
    assert d.doc.index.keys["k2"] == "j2"
    assert d.doc.index.keys["k3"] == "j3"


def test_a_partial_load_leaves_the_cancel_of_a_job_still_spilled() -> None:
    d = Deep([push(i, key=f"k{i}") for i in range(6)])
    (ref,) = d.spill()
    cancel = cancel_op(ref, d.objects[ref.key], "j4")
    assert cancel is not None
    assert d.run(cancel).results == [Removed(())]
    d.load(n=2)
    (left,) = d.doc.segments
    assert left.cancelled == ("j4",)
    assert left.keyed == {}
    assert d.doc.segments.keys == {}


def test_beyond_the_dedupe_window_a_repushed_spilled_id_is_new_and_the_load_keeps_it() -> None:
    policy = Policy(
        segment_jobs=3, head_jobs=1, load_jobs=3, spill_above_jobs=3, dedupe_window_s=60
    )
    d = Deep([push(i) for i in range(4)], policy)
    d.spill()  # j1..j3
    later = T0 + 200  # the tombstones are pruned
    d.run(now=later)
    assert d.doc.recent == {}
    assert d.run(push(2, priority=0), now=later).results == [Pushed("j2", True)]
    t = d.load(n=3)
    assert t.results == [Counted(2)]  # j1, j3: the document's j2 stays the one job j2
    assert d.doc.jobs["j2"].created_at.timestamp() == later
    assert sorted(d.doc.jobs) == ["j0", "j1", "j2", "j3"]


def test_a_spilled_job_is_cancelled_by_its_segment_and_skipped_on_load() -> None:
    d = Deep([push(i, key=f"k{i}") for i in range(6)])
    (ref,) = d.spill()
    op = cancel_op(ref, d.objects[ref.key], "j3")
    assert op == Cancel("j3", segment=ref.key, seq=4)
    assert cancel_op(ref, d.objects[ref.key], "j0") is None
    assert [r.key for r in candidates(d.doc, "j3")] == [ref.key]
    t = d.run(op, Cancel("j4"), op)
    assert t.results[0] == Removed(())
    assert isinstance(t.results[1], JobNotFound)  # no hint: not in the document
    assert isinstance(t.results[2], JobNotFound)  # cancelled already
    assert d.doc.stats.cancelled == 1
    assert stats_of(d.doc, T0).queues["default"].spilled == 2
    assert "k3" not in d.doc.segments.keys
    assert d.run(push(9, key="k3")).results == [Pushed("j9", True)]
    struck = d.doc.segments.find(ref.key)
    assert struck is not None
    assert [j.id for j in live_jobs(struck, d.objects[ref.key])] == ["j2", "j4"]
    t = d.load(n=3)
    assert [j.id for j in t.removed] == ["j3"]
    assert "j3" not in d.doc.jobs
    assert d.claim() == ["j0", "j1", "j2", "j4", "j5", "j9"]


def test_a_cancel_of_a_job_loaded_meanwhile_works_on_the_document_or_finds_nothing() -> None:
    d = Deep([push(i) for i in range(6)])
    (ref,) = d.spill()
    early = [cancel_op(ref, d.objects[ref.key], i) for i in ("j2", "j3")]
    assert None not in early
    d.load(n=2)  # j2, j3 are back
    (res,) = d.run(early[0]).results
    assert isinstance(res, Removed)
    assert [j.id for j in res.jobs] == ["j2"]
    assert d.claim() == ["j0", "j1", "j3"]
    claimed = d.doc.jobs["j3"].claim
    assert claimed is not None
    d.run(Complete("j3", claimed.token))
    d.run(MarkArchived((d.doc.version,)))
    assert "j3" not in d.doc.jobs
    assert isinstance(d.run(early[1]).results[0], JobNotFound)  # loaded, then gone
    (res,) = d.run(Cancel("j4", segment=ref.key)).results
    assert isinstance(res, InvalidInput)
    assert res.field == "seq"


def test_counts_and_the_oldest_age_come_from_the_references() -> None:
    d = Deep([push(i) for i in range(3)])
    d.run(*[push(i) for i in range(3, 8)], now=T0 + 10)
    assert len(d.spill()) == 1  # j2 (created T0) .. j4
    d.claim(2)
    stats = stats_of(d.doc, T0 + 20)
    q = stats.queues["default"]
    assert (q.depth, q.spilled, q.claimed) == (6, 3, 2)
    assert q.oldest_age_s == 20.0  # j2, in the segment, is next
    assert stats.document_bytes == d.doc.size_bytes()
    only_refs = Deep(
        [push(i, queue="x") for i in range(3)],
        Policy(segment_jobs=3, head_jobs=0, spill_above_jobs=3),
    )
    only_refs.spill()
    assert only_refs.doc.jobs == {}
    assert stats_of(only_refs.doc, T0).queues["x"].depth == 3


def test_spilled_payload_objects_stay_referenced_until_loaded() -> None:
    ops = [
        Push(id=f"j{i}", payload=None, payload_ref=f"payloads/j{i}=u", payload_size=9)
        for i in range(6)
    ]
    d = Deep(ops)
    (ref,) = d.spill()
    assert ref.payload_refs == ("payloads/j2=u", "payloads/j3=u", "payloads/j4=u")
    assert d.doc.segments.payloads == set(ref.payload_refs)
    d.load(n=2)
    assert d.doc.segments.payloads == {"payloads/j4=u"}


def test_a_spill_leaves_no_stale_entries_in_the_ready_heap() -> None:
    d = Deep(
        [push(i) for i in range(40)], Policy(segment_jobs=30, head_jobs=5, spill_above_jobs=30)
    )
    d.spill()
    assert len(d.doc.index.ready["default"]) == len(d.doc.jobs) == 10


# --------------------------------------------------------------------------- planning


def test_plan_spills_takes_whole_segments_of_ready_tail_jobs_only() -> None:
    policy = Policy(segment_jobs=2, head_jobs=1, spill_above_jobs=3)
    ops = [push(0), push("d", delay_s=9.0), *[push(i) for i in range(1, 5)]]
    doc = apply(Document.empty(), ops, T0, policy)[0]
    (plan,) = plan_spills(doc, policy)
    assert [j.id for j in plan.jobs] == ["j1", "j2"]  # j0 is the head; jd is not ready
    assert plan.lines == tuple(doc.encoded_job(j.id) for j in plan.jobs)
    assert plan_spills(doc, Policy(spill_above_jobs=None)) == []
    assert plan_spills(doc, Policy(segment_jobs=2, head_jobs=1, spill_above_jobs=5)) == []


def test_plan_spills_passes_over_an_entry_held_twice_and_plans_each_priority_apart() -> None:
    policy = Policy(segment_jobs=10, head_jobs=1, spill_above_jobs=3)
    ops = [push(i) for i in range(5)] + [push(f"h{i}", priority=1) for i in range(5)]
    doc = apply(Document.empty(), ops, T0, policy)[0]
    ready = doc.index.ready["default"]
    twice = next(e for e in ready if e[2] == "j3")
    ready.push(twice)  # lazy entries: one job's may be held twice
    plans = plan_spills(doc, policy)
    assert [(p.priority, [j.id for j in p.jobs]) for p in plans] == [
        (0, ["j1", "j2", "j3", "j4"]),
        (1, ["jh1", "jh2", "jh3", "jh4"]),
    ]
    doc.spill_scanned.clear()
    entries = sorted(e for e in ready if e[0] == 0)  # one priority, the entry still twice
    ready.run[:], ready.start, ready.heap[:] = entries, 0, []
    (plan,) = plan_spills(doc, policy)
    assert [j.id for j in plan.jobs] == ["j1", "j2", "j3", "j4"]


def test_plan_spills_remembers_how_far_a_queue_is_from_spilling() -> None:
    policy = Policy(segment_jobs=16, head_jobs=30, spill_above_jobs=16)
    doc = apply(Document.empty(), [push(i) for i in range(40)], T0, policy)[0]
    assert plan_spills(doc, policy) == []  # a tail of 10 only: 6 more jobs to go
    assert doc.spill_scanned["default"] == (41, 40, 6, ())
    doc = apply(doc, [push(i) for i in range(40, 45)], T0, policy)[0]
    assert plan_spills(doc, policy) == []
    assert doc.spill_scanned["default"] == (41, 40, 6, ())  # 5 pushed since: no scan
    doc = apply(doc, [push(45)], T0, policy)[0]
    assert plan_spills(doc, policy, exclude={"default"}) == []  # a spill of it in flight
    (plan,) = plan_spills(doc, policy)
    assert [j.seq for j in plan.jobs] == list(range(31, 47))
    # as it will be after the spill: nothing more to spill, its last seq 46
    assert doc.spill_scanned["default"] == (47, 30, 16, ((0, 46),))
    op, _ = plan.build("u1")
    doc = apply(doc, [op, push(46)], T0, policy)[0]
    assert plan_spills(doc, policy) == []
    assert doc.spill_scanned["default"] == (47, 30, 16, ((0, 46),))  # no scan since


def test_new_spill_sizes_forget_only_the_scans_they_may_have_made_wrong() -> None:
    policy = Policy(segment_jobs=50, head_jobs=2, spill_above_jobs=5)
    d = Deep([push(i) for i in range(30)], policy)
    d.spill()  # "default" has references now
    d.run(*[push(i) for i in range(30, 33)], *[push(f"o{i}", queue="other") for i in range(6)])
    assert plan_spills(d.doc, policy) == []
    memos = dict(d.doc.spill_scanned)
    assert set(memos) == {"default", "other"}
    bigger = dataclasses.replace(policy, head_jobs=4, load_jobs=4)
    sizes_changed(d.doc, policy, bigger)  # a demand that rose: every scan still holds
    assert d.doc.spill_scanned == memos
    sizes_changed(d.doc, bigger, policy)  # a smaller head: only a queue with no references
    assert d.doc.spill_scanned == {"default": memos["default"]}  # (its tail is after them)
    sizes_changed(d.doc, policy, dataclasses.replace(policy, spill_above_jobs=4))
    assert d.doc.spill_scanned == {}  # a lower threshold: every scan is void


def test_plan_spills_takes_the_whole_tail_up_to_segment_jobs() -> None:
    policy = Policy(segment_jobs=50, head_jobs=2, spill_above_jobs=5)
    d = Deep([push(i) for i in range(30)], policy)
    (first,) = d.spill()
    assert (first.first_seq, first.last_seq) == (3, 30)  # all but the head, at once
    d.run(*[push(i) for i in range(30, 34)])
    assert plan_spills(d.doc, policy) == []  # a tail of 4 behind the segment
    assert d.doc.spill_scanned["default"][2:] == (5, ((0, 30),))  # 4 pushed: no scan
    d.run(push(34))
    (second,) = d.spill()
    assert (second.first_seq, second.last_seq, second.count) == (31, 35, 5)
    assert d.claim(40) == [f"j{i}" for i in range(2)]  # stops at the first segment
    d.run(*[push(i, dedupe=False) for i in range(35, 155)])  # a burst
    (plan,) = plan_spills(d.doc, policy)  # the oldest segment_jobs of it
    assert (plan.jobs[0].seq, len(plan.jobs)) == (36, 50)
    plans = plan_spills(d.doc, policy, segments=4)  # the whole tail, in segments
    assert [(p.jobs[0].seq, len(p.jobs)) for p in plans] == [(36, 50), (86, 50), (136, 20)]
    assert len(plan_spills(d.doc, policy, segments=2)) == 2


def test_plan_loads_is_due_below_the_head_and_reads_ahead_below_twice_that() -> None:
    policy = Policy(segment_jobs=3, head_jobs=2, load_jobs=2, spill_above_jobs=3)
    d = Deep([push(i) for i in range(10)], policy)
    (ref,) = d.spill()
    assert jobs_ahead(d.doc, "default", (0, ref.next_seq), 10) == 2
    (plan,) = plan_loads(d.doc, policy)
    assert (plan.ref, plan.due) == (ref, False)  # 2 ahead: read ahead
    d.claim(1)
    (plan,) = plan_loads(d.doc, policy)
    assert plan.due
    assert [p.due for p in plan_loads(d.doc, Policy(head_jobs=1))] == [False]
    assert plan_loads(d.doc, Policy(head_jobs=0)) == []
    assert [p.due for p in plan_loads(d.doc, Policy(head_jobs=1), starved={("default", 0)})] == [
        True
    ]


def test_jobs_ahead_counts_only_jobs_before_the_barrier_up_to_the_limit() -> None:
    doc = apply(Document.empty(), [push(i, priority=i % 3 - 1) for i in range(30)], T0, P)[0]
    ready = sorted((j.priority, j.seq) for j in doc.jobs.values())
    for barrier in [(-1, 0), (0, 11), (0, 40), (1, 2), (2, 0)]:
        expected = sum(1 for e in ready if e < barrier)
        assert jobs_ahead(doc, "default", barrier, 100) == expected  # (one pass)
        assert jobs_ahead(doc, "default", barrier, 8) == min(8, expected)  # (one pass)
        assert jobs_ahead(doc, "default", barrier, 3) == min(3, expected)  # (the walk)


def test_load_op_takes_the_next_chunk_and_names_the_job_after_it() -> None:
    d = Deep([push(i) for i in range(8)])
    (ref,) = d.spill()
    jobs = d.objects[ref.key]
    op = load_op(ref, jobs, 2)
    assert (op.from_loaded, [j.id for j in op.jobs], op.next_job) == (0, ["j2", "j3"], jobs[2])
    assert load_op(ref, jobs, 5).next_job is None
