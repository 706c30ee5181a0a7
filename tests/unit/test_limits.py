"""Queue settings in the pure transitions: pause, the token bucket, and the caps."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from osqueue.errors import CorruptDocument, InvalidInput
from osqueue.state import (
    Claimed,
    ClaimOp,
    Complete,
    Document,
    Push,
    QueueSet,
    SetQueue,
    apply,
    claimable,
    decode,
    encode,
    next_capacity_at,
    stats_of,
)
from osqueue.state.limits import gated

T0 = 1_800_000_000.0


def pushed(doc: Document, n: int, now: float = T0, **kw: object) -> Document:
    ops = [Push(id=f"j{doc.next_seq + i}", payload=b"p", queue="q", **kw) for i in range(n)]  # type: ignore[arg-type]
    doc, res = apply(doc, ops, now)
    assert all(not isinstance(r, Exception) for r in res), res
    return doc


def set_queue(doc: Document, now: float = T0, **kw: object) -> Document:
    doc, (res,) = apply(doc, [SetQueue("q", **kw)], now)  # type: ignore[arg-type]
    assert isinstance(res, QueueSet), res
    return doc


def claim(
    doc: Document, now: float, n: int = 100, queues: tuple[str, ...] = ("q",)
) -> tuple[Document, list[str]]:
    doc, (res,) = apply(doc, [ClaimOp("w", queues, n)], now)
    assert isinstance(res, Claimed), res
    return doc, [j.id for j in res.jobs]


def complete(doc: Document, job_id: str, now: float) -> Document:
    job = doc.jobs[job_id]
    assert job.claim is not None
    doc, (_res,) = apply(doc, [Complete(job_id, job.claim.token)], now)
    return doc


def test_a_paused_queue_gives_nothing_and_resuming_gives_it_back() -> None:
    doc = set_queue(pushed(Document.empty(), 3), paused=True)
    doc, got = claim(doc, T0)
    assert got == []
    assert not claimable(doc, ["q"], T0)
    assert stats_of(doc, T0).queues["q"].paused
    doc = pushed(doc, 1)  # pushes still land
    doc = set_queue(doc, paused=False)
    assert "q" not in doc.queue_settings  # nothing in force: the entry leaves
    doc, got = claim(doc, T0)
    assert len(got) == 4


def test_max_claimed_caps_the_claimed_jobs_across_claims_and_completion_frees_room() -> None:
    doc = set_queue(pushed(Document.empty(), 5), max_claimed=2)
    doc, first = claim(doc, T0)
    doc, second = claim(doc, T0)
    assert (len(first), second) == (2, [])
    assert not claimable(doc, ["q"], T0)
    doc = complete(doc, first[0], T0 + 1)
    assert claimable(doc, ["q"], T0 + 1)
    doc, third = claim(doc, T0 + 1)
    assert len(third) == 1


def test_the_token_bucket_gives_burst_then_rate() -> None:
    doc = set_queue(pushed(Document.empty(), 50), rate_per_s=2.0, burst=3)
    doc, got = claim(doc, T0)
    assert len(got) == 3
    doc, got = claim(doc, T0 + 0.4)
    assert got == []
    assert next_capacity_at(doc, T0 + 0.4) == pytest.approx(T0 + 0.5)
    doc, got = claim(doc, T0 + 0.5)
    assert len(got) == 1
    doc, got = claim(doc, T0 + 10)  # a long quiet spell refills only to the burst
    assert len(got) == 3


def test_the_bucket_is_document_state_so_a_takeover_does_not_refill_it() -> None:
    doc = set_queue(pushed(Document.empty(), 50), rate_per_s=1.0, burst=5)
    doc, got = claim(doc, T0)
    assert len(got) == 5
    taken_over = decode(encode(doc))  # what a new broker reads
    taken_over, got = claim(taken_over, T0 + 0.5)
    assert got == []
    taken_over, got = claim(taken_over, T0 + 1.0)
    assert len(got) == 1


def test_the_default_burst_is_one_second_of_the_rate() -> None:
    doc = set_queue(pushed(Document.empty(), 50), rate_per_s=7.5)
    doc, got = claim(doc, T0)
    assert len(got) == 8


def test_a_clock_stepping_back_earns_no_tokens_twice() -> None:
    doc = set_queue(pushed(Document.empty(), 50), rate_per_s=1.0, burst=1)
    doc, got = claim(doc, T0 + 10)
    assert len(got) == 1
    doc, got = claim(doc, T0)  # ten seconds back: nothing
    assert got == []
    doc, got = claim(doc, T0 + 10.5)
    assert got == []
    doc, got = claim(doc, T0 + 11)
    assert len(got) == 1


def test_group_cap_holds_one_tenant_back_and_lets_the_others_run() -> None:
    doc = set_queue(Document.empty(), max_claimed_per_group=1)
    doc = pushed(doc, 4, group="a")  # a's backlog first in claim order
    doc = pushed(doc, 2, group="b")
    doc = pushed(doc, 1)  # no group: not capped by it
    doc, got = claim(doc, T0)
    assert [doc.jobs[i].group for i in got] == ["a", "b", None]
    assert claimable(doc, ["q"], T0) is False
    assert stats_of(doc, T0).queues["q"].depth == 4
    a_job = got[0]
    doc = complete(doc, a_job, T0 + 1)
    doc, got = claim(doc, T0 + 1)
    assert [doc.jobs[i].group for i in got] == ["a"]
    assert got == ["j2"]  # a's next, in order


def test_removing_the_group_cap_puts_the_held_jobs_back_in_order() -> None:
    doc = set_queue(Document.empty(), max_claimed_per_group=1)
    doc = pushed(doc, 3, group="a")
    doc, got = claim(doc, T0)
    assert got == ["j1"]
    doc = set_queue(doc, max_claimed_per_group=0)
    assert "q" not in doc.queue_settings
    doc, got = claim(doc, T0)
    assert got == ["j2", "j3"]


def test_limits_of_one_queue_leave_the_other_queues_of_a_claim_alone() -> None:
    doc = set_queue(pushed(Document.empty(), 3), paused=True)
    doc, _ = apply(doc, [Push(id="o1", payload=b"p", queue="other")], T0)
    doc, got = claim(doc, T0, queues=("q", "other"))
    assert got == ["o1"]


@pytest.mark.parametrize(
    ("kw", "field"),
    [
        ({"rate_per_s": -1.0}, "rate_per_s"),
        ({"rate_per_s": float("inf")}, "rate_per_s"),
        ({"burst": -1}, "burst"),
        ({"burst": True}, "burst"),
        ({"max_claimed": 1.5}, "max_claimed"),
        ({"max_claimed_per_group": -2}, "max_claimed_per_group"),
        ({"paused": "yes"}, "paused"),
    ],
)
def test_bad_settings_are_refused_naming_the_field(kw: dict[str, object], field: str) -> None:
    doc, (res,) = apply(Document.empty(), [SetQueue("q", **kw)], T0)  # type: ignore[arg-type]
    assert isinstance(res, InvalidInput)
    assert res.field == field
    assert not doc.queue_settings


def test_settings_round_trip_as_format_4_and_bad_ones_are_corrupt() -> None:
    doc = set_queue(pushed(Document.empty(), 3), rate_per_s=5.0, max_claimed=2, paused=False)
    doc, _ = claim(doc, T0)
    data = encode(doc)
    assert len(data) == doc.size_bytes()
    assert decode(data) == doc
    assert b'"format":4' in data
    with pytest.raises(CorruptDocument) as err:
        decode(data.replace(b'"max_claimed":2', b'"max_claimed":0'))
    assert err.value.path == "$.queue_settings['q'].max_claimed"


@settings(max_examples=40, deadline=None)
@given(
    st.lists(
        st.tuples(st.floats(min_value=0.0, max_value=0.7), st.integers(1, 6), st.booleans()),
        min_size=1,
        max_size=60,
    ),
    st.sampled_from([0.5, 3.0, 10.0]),
    st.integers(1, 4),
)
def test_claims_never_pass_burst_plus_rate_times_window(
    steps: list[tuple[float, int, bool]], rate: float, burst: int
) -> None:
    doc = set_queue(pushed(Document.empty(), 400), rate_per_s=rate, burst=burst, max_claimed=5)
    now = T0
    claims: list[float] = []
    for gap, want, settle in steps:
        now += gap
        doc, got = claim(doc, now, want)
        claims.extend([now] * len(got))
        assert len(doc.index.claimed) <= 5
        if settle and doc.index.claimed:
            doc = complete(doc, sorted(doc.index.claimed)[0], now)
    for i, start in enumerate(claims):
        for j in range(i, len(claims)):
            window = claims[j] - start
            assert j - i + 1 <= burst + rate * window + 1e-6


def test_only_the_claimed_queues_settings_put_a_claim_through_the_gate() -> None:
    """A paused queue elsewhere (parents held back, say) leaves other queues' claims
    on their fast path, and they claim as before."""
    doc = set_queue(pushed(Document.empty(), 2), paused=True)  # queue "q" paused
    ops = [Push(id="o1", payload=b"p", queue="other"), Push(id="o2", payload=b"p", queue="other")]
    doc, _ = apply(doc, ops, T0)
    assert not gated(doc, ("other",))
    assert gated(doc, ("q",))
    assert gated(doc, ("other", "q"))
    doc, (claimed,) = apply(doc, [ClaimOp("w", ("other", "q"), 5)], T0)
    assert isinstance(claimed, Claimed)
    assert [j.id for j in claimed.jobs] == ["o1", "o2"]  # none of the paused queue
    assert claimable(doc, ("q",), T0) is False
