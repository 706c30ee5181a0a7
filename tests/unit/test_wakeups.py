"""When an idle broker commits for schedule ticks (broker/core/wakeups.py): on whole
multiples of TICK_BATCH_S, so ticks that fall due within one second share a commit."""

from __future__ import annotations

from datetime import UTC, datetime

from osqueue.broker.core.wakeups import TICK_BATCH_S, commit_due, idle_timeout_s
from osqueue.state import Document, Policy, PutSchedule, Scheduled, apply, next_tick_at

T0 = datetime(2026, 1, 1, tzinfo=UTC).timestamp()


def with_schedules(*every_s: float) -> Document:
    """Schedules made at T0, one per period (``every_s`` ticks fall on its
    multiples since the epoch, and T0 is a multiple of each used here, so the
    first tick of each is at T0 + its period)."""
    doc = Document.empty()
    ops = [PutSchedule(f"s{i}", "q", every_s=period) for i, period in enumerate(every_s)]
    doc, results = apply(doc, ops, T0)
    assert all(isinstance(r, Scheduled) for r in results), results
    return doc


def test_an_idle_commit_for_a_tick_waits_for_the_next_whole_second() -> None:
    doc = with_schedules(1.25, 1.5, 1.75)  # ticks at T0 + 1.25, + 1.5 and + 1.75
    tick = next_tick_at(doc)
    assert tick == T0 + 1.25
    policy = Policy()
    assert TICK_BATCH_S == 1.0
    assert not commit_due(doc, policy, T0 + 1.3, parked=False)  # due, but not yet batched
    assert not commit_due(doc, policy, T0 + 1.99, parked=False)
    assert commit_due(doc, policy, T0 + 2.0, parked=False)  # one commit fires all three
    timeout = idle_timeout_s(doc, policy, T0 + 1.3, parked=False)
    assert timeout is not None
    assert abs(timeout - 0.7) < 1e-6
    # the commit at T0 + 2 records every tick that fell due before it
    doc, _ = apply(doc, [], T0 + 2.0)
    assert [j.queue for j in doc.jobs.values()] == ["q", "q", "q"]


def test_a_tick_on_a_whole_second_is_not_delayed() -> None:
    doc = with_schedules(2.0)  # the first tick at T0 + 2
    assert not commit_due(doc, Policy(), T0 + 1.5, parked=False)
    assert commit_due(doc, Policy(), T0 + 2.0, parked=False)
