"""The document's own recent past: one sample per minute for the last hour.

Brokers are stateless, so a chart of "the last hour" (the dashboard, ``osqueue
top``) needs its data where every broker finds it: in the document.  The
first commit of each new minute appends a :class:`HistorySample` of the
document's counters (cumulative ``pushed``, ``completed``, ``failed``,
``dead``) and each queue's depth; samples older than :data:`KEEP_MINUTES` are
dropped.  A reader turns consecutive samples into rates (completed per
minute) and depths over time.  The broker writes at least once per lease
third while idle, so a serving broker misses no minute; minutes with no
broker leave gaps, which readers show as gaps.

Pure: the minute comes from the ``now`` a transition is given.
"""

from __future__ import annotations

import math
from datetime import UTC, datetime

import msgspec

#: Samples kept: one hour of minutes.
KEEP_MINUTES = 60


class HistorySample(msgspec.Struct, frozen=True, gc=False):
    """The document at the first commit of one minute."""

    #: the minute (UTC, seconds zero)
    at: datetime
    pushed: int
    completed: int
    failed: int
    dead: int
    #: queue -> jobs waiting (queued, delayed and spilled)
    depth: dict[str, int] = {}


def minute_of(now: float) -> int:
    """The Unix minute ``now`` falls in (seconds since the epoch, floored to 60)."""
    return int(now // 60) * 60


#: the history last found sampled for its minute, and when that minute ends
_sampled: tuple[tuple[HistorySample, ...], float] = ((), -math.inf)


def sampled(history: tuple[HistorySample, ...], now: float) -> bool:
    """``history`` has a sample for ``now``'s minute (or a later one: the clock
    stepped back).  Every commit asks: for the history the last call found
    sampled, before its minute ends, the answer is one comparison."""
    global _sampled
    seen, until = _sampled
    if history is seen and now < until:
        return True
    if not history:
        return False
    last = history[-1].at.timestamp()
    if last < minute_of(now):
        return False
    _sampled = (history, minute_of(last) + 60.0)
    return True


def record(
    history: tuple[HistorySample, ...],
    now: float,
    counters: tuple[int, int, int, int],
    depth: dict[str, int],
) -> tuple[HistorySample, ...]:
    """``history`` with a sample for ``now``'s minute added, if it has none yet.

    ``counters`` are (pushed, completed, failed, dead).  The same tuple comes
    back when the minute is already sampled (so a commit's cost is one
    comparison), and a clock that stepped back adds nothing."""
    minute = minute_of(now)
    if history and history[-1].at.timestamp() >= minute:
        return history
    pushed, completed, failed, dead = counters
    sample = HistorySample(
        at=datetime.fromtimestamp(minute, UTC),
        pushed=pushed,
        completed=completed,
        failed=failed,
        dead=dead,
        depth=depth,
    )
    cutoff = minute - KEEP_MINUTES * 60
    kept = tuple(s for s in history if s.at.timestamp() > cutoff)
    return (*kept, sample)
