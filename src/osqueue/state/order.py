"""Claim order across queues, what is claimable, and when something comes due.

:func:`next_in_order` is the order a claim takes jobs in across the queues it
asks for (priority, then seq; a segment not loaded yet stops it; a queue's
settings may hold a queue back or pass over a group at its cap, through a
:class:`~osqueue.state.limits.Gate`).  :func:`claimable` asks it for the
broker's parked claims; :func:`next_wakeup` and :func:`next_tick_at` say
when the document next needs a look or a commit.  Pure.
"""

from __future__ import annotations

from collections.abc import Sequence

from osqueue.state.document import Document
from osqueue.state.index import ReadyEntry
from osqueue.state.limits import Gate, gated
from osqueue.state.ops import Policy
from osqueue.state.segments import Barrier, Stream


def claimable(doc: Document, queues: Sequence[str], now: float) -> bool:
    """Would a claim on ``queues`` at ``now`` get a job?  (Not while the next job in
    claim order sits in a segment: it becomes claimable when a load commits; nor
    while the queue's settings hold it back.)"""
    index = doc.index
    index.promote_due(doc.jobs, now)
    barriers = doc.segments.barriers
    gate = None
    if gated(doc, queues):
        gate = Gate(doc, queues, now)
        queues = gate.open(queues)
    if not barriers and gate is None:
        return any(index.head(q, doc.jobs) is not None for q in queues)
    return next_in_order(doc, queues, barriers, gate)[0] is not None


def behind(entry: ReadyEntry | None, barrier: Barrier) -> bool:
    """A claim stops at ``barrier``: its queue's next ready entry in the document
    (``entry``, None: none) comes after the first segment not loaded yet, so the
    next job in claim order sits in that segment.  (The one place this rule is
    written: :func:`next_in_order` and a claim's one-queue path both ask it.)"""
    return entry is None or entry > barrier


def next_in_order(
    doc: Document, queues: Sequence[str], barriers: dict[str, Barrier], gate: Gate | None = None
) -> tuple[ReadyEntry | None, str, Stream | None]:
    """The next job in claim order across ``queues``, and its queue; or, when that
    job sits in a segment, ``(None, "", its stream)``: the claim stops there.
    With a ``gate``, a queue's next job is the first whose group has room."""
    index, jobs = doc.index, doc.jobs
    best: ReadyEntry | None = None
    best_queue = ""
    stop: Barrier | None = None  # the first barrier in claim order
    stop_queue = ""
    for q in queues:
        entry = index.head(q, jobs) if gate is None else gate.head(q)
        barrier = barriers.get(q) if barriers else None
        if barrier is not None and behind(entry, barrier):
            if stop is None or barrier < stop:
                stop, stop_queue = barrier, q
        elif entry is not None and (best is None or entry < best):
            best, best_queue = entry, q
    if stop is not None and (best is None or stop < best):
        return None, "", (stop_queue, stop[0])
    return best, best_queue, None


def next_tick_at(doc: Document) -> float | None:
    """When the next schedule tick falls due: a commit is needed then (it pushes the
    tick's job), parked claims or not."""
    return doc.schedules.next_due() if doc.schedules else None


def next_wakeup(doc: Document, policy: Policy) -> float | None:
    """The earliest time a delayed job becomes due or a claim may expire."""
    times: list[float] = []
    due = doc.index.next_due(doc.jobs)
    if due is not None:
        times.append(due)
    for job_id in doc.index.claimed:
        claim = doc.jobs[job_id].claim
        if claim is not None:
            times.append(claim.heartbeat_at.timestamp() + policy.heartbeat_timeout_s)
    return min(times) if times else None
