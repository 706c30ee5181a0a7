"""Compaction in the pure state layer: which adjacent segments are merged, the
``Compact`` op's checks, and that a merged segment keeps claim order and the
loaded/cancelled/keyed/payload bookkeeping exactly."""

from __future__ import annotations

import dataclasses

import msgspec
import pytest
from test_segments import T0, Deep, push

from osqueue.errors import Conflict, InvalidInput
from osqueue.state import (
    Compact,
    Counted,
    Document,
    Policy,
    Push,
    SegmentRef,
    cancel_op,
    decode,
    decode_segment,
    encode,
    encode_segment,
    plan_compactions,
    stats_of,
)
from osqueue.state.compaction import merged_ref
from osqueue.state.segment_codec import SegmentLines

P = Policy(segment_jobs=3, head_jobs=2, load_jobs=2, spill_above_jobs=3, compact_jobs=30)


def keyed(i: int) -> Push:
    """Job ``i``; every fourth carries an idempotency key."""
    return push(i, key=f"key{i}") if i % 4 == 0 else push(i)


def trickle(refs: int, policy: Policy = P) -> Deep:
    """A backlog built slowly: ``refs`` segments of 3 jobs (and a head of 2)."""
    d = Deep([keyed(i) for i in range(2)], policy)
    n = 2
    for _ in range(refs):
        d.run(*[keyed(i) for i in range(n, n + 3)])
        n += 3
        assert len(d.spill()) == 1
    return d


def compact_op(d: Deep, unique: str = "m1") -> Compact:
    """The op of the first plan, its object stored in ``d.objects``."""
    (plan,) = plan_compactions(d.doc, d.policy)
    objects = [SegmentLines.parse(encode_segment(d.objects[ref.key]), ref.key) for ref in plan.refs]
    op, data = plan.build(objects, unique)
    d.objects[op.ref.key] = decode_segment(data)[1]
    return op


def drain(d: Deep) -> list[str]:
    """Claim everything, loading each stream's first segment whenever a claim starves."""
    got: list[str] = []
    while True:
        claimed = d.claim(2)
        got.extend(claimed)
        if not claimed and not d.doc.segments:
            return got
        idle = not any(job.status == "queued" for job in d.doc.jobs.values())
        if (not claimed or idle) and d.doc.segments:
            d.load()


def test_adjacent_small_segments_past_the_first_two_are_planned_up_to_compact_jobs() -> None:
    d = trickle(14)
    refs = list(d.doc.segments)
    (plan,) = plan_compactions(d.doc, P)
    assert plan.stream == ("default", 0)
    assert list(plan.refs) == refs[2:12]  # 10 x 3 jobs = compact_jobs
    assert plan_compactions(d.doc, dataclasses.replace(P, compact_jobs=None)) == []
    # a segment of more than a tenth of the target is never a part: here every one is
    assert plan_compactions(d.doc, dataclasses.replace(P, compact_jobs=29)) == []
    assert plan_compactions(d.doc, P, exclude={("default", 0)}) == []
    assert plan_compactions(trickle(3).doc, P) == []  # only one segment past the first two
    assert plan_compactions(trickle(6).doc, P) == []  # 4 x 3 jobs: less than half the target


def test_a_compaction_swaps_the_parts_for_one_reference_and_keeps_every_count() -> None:
    d = trickle(8)
    before = stats_of(d.doc, T0).queues["default"]
    op = compact_op(d)
    t = d.run(op)
    assert t.results == [Counted(6)]
    assert t.dropped_segments == [ref.key for ref in op.refs]
    refs = list(d.doc.segments)
    assert len(refs) == 3
    assert refs[2] == op.ref
    assert (op.ref.first_seq, op.ref.last_seq, op.ref.count) == (
        op.refs[0].first_seq,
        op.refs[-1].last_seq,
        18,
    )
    after = stats_of(d.doc, T0).queues["default"]
    assert (after.depth, after.spilled, after.oldest_age_s) == (
        before.depth,
        before.spilled,
        before.oldest_age_s,
    )
    assert decode(encode(d.doc)).segments == d.doc.segments  # written and read back


def test_a_merged_segment_keeps_claim_order_cancels_keys_and_payloads() -> None:
    plain = trickle(8)
    d = trickle(8)
    for twin in (plain, d):
        victim = list(twin.doc.segments)[3]  # a part: cancelled while spilled
        twin.run(cancel_op(victim, twin.objects[victim.key], twin.objects[victim.key][1].id))
    keys, payloads = dict(d.doc.segments.keys), set(d.doc.segments.payloads)
    op = compact_op(d)
    # the parts' keys: j8, j12 (cancelled: its key was released), j16, j20, j24
    assert sorted(op.ref.keyed.values()) == ["key16", "key20", "key24", "key8"]
    assert op.ref.cancelled == (plain.objects[list(plain.doc.segments)[3].key][1].id,)
    d.run(op)
    assert d.doc.segments.keys == keys
    assert d.doc.segments.payloads == payloads
    assert (
        stats_of(d.doc, T0).queues["default"].spilled
        == stats_of(plain.doc, T0).queues["default"].spilled
    )
    got = drain(d)
    assert len(got) == len(set(got)) == 25  # 26 pushed, one cancelled
    assert got == drain(plain)  # the same jobs, in the same order


def test_a_compaction_whose_parts_changed_fails_alone_and_changes_nothing() -> None:
    d = trickle(8)
    op = compact_op(d)
    part = op.refs[1]
    d.run(cancel_op(part, d.objects[part.key], d.objects[part.key][0].id))
    before = d.doc.segments.copy()
    t = d.run(op)
    assert isinstance(t.results[0], Conflict)
    assert t.dropped_segments == []
    assert d.doc.segments == before
    # parts no longer adjacent (one is gone): Conflict too
    d2 = trickle(8)
    op2 = compact_op(d2)
    apart = (op2.refs[0], op2.refs[2])
    ref = merged_ref(apart, op2.ref.key, op2.ref.size_bytes, op2.ref.sha256)
    assert isinstance(d2.run(Compact(apart, ref)).results[0], Conflict)


def _with(ref: SegmentRef, **changes: object) -> SegmentRef:
    return msgspec.structs.replace(ref, **changes)


@pytest.mark.parametrize(
    ("change", "field"),
    [
        (lambda op: Compact(op.refs[:1], op.ref), "refs"),
        (lambda op: Compact(op.refs, _with(op.ref, count=11)), "ref.count"),
        (lambda op: Compact(op.refs, _with(op.ref, cancelled=("j9",))), "ref.cancelled"),
        (lambda op: Compact(op.refs, _with(op.ref, keyed={"j9": "k"})), "ref.keyed"),
        (lambda op: Compact(op.refs, _with(op.ref, key="payloads/x")), "ref.key"),
        (
            lambda op: Compact((_with(op.refs[0], loaded=1), *op.refs[1:]), op.ref),
            "refs[0].loaded",
        ),
    ],
)
def test_a_malformed_compaction_names_its_field(change: object, field: str) -> None:
    d = trickle(8)
    op = change(compact_op(d))  # type: ignore[operator]
    before = d.doc.segments.copy()
    (res,) = d.run(op).results
    assert isinstance(res, InvalidInput)
    assert res.field == field
    assert d.doc.segments == before


def test_a_compaction_is_refused_on_a_document_without_the_parts() -> None:
    d = trickle(8)
    op = compact_op(d)
    (res,) = trickle(0).run(op).results
    assert isinstance(res, Conflict)
    assert Document.empty().segments == trickle(0).doc.segments
