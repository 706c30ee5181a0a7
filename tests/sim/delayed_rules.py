"""The checker's rule of delayed jobs in objects (I8, with NOT_EARLY).

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
"""

from __future__ import annotations

from osqueue.state import StoredJob
from sim.findings import Chain, Findings
from sim.history import Rule

#: findings reported per rule at most (one bug repeats in every version)
_MAX = 20


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
