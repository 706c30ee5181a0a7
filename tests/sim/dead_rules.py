"""The checker's rule of dead letters in dead segments (I15).

A version's dead segments hold dead jobs (the objects come from the store's
record of every cold put, :attr:`sim.history.Outcome.segment_puts`); the
chain counts them as present (:func:`sim.findings.build_chain`), so a dead
job spilled is no departure, and NO_LOSS counts one that ends there as dead.

DEAD_RETRIED_ONCE: in every version each job is in one place (the document,
the live part of one segment, or one dead segment), and a job comes back
from dead (dead in a version, queued in the next) at most once per retry
sent: a retry that applied twice (a swap submitted again after a lost answer
or a takeover) either leaves a job in two places or brings it back twice.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Mapping

from osqueue.state import Document, StoredJob
from sim.findings import Chain, Findings, live_spilled
from sim.history import History, Kind, Rule


def check_dead(
    history: History, chain: Chain, objects: Mapping[str, list[StoredJob]], f: Findings
) -> None:
    if not any(doc.dead for doc in chain.docs):
        return
    told: set[str] = set()
    for doc in chain.docs:
        _one_place(doc, objects, told, f)
    retries = len([e for e in history.events if e.kind is Kind.DEAD_RETRY_SENT])
    revived: Counter[str] = Counter()
    for before, after in chain.steps:
        was = {**before.jobs, **chain.spilled_in(before)}
        now = {**after.jobs, **chain.spilled_in(after)}
        for job_id, job in now.items():
            old = was.get(job_id)
            if old is not None and old.status == "dead" and job.status == "queued":
                revived[job_id] += 1
    f.checked["dead jobs retried"] += len(revived)
    for job_id, n in sorted(revived.items()):
        if n > retries and job_id not in told:
            f.add(
                Rule.DEAD_RETRIED_ONCE,
                f"job {job_id} came back from dead {n} times, but {retries} retries were sent",
            )


def retried_from_dead(was: str | None, job: StoredJob, known: tuple[int, float]) -> bool:
    """``job`` (queued) was dead and came back from a dead segment's retry: a fresh,
    larger seq, its creation time kept (not a job created again)."""
    return (
        was == "dead"
        and job.status == "queued"
        and job.seq > known[0]
        and job.created_at.timestamp() == known[1]
    )


def _one_place(
    doc: Document, objects: Mapping[str, list[StoredJob]], told: set[str], f: Findings
) -> None:
    """No job of ``doc`` in two of: the document, a live segment, a dead segment."""
    where: dict[str, str] = dict.fromkeys(doc.jobs, "the document")
    for job_id in live_spilled(doc, objects):
        where.setdefault(job_id, "a segment")
    for ref in doc.dead:
        for job in objects.get(ref.key, ()):
            place = where.setdefault(job.id, ref.key)
            if place != ref.key and job.id not in told:
                told.add(job.id)
                f.add(
                    Rule.DEAD_RETRIED_ONCE,
                    f"version {doc.version}: job {job.id} is in dead segment {ref.key} and in "
                    f"{place}",
                )
