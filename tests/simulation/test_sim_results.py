"""The ``result-kept`` rule (I3, :mod:`sim.results`) on histories broken each of its ways
(``test_sim_checker`` holds its one case in the table of every rule).

A clean history (one job completed with a result, then archived) passes; then
the versions are broken the way a buggy broker would break them, one way at
a time, and the checker must name the rule.  Entries that leave for a reason
the document shows (expiry by its lease time, a counted eviction) pass.
"""

from __future__ import annotations

import msgspec
import pytest
from sim.checker import check
from sim.history import ArchiveRecord, History, Kind, Outcome, Rule
from sim.results import sim_result, sim_ttl
from sim.store import Landed

from osqueue.api import EncodedResult
from osqueue.state import (
    BrokerInfo,
    ClaimOp,
    Complete,
    Document,
    MarkArchived,
    Policy,
    Push,
    ResultData,
    encode,
    to_datetime,
    transition,
)

T0 = 1_800_000_000.0
TTL_S = 60.0
POLICY = Policy(result_ttl_s=TTL_S, result_inline_max_bytes=64)
RESULT = EncodedResult("json", b'{"rows":3}')
BIG = EncodedResult("bytes", b"B" * 100)
REF = "results/j1=01JD0000000000000000000000"


class Story:
    """A history and its landed versions, built step by step."""

    def __init__(self) -> None:
        self.history = History()
        self.landed: list[Landed] = []
        self.objects: dict[str, bytes] = {}

    def land(self, doc: Document, now: float) -> Document:
        doc.broker = BrokerInfo("b1", "b1", 1, to_datetime(now + 5.0), 5.0)  # a 5 s lease
        self.landed.append(Landed(len(self.landed), encode(doc), f"e{len(self.landed)}", "b1"))
        return doc

    def violations(self, final: Document) -> list[str]:
        """The messages of the ``result-kept`` findings (another rule's fails the test)."""
        archive = [ArchiveRecord(id="j1", version=DONE_IN, token=1, worker="w")]
        outcome = Outcome(final, archive, frozenset(), self.objects)
        found = check(self.history, self.landed, outcome)
        assert {v.rule for v in found} <= {Rule.RESULT_KEPT}, found
        return [v.message for v in found]


DONE_IN = 3


def _completed(result: EncodedResult = RESULT) -> tuple[Story, Document]:
    """Push j1, claim it (token 1), complete it with ``result``, archive it."""
    story = Story()
    doc = story.land(transition(Document.empty(), [Push(id="j1", payload=b"x")], T0).doc, T0)
    story.history.add(0, Kind.PUSH_SENT, "p", "j1")
    story.history.add(0, Kind.PUSH_ACK, "p", "j1")
    doc = story.land(transition(doc, [ClaimOp("w", ("default",), 1)], T0 + 1).doc, T0 + 1)
    story.history.add(1, Kind.CLAIMED, "w", "j1", 1)
    if len(result.data) > POLICY.result_inline_max_bytes:
        data = ResultData(result.kind, len(result.data), ref=REF)
        story.objects[REF] = result.data
    else:
        data = ResultData(result.kind, len(result.data), value=result.data)
    doc = transition(doc, [Complete("j1", 1, data)], T0 + 2, POLICY).doc
    doc = story.land(doc, T0 + 2)
    assert doc.version == DONE_IN
    story.history.add(2, Kind.COMPLETE_OK, "w", "j1", 1, result=result)
    doc = story.land(transition(doc, [MarkArchived((DONE_IN,))], T0 + 3, POLICY).doc, T0 + 3)
    return story, doc


def _next(story: Story, doc: Document, now: float, policy: Policy = POLICY) -> Document:
    return story.land(transition(doc, [], now, policy).doc, now)


def test_a_clean_history_with_results_passes() -> None:
    for result in (RESULT, BIG):
        story, doc = _completed(result)
        doc = _next(story, doc, T0 + 30)
        assert story.violations(doc) == []


def test_an_entry_that_holds_another_result_breaks_the_rule() -> None:
    story, doc = _completed()
    entry = doc.finished.get("j1")
    assert entry is not None
    doc.finished.add(
        msgspec.structs.replace(entry, result=ResultData("json", 10, value=b'{"rows":4}'))
    )
    doc = _next(story, doc, T0 + 10)
    found = story.violations(doc)
    assert len(found) == 1
    assert "holds" in found[0]


def test_an_entry_dropped_before_its_ttl_breaks_the_rule() -> None:
    story, doc = _completed()
    doc.finished.remove("j1")  # gone at T0 + 10, its TTL runs to T0 + 62
    doc = _next(story, doc, T0 + 10)
    found = story.violations(doc)
    assert len(found) == 1
    assert "before its TTL ran out" in found[0]


def test_an_entry_pruned_after_its_ttl_passes() -> None:
    story, doc = _completed()
    doc = _next(story, doc, T0 + 2 + TTL_S + 11)  # past the expiry and the prune slack
    assert "j1" not in doc.finished
    assert story.violations(doc) == []


def test_an_entry_dropped_by_an_eviction_the_document_counts_passes() -> None:
    story, doc = _completed()
    doc.finished.remove("j1")
    counted = msgspec.structs.replace(doc.stats, finished_evicted=doc.stats.finished_evicted + 1)
    evicted = transition(doc, [], T0 + 10).doc
    evicted.stats = counted
    story.land(evicted, T0 + 10)
    assert story.violations(evicted) == []


def test_a_completion_recorded_without_an_entry_breaks_the_rule() -> None:
    history = _completed()[0].history  # the same answers...
    story = Story()  # ...but the version that completed j1 recorded no entry
    story.history = history
    doc = story.land(transition(Document.empty(), [Push(id="j1", payload=b"x")], T0).doc, T0)
    doc = story.land(transition(doc, [ClaimOp("w", ("default",), 1)], T0 + 1).doc, T0 + 1)
    doc = transition(doc, [Complete("j1", 1)], T0 + 2, Policy(result_ttl_s=0.0)).doc
    doc = story.land(doc, T0 + 2)
    doc = story.land(transition(doc, [MarkArchived((DONE_IN,))], T0 + 3).doc, T0 + 3)
    found = story.violations(doc)
    assert len(found) == 1
    assert "has no entry" in found[0]


@pytest.mark.parametrize("damage", ["missing", "different"])
def test_a_result_object_gone_or_changed_breaks_the_rule(damage: str) -> None:
    story, doc = _completed(BIG)
    if damage == "missing":
        story.objects.clear()
    else:
        story.objects[REF] = b"C" * 100
    found = story.violations(doc)
    assert len(found) == 1
    assert found[0].startswith("job j1's result object")


def test_sim_results_are_a_function_of_the_id_and_token() -> None:
    assert sim_result("p0-1", 3) == sim_result("p0-1", 3)
    assert sim_result("p0-1", 3) != sim_result("p0-1", 4)
    kinds = {sim_result(f"p0-{i}", 1).kind for i in range(40)}
    assert kinds == {"text", "json", "bytes"}
    sizes = [len(sim_result(f"p0-{i}", 1).data) for i in range(40)]
    assert max(sizes) > 1024 >= min(sizes)  # some go to result objects
    ttls = {sim_ttl(f"p1-{i}") for i in range(40)}
    assert ttls == {None, 6.0}
