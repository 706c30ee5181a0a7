"""The checker's rules for scheduling: schedule ticks (I10), queue limits (I11) and
dependencies (I12).  See docs/scheduling.md for what they promise.

The time of each landed version is its broker's clock at the commit: a serving
broker writes ``lease_until = now + lease_s`` (a closing one ``lease_until =
now``), so with the run's ``lease_s`` (:attr:`Outcome.lease_s`) the checker reads
``now`` back, to the millisecond.  Where a rule's answer depends on a time that
close to a tick or a grace boundary, it leaves the case alone.
"""

from __future__ import annotations

from collections import defaultdict

from osqueue.state import Document, limits
from osqueue.state.model import Schedule, StoredJob
from osqueue.state.schedules import latest_tick, tick_job_id
from sim.claims import fresh_claims
from sim.findings import Chain, Findings
from sim.history import Event, History, Kind, Outcome, Rule

#: the document's times are rounded to the millisecond
_SLACK_S = 0.002


def commit_time(doc: Document, lease_s: float | None) -> float | None:
    """The writing broker's clock when ``doc`` was committed (None: unknown)."""
    owner = doc.broker
    if owner is None or lease_s is None:
        return None
    until = owner.lease_until.timestamp()
    return until if owner.address is None else until - lease_s


def ticked_ids(chain: Chain) -> set[str]:
    """The jobs some version's schedules recorded as a tick's job (they were pushed
    by the commit that fired the tick, not by a client)."""
    out: set[str] = set()
    for doc in chain.docs:
        for s in doc.schedules:
            if s.last_job is not None:
                out.add(s.last_job)
    return out


# --------------------------------------------------------------------------- I10 ticks


def check_ticks(chain: Chain, outcome: Outcome, f: Findings) -> None:
    """TICK_ONCE and TICK_KEPT over every step of the chain."""
    for before, after in chain.steps:
        now = commit_time(after, outcome.lease_s)
        for s in after.schedules:
            old = before.schedules.get(s.name)
            _tick_once(chain, before, after, old, s, f)
            if now is not None and old is not None:
                f.checked["schedule steps"] += 1
                _tick_kept(after, old, s, now, outcome.schedule_grace_s, f)


def _tick_once(
    chain: Chain,
    before: Document,
    after: Document,
    old: Schedule | None,
    s: Schedule,
    f: Findings,
) -> None:
    """A job of a schedule is born only with the record of its tick, one per tick."""
    prefix = s.name + ":"
    born = sorted(
        j for j in after.jobs if j.startswith(prefix) and chain.first_seen.get(j) == after.version
    )
    moved = old is None or old.last_at != s.last_at
    last, recorded = (old.last_at if old is not None else None), s.last_at
    if last is not None and recorded is not None and recorded < last:
        f.add(
            Rule.TICK_ONCE,
            f"schedule {s.name}: version {after.version} records tick "
            f"{recorded.isoformat()} after {last.isoformat()}",
        )
    if not born:
        return
    f.checked["schedule ticks"] += len(born)
    expected = tick_job_id(s.name, s.last_at.timestamp()) if s.last_at is not None else None
    if not moved or born != [expected]:
        f.add(
            Rule.TICK_ONCE,
            f"schedule {s.name}: version {after.version} pushed {born} but recorded "
            f"{'no new tick' if not moved else f'the tick of {expected}'}",
        )


def _tick_kept(
    after: Document, old: Schedule, s: Schedule, now: float, grace_s: float, f: Findings
) -> None:
    """A commit at ``now`` records the latest due tick, with a job unless catch_up skips it."""
    due_at = old.next_at.timestamp()
    if abs(due_at - now) <= _SLACK_S:
        return  # too close to call on millisecond times
    recorded = s.last_at.timestamp() if s.last_at is not None else None
    if due_at > now:
        if recorded != (old.last_at.timestamp() if old.last_at is not None else None):
            f.add(
                Rule.TICK_KEPT,
                f"schedule {s.name}: version {after.version} at {now:.3f} recorded tick "
                f"{recorded} before it was due ({due_at:.3f})",
            )
        return
    latest = {latest_tick(s, now - _SLACK_S), latest_tick(s, now + _SLACK_S)}
    if recorded not in latest:
        f.add(
            Rule.TICK_KEPT,
            f"schedule {s.name}: version {after.version} at {now:.3f} left tick "
            f"{due_at:.3f} due (recorded {recorded}, latest {sorted(latest)})",
        )
        return
    assert recorded is not None
    late = now - recorded
    if s.catch_up == "skip" and abs(late - grace_s) <= _SLACK_S:
        return
    should_push = s.catch_up == "once" or late <= grace_s
    pushed = s.last_job == tick_job_id(s.name, recorded) and s.last_job in after.jobs
    full = s.last_note is not None and "pushed no job" in s.last_note
    if should_push != pushed and not (should_push and full):
        f.add(
            Rule.TICK_KEPT,
            f"schedule {s.name} (catch_up={s.catch_up}): version {after.version} fired tick "
            f"{recorded:.3f} {late:.3f}s late and {'pushed' if pushed else 'pushed no'} job",
        )


# --------------------------------------------------------------------------- I11 limits


def check_limits(chain: Chain, f: Findings) -> None:
    """LIMIT_PAUSED, LIMIT_CLAIMED and LIMIT_RATE for the claims of every step whose
    two versions agree on the limit (a change in the same batch is left alone)."""
    bucket: dict[str, list[tuple[float, int]]] = defaultdict(list)  # queue -> (t, claims)
    rates: dict[str, tuple[float, float]] = {}
    for before, after in chain.steps:
        by_queue: dict[str, list[StoredJob]] = defaultdict(list)
        for job in fresh_claims(before, after):
            by_queue[job.queue].append(job)
        for q, jobs in sorted(by_queue.items()):
            old, new = before.queue_settings.get(q), after.queue_settings.get(q)
            if old is None or new is None:
                continue
            f.checked["claims under limits"] += len(jobs)
            where = f"version {after.version} claimed {len(jobs)} of {q!r}"
            if old.paused and new.paused:
                f.add(Rule.LIMIT_PAUSED, f"{where} while it was paused")
            _caps(after, q, jobs, old.max_claimed, new.max_claimed, old, new, where, f)
            if old.rate_per_s is not None and (old.rate_per_s, old.burst) == (
                new.rate_per_s,
                new.burst,
            ):
                assert new.tokens_at is not None
                rates[q] = (new.rate_per_s or 0.0, limits.capacity(new))
                bucket[q].append((new.tokens_at.timestamp(), len(jobs)))
    for q, claims in sorted(bucket.items()):
        rate, burst = rates[q]
        _window(q, claims, rate, burst, f)


def _caps(
    after: Document,
    q: str,
    jobs: list[StoredJob],
    cap_before: int | None,
    cap_after: int | None,
    old: object,
    new: object,
    where: str,
    f: Findings,
) -> None:
    claimed = [j for j in after.jobs.values() if j.queue == q and j.status == "claimed"]
    if cap_before is not None and cap_before == cap_after and len(claimed) > cap_before:
        f.add(Rule.LIMIT_CLAIMED, f"{where}: {len(claimed)} claimed, max_claimed {cap_before}")
    group_cap = getattr(old, "max_claimed_per_group", None)
    if group_cap is None or group_cap != getattr(new, "max_claimed_per_group", None):
        return
    per_group: dict[str, int] = defaultdict(int)
    for j in claimed:
        if j.group is not None:
            per_group[j.group] += 1
    for g in sorted({j.group for j in jobs if j.group is not None}):
        if per_group[g] > group_cap:
            f.add(
                Rule.LIMIT_CLAIMED,
                f"{where}: group {g!r} has {per_group[g]} claimed, max_claimed_per_group "
                f"{group_cap}",
            )


def _window(
    q: str, claims: list[tuple[float, int]], rate: float, burst: float, f: Findings
) -> None:
    """Over any window of the bucket's clock: claims <= burst + rate x window."""
    told = False
    for i in range(len(claims)):
        total = 0
        for j in range(i, len(claims)):
            total += claims[j][1]
            window = claims[j][0] - claims[i][0]
            if total > burst + rate * window + 1e-6 and not told:
                told = True
                f.add(
                    Rule.LIMIT_RATE,
                    f"queue {q!r}: {total} claims within {window:.3f}s of the bucket's clock "
                    f"(rate {rate:g}/s, burst {burst:g})",
                )


# --------------------------------------------------------------------------- I12 parents


def _ends(
    chain: Chain, outcome: Outcome, parents: set[str]
) -> tuple[dict[str, int], dict[str, int]]:
    """Job -> the first version it is done in; job -> the first version it failed in
    (dead, or left the document undone).  A parent pushed and cancelled in one
    commit is never among a version's jobs: its end is the first version whose
    record of finished jobs holds it."""
    done: dict[str, int] = {}
    failed: dict[str, int] = {}
    unseen = set(parents)
    for doc in chain.docs:
        for job_id, job in doc.jobs.items():
            unseen.discard(job_id)
            if job.status == "done":
                done.setdefault(job_id, doc.version)
            elif job.status == "dead":
                failed.setdefault(job_id, doc.version)
        for job_id in sorted(unseen):
            entry = doc.finished.get(job_id)
            if entry is not None:
                unseen.discard(job_id)
                ends = done if entry.status == "done" else failed
                ends.setdefault(job_id, doc.version)
    for job_id, leaves in chain.left_undone.items():
        failed.setdefault(job_id, leaves[0][0])
    for rec in outcome.archive:
        done.setdefault(rec.id, rec.version)
    return done, failed


def check_parents(history: History, chain: Chain, outcome: Outcome, f: Findings) -> set[str]:
    """PARENTS_FIRST and PARENT_FAILURE; returns the children a failed parent cancelled
    (their loss is accounted for)."""
    pushes = {e.job: e for e in history.of(Kind.PUSH_SENT) if e.after}
    if not pushes:
        return set()
    done, failed = _ends(chain, outcome, {p for e in pushes.values() for p in e.after})
    for before, after in chain.steps:
        for job in fresh_claims(before, after):
            e = pushes.get(job.id)
            if e is None:
                continue
            f.checked["claims of children"] += 1
            for p in e.after:
                ok = done.get(p, after.version) <= before.version
                if e.on_parent_failure == "run":
                    ok = ok or failed.get(p, after.version) <= before.version
                if not ok:
                    f.add(
                        Rule.PARENTS_FIRST,
                        f"version {after.version} claimed {job.id} before its parent {p} completed",
                    )
    return _failures(history, pushes, chain, done, failed, f)


def _failures(
    history: History,
    pushes: dict[str, Event],
    chain: Chain,
    done: dict[str, int],
    failed: dict[str, int],
    f: Findings,
) -> set[str]:
    """PARENT_FAILURE; the children a failed parent cancelled."""
    cancelled: set[str] = set()
    told_cancel = history.ids(Kind.CANCEL_SENT)
    for child, e in sorted(pushes.items()):
        gone = failed.get(child)
        fell = [failed[p] for p in e.after if p in failed and done.get(p) is None]
        if e.on_parent_failure == "cancel" and fell:
            first = min(fell)
            cancelled.add(child)
            late = [d.version for d in chain.docs if d.version >= first and child in d.jobs]
            if late:
                f.add(
                    Rule.PARENT_FAILURE,
                    f"job {child} is still in version {late[0]} after its parent failed in "
                    f"version {first} (on_parent_failure=cancel)",
                )
        elif gone is not None and child in chain.left_undone and child not in told_cancel:
            run_parents = e.on_parent_failure == "run" or not fell
            if run_parents:
                f.add(
                    Rule.PARENT_FAILURE,
                    f"job {child} (on_parent_failure={e.on_parent_failure}) left the document "
                    f"undone in version {gone} though nobody cancelled it",
                )
    return cancelled
