"""The history checker itself: each invariant it guards really fails on a broken history.

A clean history passes; then one thing at a time is broken the way a buggy broker
would break it, and the checker must name the invariant.
"""

from __future__ import annotations

import msgspec
from sim.history import ArchiveRecord, History, Kind, Outcome, check
from sim.store import Landed

from osqueue.state import ClaimOp, Complete, Document, MarkArchived, Push, encode, transition

T0 = 1_800_000_000.0


def _clean() -> tuple[History, list[Landed], Outcome]:
    """Push j1, claim it (token 1), complete it, archive it: every step landed."""
    history = History()
    landed: list[Landed] = []

    def land(doc: Document) -> Document:
        landed.append(Landed(len(landed), encode(doc), f"e{len(landed)}", "b1"))
        return doc

    doc = land(transition(Document.empty(), [Push(id="j1", payload=b"x")], T0).doc)
    history.add(0, Kind.PUSH_SENT, "p", "j1")
    history.add(0, Kind.PUSH_ACK, "p", "j1")
    doc = land(transition(doc, [ClaimOp("w", ("default",), 1)], T0 + 1).doc)
    history.add(1, Kind.CLAIMED, "w", "j1", 1)
    doc = land(transition(doc, [Complete("j1", 1)], T0 + 2).doc)
    history.add(2, Kind.COMPLETE_OK, "w", "j1", 1)
    done_in = doc.version
    doc = land(transition(doc, [MarkArchived((done_in,))], T0 + 3).doc)
    archive = [ArchiveRecord(id="j1", version=done_in, token=1, worker="w")]
    return history, landed, Outcome(doc, archive)


def _invariants(history: History, landed: list[Landed], outcome: Outcome) -> list[str]:
    return sorted({v.invariant for v in check(history, landed, outcome)})


def test_a_clean_history_passes() -> None:
    assert _invariants(*_clean()) == []


def test_an_acknowledged_job_that_vanished_is_i1() -> None:
    history, landed, outcome = _clean()
    assert _invariants(history, landed, Outcome(outcome.final, [])) == ["I1", "I3"]


def test_a_job_nobody_pushed_and_a_double_archive_are_i2() -> None:
    history, landed, outcome = _clean()
    twice = Outcome(outcome.final, outcome.archive * 2)
    assert "I2" in _invariants(history, landed, twice)
    stranger = [msgspec.structs.replace(outcome.archive[0], id="ghost")]
    assert "I2" in _invariants(history, landed, Outcome(outcome.final, outcome.archive + stranger))


def test_completions_under_two_tokens_are_i3() -> None:
    history, landed, outcome = _clean()
    history.add(5, Kind.COMPLETE_OK, "w2", "j1", 7)
    assert "I3" in _invariants(history, landed, outcome)


def test_a_token_handed_out_twice_and_a_stale_heartbeat_are_i4() -> None:
    history, landed, outcome = _clean()
    history.add(5, Kind.CLAIMED, "w2", "j1", 1)  # token 1 again, to someone else
    assert "I4" in _invariants(history, landed, outcome)
    history, landed, outcome = _clean()
    history.add(5, Kind.CLAIMED, "w2", "j1", 9)
    history.add(6, Kind.HEARTBEAT_OK, "w", "j1", 1)  # token 1 after token 9 was handed out
    assert "I4" in _invariants(history, landed, outcome)


def test_a_version_going_back_or_not_decoding_is_i5() -> None:
    history, landed, outcome = _clean()
    back = [*landed, landed[1]]
    assert "I5" in _invariants(history, back, outcome)
    broken = [*landed, Landed(9, b'{"format":1,', "e9", "b1")]
    assert "I5" in _invariants(history, broken, outcome)
