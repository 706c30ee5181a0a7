"""Dedupe of spilled jobs by a per-segment id filter (osqueue.state.dedupe_filter):
no tombstone per spilled job, a retried push asks the broker to read and
confirm, a false positive is applied once confirmed absent, the filter lasts
as long as tombstones would, and merges and loads keep what it answers."""

from __future__ import annotations

import dataclasses

from test_compaction import compact_op, trickle
from test_segments import T0, Deep, push

from osqueue.state import Counted, Policy, Push, Pushed, cancel_op
from osqueue.state.dedupe_filter import ReadToConfirm, build, may_hold

P = Policy(segment_jobs=50, head_jobs=2, load_jobs=50, spill_above_jobs=3, dedupe_window_s=60)


def test_a_filter_holds_every_id_it_was_built_of_and_few_others() -> None:
    ids = [f"w1-{p}-{r}" for p in range(8) for r in range(1000)]
    encoded = build(ids)
    assert all(may_hold(encoded, i) for i in ids)
    others = [f"w2-{p}-{r}" for p in range(8) for r in range(1000)]
    false_positives = sum(may_hold(encoded, i) for i in others)
    assert false_positives < 0.03 * len(others)
    assert len(encoded) < 2 * len(ids)  # about 1.7 bytes an id, not a 29-byte tombstone
    assert not may_hold(build([]), "x")


def test_a_spill_of_dedupe_jobs_writes_a_filter_and_no_tombstones() -> None:
    d = Deep([push(i) for i in range(40)], P)
    (ref,) = d.spill()
    assert ref.count == 38
    assert d.doc.recent == {}
    assert len(ref.id_filter) == 1
    assert ref.dedupe_created is not None
    assert ref.dedupe_created.timestamp() == T0
    generated = Deep([Push(id=f"g{i}", payload=b"p", dedupe=False) for i in range(40)], P)
    (plain,) = generated.spill()
    assert plain.id_filter == ()  # made-up ids are never sent again: nothing to answer


def test_a_retried_push_of_a_spilled_id_asks_to_confirm_and_a_false_positive_is_applied() -> None:
    d = Deep([push(i) for i in range(40)], P)
    (ref,) = d.spill()
    (asked,) = d.run(push(20)).results
    assert isinstance(asked, ReadToConfirm)
    assert (asked.job_id, asked.keys) == ("j20", (ref.key,))
    assert d.doc.jobs.keys() == {"j0", "j1"}  # nothing was added
    # an id the filter may hold that the object does not (the broker read it):
    # applied once told so, never refused
    spilled = {job.id for job in d.objects[ref.key]}
    fake = next(
        f"j{i}x"
        for i in range(100_000)
        if f"j{i}x" not in spilled
        and ref.min_id <= f"j{i}x" <= ref.max_id
        and any(may_hold(f, f"j{i}x") for f in ref.id_filter)
    )
    (again,) = d.run(Push(id=fake, payload=b"p")).results
    assert isinstance(again, ReadToConfirm)
    (applied,) = d.run(Push(id=fake, payload=b"p", absent_from=(ref.key,))).results
    assert applied == Pushed(fake, True)
    assert fake in d.doc.jobs


def test_the_filter_answers_as_long_as_tombstones_would_and_then_leaves() -> None:
    d = Deep([push(i) for i in range(40)], P)
    (ref,) = d.spill()
    d.run(now=T0 + 59)
    assert isinstance(d.run(push(20), now=T0 + 59).results[0], ReadToConfirm)
    late = T0 + 1.25 * 60 + 2  # past the window: the filter is dropped
    d.run(now=late)
    current = d.doc.segments.find(ref.key)
    assert current is not None
    assert current.id_filter == ()
    assert d.doc.segments.filtered == {}
    assert d.run(push(20), now=late).results == [Pushed("j20", True)]  # as for any old id


def test_a_cancelled_spilled_job_leaves_a_tombstone_when_its_load_skips_it() -> None:
    d = Deep([push(i) for i in range(10)], dataclasses.replace(P, load_jobs=3))
    (ref,) = d.spill()
    d.run(cancel_op(ref, d.objects[ref.key], "j3"))
    assert "j3" not in d.doc.recent
    d.load(n=3)  # j2, j3 (skipped), j4
    assert "j3" in d.doc.recent
    assert d.run(push(3)).results == [Pushed("j3", False)]


def test_a_merge_keeps_every_part_filter() -> None:
    d = trickle(8)
    op = compact_op(d)
    assert op.ref.id_filter == tuple(f for part in op.refs for f in part.id_filter)
    assert op.ref.dedupe_created == max(
        part.dedupe_created for part in op.refs if part.dedupe_created is not None
    )
    assert d.run(op).results == [Counted(6)]
    spilled = d.objects[op.ref.key][5].id
    (asked,) = d.run(Push(id=spilled, payload=b"p")).results
    assert isinstance(asked, ReadToConfirm)
    assert op.ref.key in asked.keys
