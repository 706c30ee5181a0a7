"""Dedupe of dead segments and objects of waiting children by their references' id
filters (osqueue.state.dedupe_filter), as for ready segments and delayed objects:
a spill writes no tombstones, a retried push of a spilled id asks the broker to
read the object, the filter follows the jobs through a retry or a purge of a dead
segment, answers while set aside and after a takeover, lasts as long as tombstones
would, and a burst of deaths leaves the document small."""

from __future__ import annotations

import dataclasses

from test_cold_dead import Dead
from test_cold_dead import P as DEAD_POLICY
from test_cold_waiting import POLICY as WAITING_POLICY
from test_cold_waiting import finish, load_due, spill_all

from osqueue.state import (
    Cancel,
    Claimed,
    ClaimOp,
    Counted,
    Document,
    Fail,
    Push,
    Pushed,
    apply,
    decode,
    encode,
    transition,
)
from osqueue.state.cold_dead import DeadFilter, plan_dead_spills
from osqueue.state.dedupe_filter import ReadToConfirm, may_hold
from osqueue.state.ops import SetAside, SpillDead
from osqueue.state.segment_codec import SEGMENT_PREFIX

T0 = 1_800_000_000.0


def again(d: Dead, job_id: str, **kw: object) -> object:
    """The result of a push of ``job_id`` again, now."""
    (result,) = d.run(Push(id=job_id, payload=b"again", queue="q", **kw)).results  # type: ignore[arg-type]
    return result


# --------------------------------------------------------------------------- dead segments


def test_a_dead_spill_of_dedupe_jobs_writes_a_filter_and_no_tombstones() -> None:
    d = Dead(7)
    ops = d.spill()
    assert [len(op.jobs) for op in ops] == [3, 2]
    assert d.doc.recent == {}  # no tombstone: the references' filters answer
    for op in ops:
        ref = d.doc.dead.find(op.ref.key)
        assert ref is not None
        assert len(ref.id_filter) == 1
        assert all(may_hold(ref.id_filter[0], job.id) for job in op.jobs)
        assert ref.dedupe_created == max(job.created_at for job in op.jobs)
    assert d.doc.dead.filtered.keys() == {op.ref.key for op in ops}
    assert decode(encode(d.doc)) == d.doc  # the filters are in the document


def test_a_dead_spill_of_made_up_ids_carries_no_filter() -> None:
    pushes = [
        Push(id=f"g{i}", payload=b"p", queue="q", max_attempts=1, dedupe=False) for i in range(5)
    ]
    doc, _ = apply(Document.empty(), pushes, T0, DEAD_POLICY)
    doc, (claimed,) = apply(doc, [ClaimOp("w", ("q",), 10)], T0, DEAD_POLICY)
    assert isinstance(claimed, Claimed)
    fails = [Fail(j.id, j.claim.token, "boom") for j in claimed.jobs if j.claim is not None]
    doc, _ = apply(doc, fails, T0 + 1, DEAD_POLICY)
    (plan,) = plan_dead_spills(doc, DEAD_POLICY)
    op, _ = plan.build("u1")
    assert op.ref.id_filter == ()
    assert op.ref.dedupe_created is None
    doc, (res,) = apply(doc, [op], T0 + 2, DEAD_POLICY)
    assert res == Counted(3)
    assert doc.dead.filtered == {}
    assert doc.recent == {}  # made-up ids are never sent again: nothing to answer


def test_a_retried_push_of_a_dead_spilled_id_asks_to_read_its_dead_segment() -> None:
    d = Dead(7)
    first, _ = d.spill()
    asked = again(d, "j1")
    assert isinstance(asked, ReadToConfirm)
    assert asked.keys == (first.ref.key,)
    assert "j1" not in d.doc.jobs  # nothing was added
    # the broker read it and found it: it answers "a retry" itself; a push the broker
    # found absent (a false positive) is applied
    assert again(d, "j1", absent_from=(first.ref.key,)) == Pushed("j1", True)


def test_a_retry_of_a_dead_segment_moves_the_filter_to_the_ready_segments() -> None:
    d = Dead(7)
    first, _ = d.spill()
    op = d.swap(first.ref, retry=True)
    assert d.run(op).results == [Counted(3)]
    (ready,) = op.ready
    assert ready.key.startswith(SEGMENT_PREFIX)
    assert ready.id_filter
    assert ready.dedupe_created == first.ref.dedupe_created
    asked = again(d, "j1")
    assert isinstance(asked, ReadToConfirm)
    assert asked.keys == (ready.key,)  # the retried job is answered from its new place
    assert d.doc.recent == {}


def test_a_purge_of_a_dead_segment_leaves_tombstones_for_the_dedupe_jobs_in_the_window() -> None:
    d = Dead(7)
    first, _ = d.spill()
    op = d.swap(first.ref, retry=False)
    assert [job_id for job_id, _ in op.purged] == ["j0", "j1", "j2"]
    assert d.run(op).results == [Counted(3)]
    assert d.doc.recent.keys() == {"j0", "j1", "j2"}  # the filter left with the segment
    assert d.doc.dead.filtered.keys() == {ref.key for ref in d.doc.dead}
    assert again(d, "j1") == Pushed("j1", False)


def test_a_partial_purge_keeps_the_filter_of_the_jobs_that_stay() -> None:
    d = Dead(7)
    first, _ = d.spill()
    op = d.swap(first.ref, retry=False, f=DeadFilter(ids=frozenset({"j1"})))
    assert op.keep is not None
    assert [i for i, _ in op.purged] == ["j1"]
    assert d.run(op).results == [Counted(1)]
    assert set(d.doc.recent) == {"j1"}
    asked = again(d, "j2")
    assert isinstance(asked, ReadToConfirm)
    assert asked.keys == (op.keep.key,)


def test_a_purge_after_the_window_leaves_no_tombstone() -> None:
    d = Dead(7)
    first, _ = d.spill()
    op = d.swap(first.ref, retry=False)
    d.now += DEAD_POLICY.dedupe_window_s + 10
    assert d.run(op).results == [Counted(3)]
    assert d.doc.recent == {}


def test_a_set_aside_dead_segment_still_answers_and_a_takeover_reads_no_object() -> None:
    d = Dead(7)
    first, _ = d.spill()
    assert d.run(SetAside(first.ref.key, "the object is missing")).results
    assert first.ref.key in d.doc.dead.aside
    asked = again(d, "j1")
    assert isinstance(asked, ReadToConfirm)
    assert asked.keys == (first.ref.key,)
    taken = decode(encode(d.doc))  # a takeover: the filters come with the document
    assert taken.dead.filtered.keys() == d.doc.dead.filtered.keys()
    (res,) = transition(taken, [Push(id="j1", payload=b"p", queue="q")], d.now, DEAD_POLICY).results
    assert isinstance(res, ReadToConfirm)
    assert res.keys == (first.ref.key,)


def test_a_dead_segment_filter_is_dropped_after_the_window() -> None:
    d = Dead(7)
    first, _second = d.spill()
    window = DEAD_POLICY.dedupe_window_s
    d.now += window - 20
    assert isinstance(again(d, "j1"), ReadToConfirm)
    d.now += 0.25 * window + 30  # past the window (and its slack): the sweep prunes
    d.run()
    assert d.doc.dead.filtered == {}
    assert all(ref.id_filter == () and ref.dedupe_created is None for ref in d.doc.dead)
    assert d.doc.dead.find(first.ref.key) is not None  # the jobs stay, only the filter goes
    assert again(d, "j1") == Pushed("j1", True)  # as for any id past its window


# --------------------------------------------------------------------------- waiting children


def waiting_doc() -> tuple[Document, dict[str, bytes]]:
    doc, _ = apply(Document.empty(), [Push(id="p", payload=b"p")], T0, WAITING_POLICY)
    kids = [Push(id=f"c{i}", payload=b"p", after=("p",)) for i in range(6)]
    doc, _ = apply(doc, kids, T0, WAITING_POLICY)
    return spill_all(doc)


def test_a_waiting_spill_of_dedupe_jobs_writes_a_filter_and_no_tombstones() -> None:
    doc, store = waiting_doc()
    refs = list(doc.waiting_cold)
    assert sum(ref.count for ref in refs) == 6
    assert doc.recent == {}
    assert all(ref.id_filter and ref.dedupe_created is not None for ref in refs)
    assert doc.waiting_cold.filtered.keys() == store.keys()
    assert decode(encode(doc)).waiting_cold.filtered.keys() == store.keys()


def test_a_retried_push_of_a_waiting_spilled_id_asks_to_read_its_object() -> None:
    doc, _store = waiting_doc()
    key = next(ref.key for ref in doc.waiting_cold if ref.min_id <= "c2" <= ref.max_id)
    doc, (res,) = apply(doc, [Push(id="c2", payload=b"p", after=("p",))], T0 + 1, WAITING_POLICY)
    assert isinstance(res, ReadToConfirm)
    assert res.keys == (key,)
    assert "c2" not in doc.jobs


def test_a_waiting_filter_follows_settles_and_answers_while_set_aside() -> None:
    doc, _store = waiting_doc()
    ref = next(iter(doc.waiting_cold))
    doc, _ = apply(doc, [SetAside(ref.key, "the object is missing")], T0 + 1, WAITING_POLICY)
    doc = finish(doc, "p")  # the parent ends: the references are settled (replaced)
    aside = doc.waiting_cold.aside[ref.key].ref
    assert aside.after == ()
    assert doc.waiting_cold.filtered[ref.key] is aside
    job_id = ref.min_id
    doc, (res,) = apply(doc, [Push(id=job_id, payload=b"p")], T0 + 2, WAITING_POLICY)
    assert isinstance(res, ReadToConfirm)
    assert res.keys == (ref.key,)


def test_a_waiting_filter_is_dropped_after_the_window() -> None:
    doc, _ = waiting_doc()
    ref = next(iter(doc.waiting_cold))
    window = WAITING_POLICY.dedupe_window_s
    late = T0 + 1.25 * window + 2
    doc, _ = apply(doc, [], late, WAITING_POLICY)  # the sweep prunes
    assert doc.waiting_cold.filtered == {}
    assert all(r.id_filter == () and r.dedupe_created is None for r in doc.waiting_cold)
    assert doc.waiting_cold.refs[ref.key].after == ref.after  # only the filter goes
    doc, (res,) = apply(doc, [Push(id=ref.min_id, payload=b"p")], late, WAITING_POLICY)
    assert res == Pushed(ref.min_id, True)  # as for any id past its window


def test_a_cancelled_cold_child_leaves_a_tombstone_when_its_load_skips_it() -> None:
    doc, store = waiting_doc()
    ref = next(iter(doc.waiting_cold))
    doc, (res,) = apply(doc, [Cancel(ref.min_id, segment=ref.key)], T0 + 1, WAITING_POLICY)
    assert not isinstance(res, Exception), res
    assert doc.recent == {}  # the filter answers while the object is referenced
    doc = finish(doc, "p")
    doc = load_due(doc, store)
    assert not doc.waiting_cold
    assert ref.min_id in doc.recent  # skipped by the load: it left, a tombstone answers
    doc, (res,) = apply(doc, [Push(id=ref.min_id, payload=b"p")], T0 + 3, WAITING_POLICY)
    assert res == Pushed(ref.min_id, False)


# --------------------------------------------------------------------------- size


def test_twenty_thousand_dead_dedupe_jobs_spilled_leave_the_document_small() -> None:
    n = 20_000
    policy = dataclasses.replace(
        DEAD_POLICY, segment_jobs=5_000, dead_keep_jobs=10, dead_spill_jobs=10
    )
    ids = [f"w3-{i:06d}-{'x' * 8}" for i in range(n)]
    doc, _ = apply(
        Document.empty(),
        [Push(id=i, payload=b"p", queue="q", max_attempts=1) for i in ids],
        T0,
        policy,
    )
    doc, (claimed,) = apply(doc, [ClaimOp("w", ("q",), n)], T0 + 1, policy)
    assert isinstance(claimed, Claimed)
    assert len(claimed.jobs) == n
    fails = [Fail(j.id, j.claim.token, "downstream down") for j in claimed.jobs if j.claim]
    doc, _ = apply(doc, fails, T0 + 2, policy)
    plans = plan_dead_spills(doc, policy)
    ops: list[SpillDead] = [plan.build(f"u{k}")[0] for k, plan in enumerate(plans)]
    doc, results = apply(doc, ops, T0 + 3, policy)
    assert sum(r.n for r in results if isinstance(r, Counted)) == n - 10
    size = len(encode(doc))
    assert size == doc.size_bytes()
    assert size < n * 29 / 4  # tombstones alone would be 29 bytes a job
    assert size < 60_000  # about 1.25 bytes of filter a job, plus the 10 kept jobs
    assert len(doc.recent) == 0
    (res,) = transition(doc, [Push(id=ids[123], payload=b"p", queue="q")], T0 + 4, policy).results
    assert isinstance(res, ReadToConfirm)
