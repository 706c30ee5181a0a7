"""Waiting children in objects: the pure transitions (spill, settle, load, cancel)."""

from __future__ import annotations

import msgspec
import pytest

from osqueue.cli.status import set_aside_text
from osqueue.errors import Conflict, CorruptDocument, InvalidInput, JobNotFound
from osqueue.inspect.jobs import matching
from osqueue.inspect.status import status_of
from osqueue.state import (
    Cancel,
    Claimed,
    ClaimOp,
    Complete,
    Document,
    Fail,
    Policy,
    Push,
    Pushed,
    apply,
    decode,
    encode,
    finished,
    stats_of,
    transition,
)
from osqueue.state.cold_waiting import build, plan_loads, plan_spills, read
from osqueue.state.dedupe_filter import ReadToConfirm
from osqueue.state.ops import Counted, LoadWaiting, Ok, Readmit, SetAside
from osqueue.state.waiting_refs import WaitingRef

T0 = 1_800_000_000.0
POLICY = Policy(waiting_spill_above_jobs=5, waiting_object_jobs=4)


def push(doc: Document, job_id: str, *after: str, **kw: object) -> Document:
    doc, (res,) = apply(doc, [Push(id=job_id, payload=b"p", after=after, **kw)], T0, POLICY)  # type: ignore[arg-type]
    assert isinstance(res, Pushed), res
    return doc


def spill_all(doc: Document) -> tuple[Document, dict[str, bytes]]:
    """What the broker does: write each planned object, then commit its SpillWaiting."""
    store: dict[str, bytes] = {}
    ops = []
    for n, jobs in enumerate(plan_spills(doc, POLICY)):
        op, data = build(jobs, f"u{n}", [doc.encoded_job(j.id) for j in jobs])
        store[op.ref.key] = data
        ops.append(op)
    doc, results = apply(doc, ops, T0, POLICY)
    assert all(not isinstance(r, Exception) for r in results), results
    return doc, store


def load_due(doc: Document, store: dict[str, bytes]) -> Document:
    """Load every due object, one commit each (as the broker does)."""
    while plans := plan_loads(doc, POLICY, set()):
        (ref,) = plans
        t = transition(doc, [LoadWaiting(ref.key, tuple(read(ref, store[ref.key])))], T0, POLICY)
        assert not isinstance(t.results[0], Exception), t.results[0]
        assert t.dropped_segments == [ref.key]
        doc = t.doc
    return doc


def finish(doc: Document, job_id: str, *, ok: bool = True) -> Document:
    doc, (res,) = apply(doc, [ClaimOp("w", ("default",), 100)], T0, POLICY)
    assert isinstance(res, Claimed)
    job = doc.jobs[job_id]
    assert job.claim is not None
    op = Complete(job_id, job.claim.token) if ok else Fail(job_id, job.claim.token, "boom")
    doc, (res,) = apply(doc, [op], T0, POLICY)
    assert not isinstance(res, Exception), res
    return doc


def test_a_fan_in_moves_to_objects_and_comes_back_queued_when_the_parent_completes() -> None:
    doc = push(Document.empty(), "p")
    for i in range(10):
        doc = push(doc, f"c{i:02d}", "p")
    doc, store = spill_all(doc)
    assert len(store) == 3  # 4 + 4 + 2
    assert not any(j.status == "waiting" for j in doc.jobs.values())
    assert stats_of(doc, T0).queues["default"].waiting == 10  # from the references
    assert matching(doc, "default", "waiting") == 10  # osqueue jobs' totals too
    assert matching(doc, None, None) == 11
    assert list(doc.waiting_cold.by_parent) == ["p"]
    assert decode(encode(doc)) == doc  # the references survive a round trip
    assert plan_loads(doc, POLICY, set()) == []  # the parent still runs
    doc = load_due(finish(doc, "p"), store)
    assert not doc.waiting_cold
    assert sorted(j.id for j in doc.jobs.values() if j.status == "queued") == [
        f"c{i:02d}" for i in range(10)
    ]


def test_a_child_of_many_parents_is_one_job_in_one_object_until_the_last_parent_ends() -> None:
    doc = Document.empty()
    parents = [f"p{i:03d}" for i in range(12)]
    for p in parents:
        doc = push(doc, p)
    doc = push(doc, "child", *parents)
    doc, store = spill_all(doc)
    (ref,) = doc.waiting_cold
    assert ref.count == 1
    assert len(doc.waiting_cold.by_parent) == 12
    for p in parents[:-1]:
        doc = finish(doc, p)
        assert plan_loads(doc, POLICY, set()) == []
    (ref,) = doc.waiting_cold
    assert ref.after == (parents[-1],)
    doc = load_due(finish(doc, parents[-1]), store)
    assert doc.jobs["child"].status == "queued"
    assert doc.jobs["child"].after == ()


def test_a_dead_parent_cancels_cold_children_and_runs_those_that_asked_to_run() -> None:
    doc = push(Document.empty(), "p", max_attempts=1)
    for i in range(5):
        doc = push(doc, f"k{i}", "p")
    for i in range(5):
        doc = push(doc, f"r{i}", "p", on_parent_failure="run")
    doc = push(doc, "grandchild", "k0")  # hot: waits for a cold child
    doc, store = spill_all(doc)
    assert "k0" not in doc.jobs
    assert doc.jobs["grandchild"].status == "waiting"
    doc = load_due(finish(doc, "p", ok=False), store)
    assert all(finished(doc, f"k{i}") == "cancelled" for i in range(5))
    assert all(doc.jobs[f"r{i}"].status == "queued" for i in range(5))
    assert "grandchild" not in doc.jobs  # the cancel spread down
    assert finished(doc, "grandchild") == "cancelled"


def test_a_cold_child_is_cancelled_by_id_and_skipped_on_load() -> None:
    doc = push(Document.empty(), "p")
    for i in range(5):
        doc = push(doc, f"c{i}", "p")
    doc, store = spill_all(doc)
    key = next(r.key for r in doc.waiting_cold if r.min_id <= "c1" <= r.max_id)
    doc, (res,) = apply(doc, [Cancel("c1", segment=key)], T0, POLICY)
    assert not isinstance(res, Exception), res
    assert finished(doc, "c1") == "cancelled"
    assert stats_of(doc, T0).queues["default"].waiting == 4
    doc, (again,) = apply(doc, [Cancel("c1", segment=key)], T0, POLICY)
    assert isinstance(again, JobNotFound)
    doc = load_due(finish(doc, "p"), store)
    assert "c1" not in doc.jobs
    assert sorted(j for j in doc.jobs if j != "p") == ["c0", "c2", "c3", "c4"]


def test_a_spill_whose_jobs_changed_fails_alone_and_changes_nothing() -> None:
    doc = push(Document.empty(), "p")
    for i in range(5):
        doc = push(doc, f"c{i}", "p")
    plans = plan_spills(doc, POLICY)
    op, _ = build(plans[0], "u0")
    doc = finish(doc, "p")  # the children are queued now: the snapshot is stale
    before = encode(doc)
    after, (res,) = apply(doc, [op], T0, POLICY)
    assert isinstance(res, Conflict)
    assert not after.waiting_cold
    assert encode(doc) == before


def test_a_load_that_does_not_match_its_reference_is_refused() -> None:
    doc = push(Document.empty(), "p")
    for i in range(5):
        doc = push(doc, f"c{i}", "p")
    doc, store = spill_all(doc)
    ref = next(iter(doc.waiting_cold))
    jobs = tuple(read(ref, store[ref.key]))
    _, (early,) = apply(doc, [LoadWaiting(ref.key, jobs)], T0, POLICY)
    assert isinstance(early, Conflict)  # its parent still runs
    doc = finish(doc, "p")
    _, (short,) = apply(doc, [LoadWaiting(ref.key, jobs[:-1])], T0, POLICY)
    assert isinstance(short, Exception)
    assert not isinstance(short, Conflict)
    with pytest.raises(CorruptDocument):
        read(ref, store[ref.key][:-2] + b"\n")


def test_a_push_naming_a_cold_child_waits_for_it_and_a_retried_push_of_one_is_known() -> None:
    doc = push(Document.empty(), "p")
    for i in range(5):
        doc = push(doc, f"c{i}", "p")
    doc, _ = spill_all(doc)
    doc = push(doc, "g", "c3")
    assert doc.jobs["g"].status == "waiting"
    doc, (res,) = apply(doc, [Push(id="c2", payload=b"p", after=("p",))], T0, POLICY)
    # its object's filter answers: the broker reads the object, finds it, says "a retry"
    assert isinstance(res, ReadToConfirm)
    assert res.keys == ("waiting/u0.jsonl",)
    assert "c2" not in doc.jobs


def test_a_broken_reference_names_its_field() -> None:
    doc = push(Document.empty(), "p")
    for i in range(5):
        doc = push(doc, f"c{i}", "p")
    doc, _ = spill_all(doc)
    raw = msgspec.json.decode(encode(doc))
    raw["waiting"][0]["key"] = "segments/x.jsonl"
    with pytest.raises(CorruptDocument) as err:
        decode(msgspec.json.encode(raw))
    assert err.value.path == "$.waiting[0].key"


def test_a_queue_without_dependencies_carries_no_section() -> None:
    doc = push(push(Document.empty(), "a"), "b")
    assert b'"waiting"' not in encode(doc)
    assert isinstance(WaitingRef, type)


def test_a_queue_that_does_not_drain_holds_back_only_its_own_children() -> None:
    policy = Policy(waiting_spill_above_jobs=5, waiting_object_jobs=10, waiting_load_below_queued=3)
    doc = push(Document.empty(), "p", queue="b")
    for i in range(5):
        doc = push(doc, f"c{i}", "p", queue="b")
    doc, _ = spill_all(doc)
    for i in range(4):  # a queue nobody claims from (paused, say)
        doc = push(doc, f"other{i}", queue="a")
    doc, (res,) = apply(doc, [ClaimOp("w", ("b",), 1)], T0, POLICY)
    assert isinstance(res, Claimed)
    doc, _ = apply(doc, [Complete("p", res.jobs[0].claim.token)], T0, POLICY)  # type: ignore[union-attr]
    first, _ = doc.waiting_cold  # (5 children: 4 + 1)
    assert plan_loads(doc, policy, set()) == [first]
    for i in range(3):  # its own queue full: it waits
        doc = push(doc, f"mine{i}", queue="b")
    assert plan_loads(doc, policy, set()) == []


def test_an_object_set_aside_is_counted_apart_still_settled_and_due_once_readmitted() -> None:
    doc = push(Document.empty(), "p")
    for i in range(10):
        doc = push(doc, f"c{i:02d}", "p")
    doc, store = spill_all(doc)
    first = next(iter(doc.waiting_cold))
    payloads = set(doc.waiting_cold.payloads)
    doc, (res,) = apply(doc, [SetAside(first.key, "the object is missing")], T0, POLICY)
    assert res == Ok()
    assert doc.waiting_cold.holds(first.key)  # never an orphan
    assert doc.waiting_cold.payloads == payloads  # its payload objects held
    q = stats_of(doc, T0).queues["default"]
    assert (q.waiting, q.set_aside, q.set_aside_segments) == (10 - first.count, first.count, 1)
    assert decode(encode(doc)) == doc  # the set-aside list survives a round trip
    assert len(encode(doc)) == doc.size_bytes()
    (entry,) = status_of("mem://x", doc, T0)["set_aside_segments"]  # status, top, list
    assert (entry["key"], entry["jobs"], entry["first_seq"]) == (first.key, first.count, None)
    text = set_aside_text([entry])
    assert text is not None
    assert first.key in text.plain
    assert "None" not in text.plain
    doc, (again,) = apply(doc, [SetAside(first.key, "broken")], T0, POLICY)
    assert isinstance(again, Conflict)
    doc = load_due(finish(doc, "p"), store)  # the parent ends meanwhile
    assert list(doc.waiting_cold) == []  # the others loaded; the set-aside one not
    assert doc.waiting_cold.aside[first.key].ref.after == ()  # its parent struck anyway
    doc, (res,) = apply(doc, [Readmit(first.key)], T0, POLICY)
    assert res == Counted(first.count)
    assert plan_loads(doc, POLICY, set()) == [doc.waiting_cold.refs[first.key]]  # due at once
    doc = load_due(doc, store)
    queued = sorted(j.id for j in doc.jobs.values() if j.status == "queued")
    assert queued == [f"c{i:02d}" for i in range(10)]  # each once


def test_a_readmit_of_an_object_not_set_aside_names_the_key() -> None:
    doc = push(Document.empty(), "p")
    for i in range(6):
        doc = push(doc, f"c{i}", "p")
    doc, _ = spill_all(doc)
    ref = next(iter(doc.waiting_cold))
    for key in (ref.key, "waiting/never-was.jsonl"):
        doc, (res,) = apply(doc, [Readmit(key)], T0, POLICY)
        assert isinstance(res, InvalidInput)
        assert res.field == "key"
        assert key in str(res)
    before = doc.waiting_cold.copy()
    doc, (res,) = apply(doc, [SetAside(ref.key, "")], T0, POLICY)
    assert isinstance(res, InvalidInput)
    assert res.field == "reason"
    assert doc.waiting_cold == before
