"""Delayed jobs in time-bucketed objects: the pure transitions (spill, load, never
early, cancel of a spilled delayed job, stale ops failing alone) and the planner."""

from __future__ import annotations

from collections.abc import Sequence

import msgspec
import pytest

from osqueue.errors import Conflict, CorruptDocument, DuplicateKey, InvalidInput, JobNotFound
from osqueue.state import (
    Cancel,
    Claimed,
    ClaimOp,
    Complete,
    Counted,
    Document,
    Fail,
    Ok,
    Policy,
    Push,
    Pushed,
    Readmit,
    Removed,
    SetAside,
    decode,
    encode,
    transition,
)
from osqueue.state.cold_delayed import DELAYED_PREFIX
from osqueue.state.dedupe_filter import ReadToConfirm
from osqueue.state.delayed_plan import (
    delayed_cancel_op,
    delayed_load_op,
    load_at,
    loads_due,
    plan_delayed_spills,
)
from osqueue.state.ops import LoadDelayed, SpillDelayed
from osqueue.state.results import answer
from osqueue.state.segment_codec import SegmentLines
from osqueue.state.stats import stats_of

T0 = 1_800_000_000.0  # a multiple of 100: windows start on it
POLICY = Policy(
    delay_spill_above_jobs=3,
    segment_jobs=4,
    delay_window_s=100.0,
    delay_horizon_s=60.0,
    delay_lead_s=10.0,
    delay_load_jobs=2,
    heartbeat_timeout_s=10_000.0,
)


def _apply(doc: Document, ops: Sequence[object], now: float) -> tuple[Document, list[object]]:
    t = transition(doc, ops, now, POLICY)  # type: ignore[arg-type]
    return t.doc, list(t.results)


def pushed(delays: list[float], now: float = T0, **kw: object) -> Document:
    ops = [Push(f"j{i:02d}", b"x", delay_s=d, **kw) for i, d in enumerate(delays)]  # type: ignore[arg-type]
    doc, results = _apply(Document(), ops, now)  # type: ignore[arg-type]
    assert all(isinstance(r, Pushed) for r in results)
    return doc


def spilled(doc: Document, now: float = T0) -> tuple[Document, dict[str, bytes]]:
    """Every spill the planner finds, applied; the objects by key."""
    plans = plan_delayed_spills(doc, POLICY, now)
    assert plans
    objects: dict[str, bytes] = {}
    ops = []
    for i, plan in enumerate(plans):
        op, data = plan.build(f"u{i}")
        objects[op.ref.key] = data
        ops.append(op)
    doc, results = _apply(doc, ops, now)
    assert all(not isinstance(r, Exception) for r in results), results
    return doc, objects


def loaded(doc: Document, objects: dict[str, bytes], now: float) -> Document:
    """Every load due at ``now``, chunk by chunk, until none is due."""
    for _ in range(100):
        due = loads_due(doc, POLICY, now)
        if not due:
            return doc
        ops = [
            delayed_load_op(ref, SegmentLines.checked_delayed(ref, objects[ref.key]), 2)
            for ref in due
        ]
        doc, results = _apply(doc, ops, now)
        assert all(not isinstance(r, Exception) for r in results), results
    raise AssertionError("loads never ended")


def claim_all(doc: Document, now: float) -> tuple[Document, list[str]]:
    doc, (res,) = _apply(doc, [ClaimOp("w", ("default",), 100)], now)
    assert isinstance(res, Claimed)
    return doc, [j.id for j in res.jobs]


def test_jobs_beyond_the_horizon_spill_by_window_and_the_counts_stay() -> None:
    # four due in the window [T0+100, T0+200), two in [T0+200, T0+300), one near
    doc = pushed([150, 120, 199, 130, 250, 260, 30])
    before = stats_of(doc, T0).queues["default"]
    doc, objects = spilled(doc)
    refs = list(doc.delayed)
    assert [(r.window_at.timestamp() - T0, r.count) for r in refs] == [(100, 4), (200, 2)]
    assert all(r.key.startswith(DELAYED_PREFIX + "default/") for r in refs)
    assert set(doc.jobs) == {"j06"}  # within the horizon: stays
    after = stats_of(doc, T0).queues["default"]
    assert (after.depth, after.delayed) == (before.depth, before.delayed) == (7, 7)
    # sorted by (run_at, seq) inside
    first = SegmentLines.checked_delayed(refs[0], objects[refs[0].key])
    assert [j.id for j in first.jobs(0, 4)] == ["j01", "j03", "j00", "j02"]
    # the document reads back the same
    again = decode(encode(doc))
    assert again == doc
    assert len(encode(doc)) == doc.size_bytes()
    assert list(again.delayed) == refs


def test_a_loaded_job_keeps_its_run_at_and_is_never_claimable_early() -> None:
    doc, objects = spilled(pushed([150, 120, 199, 130, 250, 260, 30]))
    assert load_at(doc, POLICY) == T0 + 120 - 10
    assert loads_due(doc, POLICY, T0 + 109) == []  # not within the lead yet
    doc = loaded(doc, objects, T0 + 110)
    # only the jobs due within the lead were loaded (a chunk of 2 at a time)
    assert {"j01", "j03"} <= set(doc.jobs)
    (ref, _) = doc.delayed
    assert ref.loaded == 2
    assert ref.next_run_at.timestamp() == T0 + 150
    for now in (T0 + 110, T0 + 119.999):
        doc, got = claim_all(doc, now)
        assert got == ["j06"] if now == T0 + 110 else got == []
    doc, got = claim_all(doc, T0 + 120)
    assert got == ["j01"]
    doc = loaded(doc, objects, T0 + 200)
    doc, got = claim_all(doc, T0 + 200)
    assert got == ["j00", "j02", "j03"]  # due by now, in (priority, seq) order
    doc = loaded(doc, objects, T0 + 300)
    assert not doc.delayed  # every object loaded: the references are dropped
    doc, got = claim_all(doc, T0 + 300)
    assert got == ["j04", "j05"]


def test_a_spilled_delayed_job_is_cancelled_in_its_object_and_skipped_on_load() -> None:
    doc, objects = spilled(pushed([150, 120, 199, 130]))
    (ref,) = doc.delayed
    obj = SegmentLines.checked_delayed(ref, objects[ref.key])
    op = delayed_cancel_op(ref, obj, "j00")
    assert op == Cancel("j00", segment=ref.key, seq=2)
    doc, (res,) = _apply(doc, [op], T0)
    assert res == Removed(())
    assert stats_of(doc, T0).queues["default"].delayed == 3
    doc, (again,) = _apply(doc, [op], T0)
    assert isinstance(again, JobNotFound)  # struck already
    t = transition(doc, [delayed_load_op(doc.delayed.find(ref.key), obj, 4)], T0 + 200, POLICY)  # type: ignore[arg-type]
    assert [j.id for j in t.removed] == ["j00"]  # skipped: its payload object may go
    assert set(t.doc.jobs) == {"j01", "j02", "j03"}
    assert t.dropped_segments == [ref.key]


def test_a_job_loaded_meanwhile_cannot_be_cancelled_in_its_object() -> None:
    doc, objects = spilled(pushed([150, 120, 199, 130]))
    (ref,) = doc.delayed
    obj = SegmentLines.checked_delayed(ref, objects[ref.key])
    stale = delayed_cancel_op(ref, obj, "j01")  # position 0
    assert stale is not None
    doc = loaded(doc, objects, T0 + 110)  # loads j01, j03
    doc, got = claim_all(doc, T0 + 120)
    assert got == ["j01"]
    token = doc.jobs["j01"].claim.token  # type: ignore[union-attr]
    doc, (_done,) = _apply(doc, [Complete("j01", token)], T0 + 120)
    doc, (res,) = _apply(doc, [stale], T0 + 120)
    assert isinstance(res, JobNotFound)  # loaded, then done: gone from both places
    doc, (res,) = _apply(doc, [stale], T0 + 120)
    assert doc.delayed.find(ref.key).cancelled == ()  # type: ignore[union-attr]


def test_stale_spill_and_load_fail_alone() -> None:
    doc = pushed([150, 120, 199, 130])
    (plan,) = plan_delayed_spills(doc, POLICY, T0)
    op, _data = plan.build("u1")
    doc, results = _apply(doc, [Cancel("j02"), op, Push("other", b"y")], T0)
    assert isinstance(results[0], Removed)
    assert isinstance(results[2], Pushed)
    assert isinstance(results[1], Conflict)
    assert not doc.delayed
    assert "other" in doc.jobs
    doc, objects = spilled(pushed([150, 120, 199, 130]))
    (ref,) = doc.delayed
    obj = SegmentLines.checked_delayed(ref, objects[ref.key])
    load = delayed_load_op(ref, obj, 2)
    doc, (_first,) = _apply(doc, [load], T0 + 110)
    doc, (second, pushed_too) = _apply(doc, [load, Push("late", b"z")], T0 + 110)
    assert isinstance(second, Conflict)
    assert isinstance(pushed_too, Pushed)
    assert doc.delayed.find(ref.key).loaded == 2  # type: ignore[union-attr]


def test_malformed_ops_name_the_field() -> None:
    doc, objects = spilled(pushed([150, 120, 199, 130]))
    (ref,) = doc.delayed
    obj = SegmentLines.checked_delayed(ref, objects[ref.key])
    good = delayed_load_op(ref, obj, 2)
    early = LoadDelayed(ref.key, 0, good.jobs[1:], None)
    _, (res,) = _apply(doc, [early], T0)
    assert isinstance(res, InvalidInput)
    jobs = tuple(obj.jobs(0, 4))
    wrong = msgspec.structs.replace(ref, count=3)
    _, (res,) = _apply(pushed([150]), [SpillDelayed(wrong, jobs)], T0)
    assert isinstance(res, InvalidInput)
    assert res.field == "ref.count"


def test_a_retried_push_of_a_spilled_id_and_a_held_key_are_recognised() -> None:
    doc = pushed([150, 120, 199, 130])
    doc, (_res,) = _apply(doc, [Push("keyed", b"k", delay_s=500, key="K")], T0)
    doc, _ = spilled(doc)
    assert "keyed" not in doc.jobs
    assert "j00" not in doc.jobs
    assert not doc.recent  # no tombstones: the objects' id filters answer
    assert all(ref.id_filter for ref in doc.delayed)
    doc, (again, dup) = _apply(doc, [Push("j00", b"x", delay_s=150), Push("n", b"", key="K")], T0)
    assert isinstance(again, ReadToConfirm)  # the broker reads the object, then answers
    assert set(again.keys) == {r.key for r in doc.delayed if r.min_id <= "j00" <= r.max_id}
    assert "j00" not in doc.jobs
    assert isinstance(dup, DuplicateKey)
    assert dup.existing_id == "keyed"


def test_a_retry_with_backoff_is_a_delayed_job_and_spills() -> None:
    doc = pushed([0, 0, 0, 0])
    doc, (res,) = _apply(doc, [ClaimOp("w", ("default",), 4)], T0)
    assert isinstance(res, Claimed)
    fails = [Fail(j.id, j.claim.token, "down", retry_after_s=600) for j in res.jobs]  # type: ignore[union-attr]
    doc, _ = _apply(doc, fails, T0)
    doc, _ = spilled(doc)
    (ref,) = doc.delayed
    assert ref.count == 4
    assert not doc.jobs
    assert ref.first_run_at.timestamp() == T0 + 600


def test_the_planner_does_not_scan_again_before_enough_new_delayed_jobs() -> None:
    doc = pushed([150, 120, 30, 20])  # 4 delayed, only 2 beyond the horizon
    assert plan_delayed_spills(doc, POLICY, T0) == []
    assert doc.delayed.scanned == (4, 2)
    doc, _ = _apply(doc, [Push("a", b"", delay_s=300)], T0)
    assert plan_delayed_spills(doc, POLICY, T0) == []  # 5 - 4 < 2: not scanned
    assert doc.delayed.scanned == (4, 2)
    doc, _ = _apply(doc, [Push("b", b"", delay_s=300)], T0)
    assert [len(p.jobs) for p in plan_delayed_spills(doc, POLICY, T0)] == [2, 2]


@pytest.mark.parametrize(
    ("field", "value", "path"),
    [
        ("key", "segments/x.jsonl", "$.delayed[0].key"),
        ("loaded", 9, "$.delayed[0].loaded"),
        ("next_run_at", "2000-01-01T00:00:00Z", "$.delayed[0].next_run_at"),
        ("cancelled", ["zzz"], "$.delayed[0].cancelled[0]"),
    ],
)
def test_a_bad_reference_is_corrupt_naming_the_field(field: str, value: object, path: str) -> None:
    import json

    doc, _ = spilled(pushed([150, 120, 199, 130]))
    wire = json.loads(encode(doc))
    wire["delayed"][0][field] = value
    with pytest.raises(CorruptDocument) as err:
        decode(json.dumps(wire).encode())
    assert err.value.path == path


def test_a_delayed_object_set_aside_keeps_its_jobs_counted_and_keys_held_until_readmit() -> None:
    doc = pushed([150, 120, 199])
    doc, _ = _apply(doc, [Push("keyed", b"k", delay_s=160.0, key="K")], T0)
    doc, objects = spilled(doc)
    (ref,) = doc.delayed
    doc, (res,) = _apply(doc, [SetAside(ref.key, "the object is missing")], T0)
    assert res == Ok()
    assert not doc.delayed.refs
    assert doc.delayed.holds(ref.key)  # never an orphan
    assert loads_due(doc, POLICY, T0 + 1000) == []  # not loaded while aside
    stats = stats_of(doc, T0).queues["default"]
    assert (stats.set_aside, stats.set_aside_segments, stats.delayed) == (4, 1, 0)
    doc, (dup,) = _apply(doc, [Push("n", b"", key="K")], T0)
    assert isinstance(dup, DuplicateKey)  # its keys stay held
    assert decode(encode(doc)) == doc
    assert len(encode(doc)) == doc.size_bytes()
    doc, (again,) = _apply(doc, [SetAside(ref.key, "twice")], T0)
    assert isinstance(again, Conflict)
    doc, (back,) = _apply(doc, [Readmit(ref.key)], T0)
    assert back == Counted(4)
    assert not doc.delayed.aside
    doc = loaded(doc, objects, T0 + 300)
    doc, got = claim_all(doc, T0 + 300)
    assert sorted(got) == ["j00", "j01", "j02", "keyed"]
    doc, (missing,) = _apply(doc, [Readmit(ref.key)], T0)
    assert isinstance(missing, InvalidInput)


def test_a_delayed_filter_answers_as_long_as_tombstones_would_and_then_leaves() -> None:
    doc, _ = spilled(pushed([1000.0, 1010.0, 1020.0, 1030.0, 1040.0]))
    ref = next(iter(doc.delayed))
    assert doc.delayed.filtered == {r.key: r for r in doc.delayed}
    assert decode(encode(doc)).delayed.filtered == doc.delayed.filtered  # kept across a restart
    window = POLICY.dedupe_window_s
    doc, (res,) = _apply(doc, [Push(ref.min_id, b"x", delay_s=1.0)], T0 + window - 1)
    assert isinstance(res, ReadToConfirm)  # within the window: the filter answers
    late = T0 + 1.25 * window + 2
    doc, _ = _apply(doc, [], late)  # the sweep drops filters past the window
    assert doc.delayed.filtered == {}
    assert all(r.id_filter == () and r.dedupe_created is None for r in doc.delayed)
    doc, (res,) = _apply(doc, [Push(ref.min_id, b"x", delay_s=1.0)], late)
    assert res == Pushed(ref.min_id, True)  # as for any id past its window


def test_result_answers_a_spilled_delayed_job_as_queued() -> None:
    doc, _ = spilled(pushed([1000.0, 1010.0, 1020.0, 1030.0, 1040.0]))
    cold = [f"j{i:02d}" for i in range(5) if f"j{i:02d}" not in doc.jobs]
    assert cold
    for job_id in cold:
        found = answer(doc, job_id, T0)
        assert found is not None
        assert found.result.status == "queued"  # live, as it would in the document
    assert answer(doc, "zz-never-pushed", T0) is None
