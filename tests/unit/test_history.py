"""The per-minute history ring the broker writes into the document."""

from __future__ import annotations

from osqueue.state import ClaimOp, Complete, Document, Push, decode, encode, transition
from osqueue.state.history import KEEP_MINUTES, minute_of

T0 = 1_800_000_000.0  # a whole minute
assert T0 % 60 == 0


def test_the_first_commit_of_a_minute_samples_the_counters_and_depths() -> None:
    t = transition(Document.empty(), [Push("a", b"x", queue="q1"), Push("b", b"x")], T0 + 5)
    (sample,) = t.doc.history
    assert sample.at.timestamp() == T0
    assert (sample.pushed, sample.completed, sample.failed, sample.dead) == (2, 0, 0, 0)
    assert sample.depth == {"q1": 1, "default": 1}


def test_later_commits_of_the_same_minute_add_nothing_the_next_minute_adds_one() -> None:
    doc = transition(Document.empty(), [Push("a", b"x")], T0).doc
    doc = transition(doc, [ClaimOp("w", ("default",), 1)], T0 + 59).doc
    assert len(doc.history) == 1
    token = doc.jobs["a"].claim.token  # type: ignore[union-attr]
    doc = transition(doc, [Complete("a", token)], T0 + 61).doc
    assert [s.at.timestamp() for s in doc.history] == [T0, T0 + 60]
    assert doc.history[-1].completed == 1
    assert doc.history[-1].depth == {}


def test_an_hour_is_kept_and_a_clock_stepped_back_adds_nothing() -> None:
    doc = Document.empty()
    for minute in range(KEEP_MINUTES + 5):
        doc = transition(doc, [], T0 + 60 * minute).doc
    assert len(doc.history) == KEEP_MINUTES
    assert doc.history[-1].at.timestamp() == T0 + 60 * (KEEP_MINUTES + 4)
    before = doc.history
    doc = transition(doc, [], T0).doc  # back in time
    assert doc.history == before


def test_history_survives_encoding_and_its_size_is_counted() -> None:
    doc = transition(Document.empty(), [Push("a", b"x")], T0 + 1).doc
    doc = transition(doc, [], T0 + 61).doc
    data = encode(doc)
    assert b'"history":[' in data
    assert decode(data).history == doc.history
    assert doc.size_bytes() == len(data)
    assert minute_of(T0 + 61) == T0 + 60
