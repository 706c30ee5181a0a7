"""The record of finished jobs sealed into objects: the pure seal, expiry, lookups."""

from __future__ import annotations

import msgspec
import pytest

from osqueue.errors import Conflict, CorruptDocument
from osqueue.state import (
    Claimed,
    ClaimOp,
    Complete,
    Document,
    Policy,
    Push,
    Pushed,
    ResultData,
    apply,
    decode,
    encode,
    finished,
)
from osqueue.state.finished_objects import build, plan_seal, read
from osqueue.state.results import answer

T0 = 1_800_000_000.0
POLICY = Policy(finished_seal_above_entries=3, finished_object_entries=4, result_ttl_s=60.0)


def done_jobs(n: int, doc: Document | None = None, now: float = T0) -> Document:
    """``n`` jobs pushed, claimed and completed with a result each."""
    doc = doc or Document.empty()
    ops = [Push(id=f"j{i:03d}", payload=b"p") for i in range(n)]
    doc, pushed = apply(doc, ops, now, POLICY)
    assert all(isinstance(r, Pushed) for r in pushed)
    doc, (claimed,) = apply(doc, [ClaimOp("w", ("default",), n)], now, POLICY)
    assert isinstance(claimed, Claimed)
    results = [ResultData("json", 1, value=b"%d" % (i % 10)) for i in range(n)]
    completes = [
        Complete(j.id, j.claim.token, result=r)  # type: ignore[union-attr]
        for j, r in zip(claimed.jobs, results, strict=True)
    ]
    doc, outs = apply(doc, completes, now, POLICY)
    assert all(not isinstance(r, Exception) for r in outs), outs
    return doc


def test_sealed_entries_leave_the_document_and_are_answered_from_the_object() -> None:
    doc = done_jobs(6)
    entries = plan_seal(doc, T0, POLICY)
    assert [e.id for e in entries] == ["j000", "j001", "j002", "j003"]
    op, data = build(entries, "u1")
    before = len(encode(doc))
    doc, (res,) = apply(doc, [op], T0, POLICY)
    assert not isinstance(res, Exception), res
    assert len(doc.finished) == 2
    assert len(encode(doc)) < before
    assert decode(encode(doc)) == doc
    hot = answer(doc, "j001", T0)  # the done job itself (until archived): no result
    assert hot is not None
    assert hot.data is None
    (ref,) = doc.finished.sealed.candidates("j001", T0)
    entry = read(ref, data)["j001"]
    assert entry.result is not None
    assert entry.result.value == b"1"
    assert finished(doc, "j004") == "done"  # still in the document


def test_a_seal_is_refused_when_an_entry_changed_not_when_dependencies_came_into_use() -> None:
    doc = done_jobs(4)
    op, _ = build(plan_seal(doc, T0, POLICY), "u1")
    push_parent, push_child = Push(id="p", payload=b""), Push(id="c", payload=b"", after=("p",))
    used_doc, _ = apply(doc, [push_parent, push_child], T0, POLICY)
    assert used_doc.dependencies_at is not None
    assert plan_seal(used_doc, T0, POLICY) == list(op.entries)  # planned while in use
    _, (sealed,) = apply(used_doc, [op], T0, POLICY)
    assert not isinstance(sealed, Exception), sealed
    gone = doc.copy()
    gone.finished.remove("j002")
    _, (stale,) = apply(gone, [op], T0, POLICY)
    assert isinstance(stale, Conflict)


def test_a_reference_leaves_once_every_entry_expired() -> None:
    doc = done_jobs(4)
    op, _ = build(plan_seal(doc, T0, POLICY), "u1")
    doc, _ = apply(doc, [op], T0, POLICY)
    doc, _ = apply(doc, [], T0 + 59.0, POLICY)
    assert doc.finished.sealed
    doc, _ = apply(doc, [], T0 + 61.0, POLICY)
    assert not doc.finished.sealed


def test_a_broken_object_or_reference_is_named() -> None:
    doc = done_jobs(4)
    op, data = build(plan_seal(doc, T0, POLICY), "u1")
    with pytest.raises(CorruptDocument):
        read(op.ref, data[:-3] + b"xx\n")
    doc, _ = apply(doc, [op], T0, POLICY)
    raw = msgspec.json.decode(encode(doc))
    raw["finished_objects"][0]["key"] = "results/x"
    with pytest.raises(CorruptDocument) as err:
        decode(msgspec.json.encode(raw))
    assert err.value.path == "$.finished_objects[0].key"


def test_an_object_built_from_the_records_encodings_is_the_same_object() -> None:
    doc = done_jobs(4)
    entries = plan_seal(doc, T0, POLICY)
    op, data = build(entries, "u1")
    again, same = build(entries, "u1", [doc.finished.encoded(e.id) for e in entries])
    assert (again, same) == (op, data)
