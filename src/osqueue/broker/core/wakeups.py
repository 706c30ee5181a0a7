"""When the idle commit loop must wake: the commit loop's one wake-up hook.

An idle broker writes only to renew its lease, except when the document
itself says something is due:

* a schedule tick (:func:`osqueue.state.next_tick_at`): a commit is due then,
  claims parked or not, since the commit that finds the tick due pushes its job.
  A paused schedule's ticks wake nothing (they push no job; a commit that
  comes anyway records them as skipped).
  Ticks are fired on whole multiples of :data:`TICK_BATCH_S` (a tick is at most
  that late): 10,000 schedules of a minute fall due 167 times a second, and one
  commit a second fires them all instead of one commit each (every commit writes
  the whole document, schedules included);
* while claims are parked: a delayed job coming due or a claim expiring
  (:func:`osqueue.state.next_wakeup`, a commit is due), and a rate-limited
  queue getting a token back (:func:`osqueue.state.next_capacity_at`: the
  parked claims are woken, and their own claim is the commit).
"""

from __future__ import annotations

import math

from osqueue.state import Document, Policy, next_capacity_at, next_tick_at, next_wakeup

#: idle commits for schedule ticks come on whole multiples of this many seconds
TICK_BATCH_S = 1.0


def _tick_commit_at(doc: Document) -> float | None:
    """When an idle commit is due for the next tick (the tick's time, rounded up
    to the next multiple of :data:`TICK_BATCH_S`)."""
    tick = next_tick_at(doc)
    return None if tick is None else math.ceil(tick / TICK_BATCH_S) * TICK_BATCH_S


def commit_due(doc: Document, policy: Policy, now: float, parked: bool) -> bool:
    """Is a commit with no ops due at ``now`` (beyond the lease renewal)?"""
    if not parked and not doc.schedules.by_name:  # nothing in the document is due
        return False
    tick = _tick_commit_at(doc)
    if tick is not None and tick <= now:
        return True
    if parked:
        wake = next_wakeup(doc, policy)
        return wake is not None and wake <= now
    return False


def idle_timeout_s(doc: Document, policy: Policy, now: float, parked: bool) -> float | None:
    """How long the idle loop may sleep before something in ``doc`` is due (None:
    nothing is; the lease renewal still is)."""
    if not parked and not doc.schedules.by_name:  # no schedule, no claim waiting
        return None
    times: list[float] = []
    tick = _tick_commit_at(doc)
    if tick is not None:
        times.append(tick)
    if parked:
        for at in (next_wakeup(doc, policy), next_capacity_at(doc, now)):
            if at is not None:
                times.append(at)
    return min(times) - now if times else None
