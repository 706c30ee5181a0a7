"""A push naming a parent whose entry of the record was sealed into an object (pure).

The transition asks (``ReadToConfirm`` naming the parents and the objects),
the broker reads and sends the push again with what it found
(``Push.sealed_parents``); entries kept only for children (``held``) are
sealed into objects of their own, bounded by ``max_finished_jobs``."""

from __future__ import annotations

import msgspec

from osqueue.errors import JobNotFound
from osqueue.state import (
    Claimed,
    ClaimOp,
    Complete,
    Document,
    MarkArchived,
    Policy,
    Push,
    Pushed,
    ResultData,
    apply,
    decode,
    encode,
)
from osqueue.state.dedupe_filter import ReadToConfirm
from osqueue.state.finished_objects import build, plan_seal
from osqueue.state.ops import ParentRead
from osqueue.state.waiting_refs import WaitingRef

T0 = 1_800_000_000.0
#: no TTL anywhere: an entry is kept only for the children that may name it (held)
HELD = Policy(finished_seal_above_entries=3, finished_object_entries=4, max_finished_jobs=6)
#: a TTL: every entry is kept for its result (none held)
KEPT = Policy(finished_seal_above_entries=3, finished_object_entries=4, result_ttl_s=600.0)


def finish(doc: Document, ids: list[str], policy: Policy, *, with_result: bool = False) -> Document:
    """Push, claim and complete ``ids`` (with a result each if asked)."""
    doc, pushed = apply(doc, [Push(id=i, payload=b"p", queue="w") for i in ids], T0, policy)
    assert all(isinstance(r, Pushed) for r in pushed), pushed
    doc, (claimed,) = apply(doc, [ClaimOp("w", ("w",), len(ids))], T0, policy)
    assert isinstance(claimed, Claimed)
    completes = [
        Complete(j.id, j.claim.token, ResultData("json", 1, value=b"1") if with_result else None)  # type: ignore[union-attr]
        for j in claimed.jobs
    ]
    doc, outs = apply(doc, completes, T0, policy)
    assert all(not isinstance(r, Exception) for r in outs), outs
    versions = {j.done_version for j in doc.jobs.values() if j.status == "done"}
    doc, _ = apply(doc, [MarkArchived(tuple(v for v in versions if v is not None))], T0, policy)
    assert not any(j.id in doc.jobs for j in claimed.jobs)  # archived: only the record knows
    return doc


def use_dependencies(doc: Document, policy: Policy) -> Document:
    """A push naming a live parent: dependencies are in use from now on."""
    ops = [Push(id="zp", payload=b"", queue="x"), Push(id="zc", payload=b"", after=("zp",))]
    doc, outs = apply(doc, ops, T0, policy)
    assert all(isinstance(r, Pushed) for r in outs), outs
    return doc


def seal(doc: Document, policy: Policy, unique: str) -> Document:
    entries = plan_seal(doc, T0, policy)
    assert entries
    op, _ = build(entries, unique)
    doc, (res,) = apply(doc, [op], T0, policy)
    assert not isinstance(res, Exception), res
    return doc


def test_a_push_naming_a_sealed_parent_asks_the_broker_and_changes_nothing() -> None:
    doc = finish(use_dependencies(Document.empty(), HELD), ["a1", "a2", "a3"], HELD)
    assert all(e.held for e in doc.finished)
    doc = seal(doc, HELD, "u1")
    (ref,) = doc.finished.sealed
    assert ref.held
    assert "a2" not in doc.finished
    assert "a2" not in doc.jobs
    after, (asked,) = apply(doc, [Push(id="c", payload=b"", after=("zp", "a2"))], T0, HELD)
    assert isinstance(asked, ReadToConfirm)
    assert asked.parents == ("a2",)
    assert asked.keys == (ref.key,)
    assert after.jobs.keys() == doc.jobs.keys()
    assert after.finished == doc.finished
    assert after.stats.pushed == doc.stats.pushed


def test_the_push_sent_again_with_the_parent_found_is_placed() -> None:
    doc = finish(use_dependencies(Document.empty(), HELD), ["a1", "a2", "a3"], HELD)
    doc = seal(doc, HELD, "u1")
    (ref,) = doc.finished.sealed
    found = ParentRead("a2", "done", (ref.key,))
    op = Push(id="c", payload=b"", after=("zp", "a2"), sealed_parents=(found,))
    doc, (res,) = apply(doc, [op], T0, HELD)
    assert isinstance(res, Pushed)
    assert doc.jobs["c"].status == "waiting"
    assert doc.jobs["c"].after == ("zp",)  # a2 is done: only the live parent is pending
    alone = Push(id="d", payload=b"", after=("a2",), sealed_parents=(found,))
    doc, (res,) = apply(doc, [alone], T0, HELD)
    assert isinstance(res, Pushed)
    assert doc.jobs["d"].status == "queued"


def test_a_parent_read_as_cancelled_cancels_the_child_and_one_not_found_is_refused() -> None:
    doc = finish(use_dependencies(Document.empty(), HELD), ["a1", "a2", "a3"], HELD)
    doc = seal(doc, HELD, "u1")
    (ref,) = doc.finished.sealed
    cancelled = ParentRead("a2", "cancelled", (ref.key,))
    op = Push(id="c", payload=b"", after=("a2",), sealed_parents=(cancelled,))
    doc, (res,) = apply(doc, [op], T0, HELD)
    assert isinstance(res, Pushed)
    assert "c" not in doc.jobs
    assert doc.finished.get("c") is not None  # recorded as cancelled
    missing = ParentRead("a2", None, (ref.key,))
    op = Push(id="e", payload=b"", after=("a2",), sealed_parents=(missing,))
    _, (refused,) = apply(doc, [op], T0, HELD)
    assert isinstance(refused, JobNotFound)


def test_an_id_out_of_every_sealed_objects_bounds_is_refused_without_a_read() -> None:
    doc = finish(use_dependencies(Document.empty(), HELD), ["a1", "a3", "a5"], HELD)
    doc = seal(doc, HELD, "u1")
    (ref,) = doc.finished.sealed
    outside = Push(id="c", payload=b"", after=("b9",))  # beyond the id bounds
    _, (res,) = apply(doc, [outside], T0, HELD)
    assert isinstance(res, JobNotFound)
    inside = Push(id="c", payload=b"", after=("a4",))  # in bounds: read, and not there
    _, (res,) = apply(doc, [inside], T0, HELD)
    assert isinstance(res, ReadToConfirm)
    read = msgspec.structs.replace(inside, sealed_parents=(ParentRead("a4", None, (ref.key,)),))
    _, (res,) = apply(doc, [read], T0, HELD)
    assert isinstance(res, JobNotFound)
    expired = apply(doc, [inside], T0 + HELD.dependency_window_s + 1, HELD)[1][0]
    assert isinstance(expired, JobNotFound)  # an expired object is not asked


def test_a_parent_sealed_before_dependencies_came_into_use_is_found() -> None:
    """The documented gap: an entry sealed (with its result) while no push named
    parents; a later push naming it asked nothing and got JobNotFound."""
    doc = finish(Document.empty(), ["a1", "a2", "a3"], KEPT, with_result=True)
    doc = seal(doc, KEPT, "u1")
    (ref,) = doc.finished.sealed
    assert not ref.held
    assert doc.dependencies_at is None
    _, (asked,) = apply(doc, [Push(id="c", payload=b"", after=("a2",))], T0, KEPT)
    assert isinstance(asked, ReadToConfirm)
    assert asked.parents == ("a2",)


def test_sealing_goes_on_while_dependencies_are_in_use_held_and_results_apart() -> None:
    doc = use_dependencies(Document.empty(), HELD)
    doc = finish(doc, ["h1", "h2", "h3"], HELD)
    policy = HELD  # a result given is kept (an hour by default): not held
    doc = finish(doc, ["r1", "r2"], policy, with_result=True)
    planned = plan_seal(doc, T0, policy)
    assert [e.id for e in planned] == ["h1", "h2", "h3"]  # the held ones, apart
    doc = seal(doc, policy, "u1")
    doc = finish(doc, ["r3"], policy, with_result=True)
    assert [e.id for e in plan_seal(doc, T0, policy)] == ["r1", "r2", "r3"]
    doc = seal(doc, policy, "u2")
    held, kept = doc.finished.sealed
    assert held.held
    assert not kept.held
    assert decode(encode(doc)) == doc


def test_held_objects_past_max_finished_jobs_are_dropped_oldest_first() -> None:
    doc = use_dependencies(Document.empty(), HELD)
    keys = []
    for n in range(3):
        doc = finish(doc, [f"h{n}{i}" for i in range(4)], HELD)
        doc = seal(doc, HELD, f"u{n}")
        keys.append(list(doc.finished.sealed.refs)[-1])
    # 12 held entries sealed, at most 6 kept: the oldest objects went, counted
    assert list(doc.finished.sealed.refs) == keys[2:]
    assert doc.finished.sealed.held_entries == 4
    assert doc.stats.finished_evicted == 8
    _, (res,) = apply(doc, [Push(id="c", payload=b"", after=("h00",))], T0, HELD)
    assert isinstance(res, JobNotFound)  # evicted, as an entry past the cap always was


def test_a_sealed_parent_within_a_cold_objects_id_bounds_is_read_not_taken_for_pending() -> None:
    """A waiting object whose id bounds happen to hold a finished parent: the id
    bounds alone said "maybe live", and the child waited for a parent that had
    long finished (found by the waiting-cold seeds 15, 36 and 37)."""
    doc = finish(use_dependencies(Document.empty(), HELD), ["a1", "a2", "a3"], HELD)
    doc = seal(doc, HELD, "u1")
    (ref,) = doc.finished.sealed
    doc.waiting_cold.add(
        WaitingRef(
            key="waiting/w.jsonl",
            count=1,
            size_bytes=10,
            sha256="0" * 64,
            min_id="a0",
            max_id="a9",
            queue="q",
            after=("zp",),
        )
    )
    child = Push(id="c", payload=b"", after=("a2",))
    _, (asked,) = apply(doc, [child], T0, HELD)
    assert isinstance(asked, ReadToConfirm)
    found = msgspec.structs.replace(child, sealed_parents=(ParentRead("a2", "done", (ref.key,)),))
    doc2, (res,) = apply(doc, [found], T0, HELD)
    assert isinstance(res, Pushed)
    assert doc2.jobs["c"].status == "queued"
    absent = msgspec.structs.replace(child, sealed_parents=(ParentRead("a2", None, (ref.key,)),))
    doc3, (res,) = apply(doc, [absent], T0, HELD)
    assert isinstance(res, Pushed)  # not in the sealed record: maybe live in the object
    assert doc3.jobs["c"].after == ("a2",)
