"""The checker's rules of delayed jobs in objects (I8, with NOT_EARLY).

A delayed job (pushed with a delay, or failed with a backoff) may leave the
document for an object under ``delayed/`` and come back before it is due
(:mod:`osqueue.state.cold_delayed`).  NOT_EARLY compares a claim with the
``run_at`` of the version before it, which is the loaded job's: a load that
dropped or moved the ``run_at`` would make an early claim look on time.  So
DELAY_KEPT holds the ``run_at`` itself: from one version to the next, a job that
is queued in both (in the document or live in an object), with the same
attempts, has the same ``run_at``.  No op changes a queued job's ``run_at``; a
job's next ``run_at`` comes only with a new attempt (a failure) or from a job
that was claimed or dead (a release, a retry of a dead job).

NOT_LATE is the other side: a job in an object is back in the document (where the
delayed heap makes it claimable when due) at most :data:`LATE_BOUND_S` after its
``run_at``.  The broker loads an object ``delay_lead_s`` before its next job is due,
so a read and a commit fit in the lead.  The bound is judged on each version that
still references the object, by its broker's clock (its commit time), and counted
from the latest of: the job's ``run_at``; the version that listed the reference (a
spill landing late, a readmit); the moment that broker was up, which is its first
version after a takeover or after a stall (no version of it for longer than a
lease renewal and a margin; a version releasing the lease is not judged: its
broker stepped down before it);
and the end of its last call that the store slowed or failed (a spike, a 503, a
write held in the network: :attr:`sim.history.Outcome.calls`), a read of the
object or a read or write of the document (the load's commit waits for those),
or of its last pause or clock step.  The faults are the store's, so a load the
code delays still shows.
"""

from __future__ import annotations

import bisect
import itertools
from collections import defaultdict
from collections.abc import Sequence

from osqueue.state import StoredJob
from sim.findings import Chain, Findings
from sim.history import Outcome, Rule
from sim.node import EPOCH_S
from sim.scheduling_rules import commit_time
from sim.store import DOCUMENT_KEY, PAUSED, Landed

#: findings reported per rule at most (one bug repeats in every version)
_MAX = 20
#: a job in a delayed object is back in the document this long after its run_at at most
LATE_BOUND_S = 1.0
#: a serving broker commits a lease renewal every lease/3 at least; a longer silence
#: (plus this margin) means it was stalled, and its bound starts again
_STALL_MARGIN_S = 0.5
#: a read of an object slower than this was slowed by the store (a spike, a pause):
#: the store's calls take at most 0.3 s otherwise
_SLOW_READ_S = 0.4
#: the writer's clock moved against the store's by more than this: a step (or a write
#: held in the network); the bound starts again
_STEP_S = 0.25


def check_delays_kept(chain: Chain, f: Findings) -> None:
    """DELAY_KEPT over every step of the chain."""
    told: set[str] = set()
    for before, after in chain.steps:
        was = _queued(before.jobs, chain.spilled_in(before))
        now = _queued(after.jobs, chain.spilled_in(after))
        for job_id, old in was.items():
            new = now.get(job_id)
            if new is None or new.attempts != old.attempts or job_id in told:
                continue
            f.checked["queued jobs kept"] += 1
            if new.run_at != old.run_at and len(told) < _MAX:
                told.add(job_id)
                f.add(
                    Rule.DELAY_KEPT,
                    f"job {job_id} is queued due at {_at(old)} in version {before.version} "
                    f"and due at {_at(new)} in version {after.version}, with no new attempt",
                )


def _queued(*places: dict[str, StoredJob]) -> dict[str, StoredJob]:
    out: dict[str, StoredJob] = {}
    for jobs in places:
        for job_id, job in jobs.items():
            if job.status == "queued":
                out.setdefault(job_id, job)
    return out


def _at(job: StoredJob) -> str:
    return "now (no run_at)" if job.run_at is None else job.run_at.isoformat()


def check_not_late(chain: Chain, landed: Sequence[Landed], outcome: Outcome, f: Findings) -> None:
    """NOT_LATE over the chain (``landed``: each version's write, in chain order)."""
    lease_s = outcome.lease_s
    if lease_s is None or not any(doc.delayed for doc in chain.docs):
        return
    slowed = _slowed_reads(outcome)
    listed_at: dict[str, float] = {}  # key -> when the reference was listed
    owner: tuple[str, int] | None = None
    up_since = last_t = skew = 0.0
    told: set[str] = set()
    for doc, item in zip(chain.docs, landed, strict=True):
        t = commit_time(doc, lease_s)
        if t is None or doc.broker is None or doc.broker.address is None:
            owner = None  # (a released lease: its broker stopped serving before it)
            continue
        step = t - EPOCH_S - item.at  # the writer's clock against the store's
        serving = (doc.broker.id, doc.broker.epoch)
        stalled = t - last_t > lease_s / 3 + _STALL_MARGIN_S or abs(step - skew) > _STEP_S
        if serving != owner or stalled:
            up_since = t
        owner, last_t, skew = serving, t, step
        listed_at = {ref.key: listed_at.get(ref.key, t) for ref in doc.delayed}
        for ref in doc.delayed:
            due = ref.next_run_at.timestamp()
            stalled_until = max(
                _last_slowed(slowed, item.writer, key, item.at)
                for key in (ref.key, DOCUMENT_KEY, PAUSED)
            )
            start = max(due, listed_at[ref.key], up_since, stalled_until + EPOCH_S + step)
            f.checked["delayed loads timed"] += 1
            if t - start > LATE_BOUND_S and ref.key not in told:
                told.add(ref.key)
                f.add(
                    Rule.NOT_LATE,
                    f"version {doc.version}: delayed object {ref.key}'s next job was due "
                    f"at {ref.next_run_at.isoformat()} and is still not loaded "
                    f"{t - start:.3f}s after its bound started ({_why(start, due)})",
                )


def _slowed_reads(outcome: Outcome) -> dict[tuple[str, str], tuple[list[float], list[float]]]:
    """(node, key) -> the calls on it that the store slowed or failed: when each was
    sent (sorted), and the latest end of a read sent by then."""
    reads: dict[tuple[str, str], list[tuple[float, float]]] = defaultdict(list)
    for r in outcome.calls:
        if not r.ok or r.ended - r.sent > _SLOW_READ_S:
            reads[(r.node, r.key)].append((r.sent, r.ended))
    out: dict[tuple[str, str], tuple[list[float], list[float]]] = {}
    for where, spans in reads.items():
        spans.sort()
        ends = list(itertools.accumulate((end for _, end in spans), max))
        out[where] = ([sent for sent, _ in spans], ends)
    return out


def _last_slowed(
    slowed: dict[tuple[str, str], tuple[list[float], list[float]]],
    node: str,
    key: str,
    at: float,
) -> float:
    """The end of ``node``'s slowed reads of ``key`` sent by ``at`` (the latest; one
    still out ends after ``at``), or -inf."""
    sent, ends = slowed.get((node, key), ([], []))
    i = bisect.bisect_right(sent, at)
    return ends[i - 1] if i else float("-inf")


def _why(start: float, due: float) -> str:
    return "at its run_at" if start == due else "when its broker was up and had read it"
