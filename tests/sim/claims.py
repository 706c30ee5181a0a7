"""The checker's rules read from steps of the chain: counters (I3), keys (I6),
dead letters (I7), delays (I8) and claim order (I9).

Each step is a pair of consecutive versions (v, v + 1) that landed: v + 1 is
v with one batch of ops applied and the sweep run, at one time of the
writing broker's clock (``claimed_at`` of the claims it made).  What a rule
cannot see from the two versions (the order of ops inside the batch, a job
pushed and cancelled in the same batch) it does not guess: each rule below
says which cases it leaves alone, and never reports those.
"""

from __future__ import annotations

from collections import defaultdict

from osqueue.state import Document
from osqueue.state.model import StoredJob
from sim.findings import Chain, Findings
from sim.history import History, Kind, Outcome, Rule

LIVE = ("waiting", "queued", "claimed")
#: at most this many findings per rule from the step rules (one broken broker breaks
#: every later step the same way; the first few say it all)
MAX_STEP_FINDINGS = 5


def fresh_claims(before: Document, after: Document) -> list[StoredJob]:
    """The jobs ``after`` holds under a claim ``before`` did not (claimed in this step)."""
    out = []
    for job_id, job in after.jobs.items():
        claim = job.claim
        if job.status != "claimed" or claim is None:
            continue
        old = before.jobs.get(job_id)
        if old is None or old.claim is None or old.claim.token != claim.token:
            out.append(job)
    return out


# --------------------------------------------------------------------------- I3 counters


def check_counters(chain: Chain, outcome: Outcome, f: Findings) -> None:
    """COUNTERS: from each version to the next, the counters move with the jobs.

    * ``completed`` grows by the jobs that became done (exactly);
    * ``pushed`` grows by the jobs that appear for the first time, and
      ``cancelled`` by the jobs that left before they were done, plus the same
      number of each for jobs pushed and cancelled within the step (invisible in
      both versions);
    * ``dead`` grows by the jobs that became dead, plus at most the jobs that
      left undone (one could fail to dead and be cancelled in one batch).

    And at the end, ``stats.completed`` counts every job archived or done.  A
    simulated run purges nothing, so every job that leaves undone was cancelled.
    """
    told = 0
    for before, after in chain.steps:
        problems = _counter_step(chain, before, after)
        if problems and told < MAX_STEP_FINDINGS:
            told += 1
            f.add(
                Rule.COUNTERS,
                f"version {before.version} -> {after.version}: " + "; ".join(problems),
            )
    final = outcome.final
    if final is None:
        return
    finished = {rec.id for rec in outcome.archive}
    finished |= {j.id for j in final.jobs.values() if j.status == "done"}
    if final.stats.completed != len(finished):
        f.add(
            Rule.COUNTERS,
            f"stats.completed is {final.stats.completed} in version {final.version}, but "
            f"{len(finished)} jobs are archived or done",
        )


def _counter_step(chain: Chain, before: Document, after: Document) -> list[str]:
    new = sum(1 for j in after.jobs if chain.first_seen.get(j) == after.version)
    was = [*before.jobs.values(), *chain.spilled_in(before).values()]
    left = [j for j in was if j.status != "done" and not chain.holds(after, j.id)]
    became: dict[str, int] = defaultdict(int)  # (a job back after it left is NOT_REVIVED's)
    done_in: dict[str, int] = defaultdict(int)  # queue -> its jobs that became done
    for job in after.jobs.values():
        old = before.jobs.get(job.id)
        if old is None and chain.first_seen.get(job.id) != after.version:
            continue
        if old is None or old.status != job.status:
            became[job.status] += 1
            if job.status == "done":
                done_in[job.queue] += 1
    a, b = before.stats, after.stats
    pushed, completed = b.pushed - a.pushed, b.completed - a.completed
    dead, cancelled = b.dead - a.dead, b.cancelled - a.cancelled
    problems = []
    if completed != became["done"]:
        problems.append(f"completed +{completed} but {became['done']} jobs became done")
    hidden = pushed - new
    if hidden < 0 or cancelled - len(left) != hidden:
        problems.append(
            f"pushed +{pushed} with {new} new jobs, cancelled +{cancelled} with "
            f"{len(left)} jobs gone undone"
        )
    if not became["dead"] <= dead <= became["dead"] + len(left):
        problems.append(f"dead +{dead} but {became['dead']} jobs became dead")
    problems.extend(_queue_counter_step(before, after, done_in))
    return problems


_QUEUE_COUNTERS = ("pushed", "completed", "failed", "dead")


def _queue_counter_step(before: Document, after: Document, done_in: dict[str, int]) -> list[str]:
    """Each step adds to the known queues' counters what it adds to the totals (the
    simulated run removes no queue), and a queue's completions are its jobs that
    became done."""
    a, b = before.stats, after.stats
    totals = tuple(getattr(b, n) - getattr(a, n) for n in _QUEUE_COUNTERS)
    per_queue = tuple(
        sum(getattr(t, n) for t in after.queue_totals.values())
        - sum(getattr(t, n) for t in before.queue_totals.values())
        for n in _QUEUE_COUNTERS
    )
    problems = []
    if per_queue != totals:
        problems.append(
            f"the queues' counters moved by {per_queue}, the totals by {totals} "
            "(pushed, completed, failed, dead)"
        )
    for q, t in after.queue_totals.items():
        old_t = before.queue_totals.get(q)
        moved = t.completed - (old_t.completed if old_t is not None else 0)
        if moved != done_in.get(q, 0):
            problems.append(f"queue {q!r}: completed +{moved} but {done_in.get(q, 0)} became done")
    return problems


# --------------------------------------------------------------------------- I6, I7


def check_keys(chain: Chain, f: Findings) -> None:
    """KEY_UNIQUE: no version holds two live jobs with one idempotency key."""
    told: set[tuple[str, str, str]] = set()
    for doc in chain.docs:
        holders: dict[str, str] = {}
        for job in [*doc.jobs.values(), *chain.spilled_in(doc).values()]:
            if job.key is None or job.status not in LIVE:
                continue
            f.checked["live keyed jobs"] += 1
            other = holders.setdefault(job.key, job.id)
            if other != job.id and (job.key, other, job.id) not in told:
                told.add((job.key, other, job.id))
                f.add(
                    Rule.KEY_UNIQUE,
                    f"key {job.key!r} is held by live jobs {other} and {job.id} in "
                    f"version {doc.version}",
                )


def check_attempts(chain: Chain, f: Findings) -> None:
    """DEAD_AT_MAX_ATTEMPTS: dead only after ``max_attempts`` attempts, and never claimed
    for an attempt beyond them."""
    told: set[str] = set()
    dead: set[str] = set()
    for doc in chain.docs:
        for job in doc.jobs.values():
            if job.status == "dead":
                dead.add(job.id)
            if job.id in told:
                continue
            if job.status == "dead" and job.attempts < job.max_attempts:
                problem = "dead"
            elif job.status == "claimed" and job.attempts > job.max_attempts:
                problem = "claimed"
            else:
                continue
            told.add(job.id)
            f.add(
                Rule.DEAD_AT_MAX_ATTEMPTS,
                f"job {job.id} is {problem} in version {doc.version} after {job.attempts} "
                f"of {job.max_attempts} attempts",
            )
    f.checked["dead jobs"] += len(dead)


# --------------------------------------------------------------------------- I8, I9


def check_claim_order(history: History, chain: Chain, f: Findings) -> None:
    """NOT_EARLY and PRIORITY_ORDER, for every claim made in a step.

    NOT_EARLY: a job queued with ``run_at`` in version v and claimed in v + 1 has
    ``claimed_at >= run_at`` (both on the claiming broker's clock); a job pushed with
    a delay is never claimed in the version that created it.

    PRIORITY_ORDER: a job claimed in v + 1 from queue q had no better job waiting:
    none queued in q in v, due before ``claimed_at`` (strictly: times are stored to
    the millisecond), with a lower ``(priority, seq)``, and still queued in v + 1.
    Jobs that entered the queue inside the batch (pushed, failed, released) are left
    alone: the order of ops in the batch decides whether the claim could see them.
    """
    delayed = {e.job for e in history.of(Kind.PUSH_SENT) if e.delay_s > 0}
    early = order = 0
    for before, after in chain.steps:
        fresh = fresh_claims(before, after)
        if not fresh:
            continue
        f.checked["claims"] += len(fresh)
        f.checked["claims of delayed jobs"] += sum(
            1 for j in fresh if (old := before.jobs.get(j.id)) is not None and old.run_at
        )
        for message in _early(chain, delayed, before, after, fresh):
            if early < MAX_STEP_FINDINGS:
                early += 1
                f.add(Rule.NOT_EARLY, message)
        for message in _out_of_order(chain, before, after, fresh, f):
            if order < MAX_STEP_FINDINGS:
                order += 1
                f.add(Rule.PRIORITY_ORDER, message)


def _early(
    chain: Chain, delayed: set[str], before: Document, after: Document, fresh: list[StoredJob]
) -> list[str]:
    out = []
    for job in fresh:
        assert job.claim is not None
        at = job.claim.claimed_at
        old = before.jobs.get(job.id) or chain.spilled_in(before).get(job.id)
        if old is None:
            if job.id in delayed and chain.first_seen.get(job.id) == after.version:
                out.append(
                    f"job {job.id} was pushed with a delay and claimed in the same version "
                    f"{after.version}"
                )
        elif old.status == "queued" and old.run_at is not None and at < old.run_at:
            out.append(
                f"job {job.id} is due at {old.run_at.isoformat()} (version {before.version}) "
                f"but version {after.version} claimed it at {at.isoformat()}"
            )
    return out


def _out_of_order(
    chain: Chain, before: Document, after: Document, fresh: list[StoredJob], f: Findings
) -> list[str]:
    by_queue: dict[str, list[StoredJob]] = defaultdict(list)
    for job in fresh:
        by_queue[job.queue].append(job)
    out = []
    for queue, claimed in sorted(by_queue.items()):
        at = min(j.claim.claimed_at for j in claimed if j.claim is not None)
        capped = _capped_groups(before, after, queue)
        aside = chain.aside.get(before.version, set())  # present, not claimable
        waiting = [
            k
            # (a due job still in an object of delayed jobs is late, not passed over:
            # it is not claimable until loaded, which under faults may come after its
            # time; only ready segments' jobs wait in claim order)
            for k in [*before.jobs.values(), *_ready_spilled(chain, before)]
            if k.queue == queue
            and k.id not in aside
            and k.status == "queued"
            and (k.run_at is None or k.run_at < at)
            and _still_queued(chain, after, k)
            and k.group not in capped
        ]
        if not waiting:
            continue
        f.checked["claims while others waited"] += len(claimed)
        best = min(waiting, key=lambda k: (k.priority, k.seq))
        for job in sorted(claimed, key=lambda j: (j.priority, j.seq)):
            if (job.priority, job.seq) > (best.priority, best.seq):
                out.append(
                    f"version {after.version} claimed {job.id} (priority {job.priority}, seq "
                    f"{job.seq}) from {queue!r} while {best.id} (priority {best.priority}, "
                    f"seq {best.seq}) was due and stayed queued"
                )
    return out


def _ready_spilled(chain: Chain, doc: Document) -> list[StoredJob]:
    return [k for k in chain.spilled_in(doc).values() if k.run_at is None]


def _capped_groups(before: Document, after: Document, queue: str) -> set[str | None]:
    """The groups of ``queue`` that may have been at their cap when the claim ran:
    at it in ``after``, or in ``before`` (a commit applies its ops before its sweep,
    so a claim the heartbeat sweep takes back in the same commit still counted
    when the claim was made)."""
    settings = before.queue_settings.get(queue)
    cap = settings.max_claimed_per_group if settings is not None else None
    if cap is None:
        return set()
    capped: set[str | None] = set()
    for doc in (before, after):
        counts: dict[str, int] = defaultdict(int)
        for j in doc.jobs.values():
            if j.queue == queue and j.status == "claimed" and j.group is not None:
                counts[j.group] += 1
        capped |= {g for g, n in counts.items() if n >= cap}
    return capped


def _still_queued(chain: Chain, after: Document, job: StoredJob) -> bool:
    now = after.jobs.get(job.id) or chain.spilled_in(after).get(job.id)
    return now is not None and now.status == "queued" and now.seq == job.seq
