"""The sweep that rides along with every commit: the record of finished jobs is
pruned (and evicted past its caps: :func:`osqueue.state.results.sweep`), stale
claims are reclaimed, old dedupe tombstones are dropped.

:func:`run` is called by :func:`osqueue.state.transition` after a batch's ops,
on the version being built.  Pure: ``now`` is the transition's.
"""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Protocol

from osqueue.state import dedupe_filter, finished_objects, results
from osqueue.state.document import Document
from osqueue.state.model import StoredJob
from osqueue.state.ops import Policy


class SweepTx(Protocol):
    """What the sweep needs of the transition building the new version."""

    doc: Document
    now: float
    policy: Policy
    stats: dict[str, int]
    reclaimed: list[str]

    def _put(self, job: StoredJob) -> None: ...

    def _requeue(self, job: StoredJob, error: str, retry_after_s: float | None) -> StoredJob: ...


def run(tx: SweepTx) -> None:
    if tx.doc.finished.entries:
        tx.stats["finished_evicted"] += results.sweep(tx.doc, tx.now, tx.policy)
    if tx.doc.finished.sealed:  # sealed objects expired (or held past the cap) leave
        evicted = finished_objects.expire(tx.doc, tx.now, tx.policy)
        if evicted:
            tx.stats["finished_evicted"] += evicted
    index = tx.doc.index
    if not index.claimed:
        _prune_recent(tx)
        return
    timeout = tx.policy.heartbeat_timeout_s
    # Compare datetimes (no float conversion per claimed job) to find candidates
    # (1 ms of slack over the exact test below), and sort only those.
    floor = index.heartbeat_floor
    if floor is None or floor.timestamp() < tx.now - timeout + 0.001:  # one may have expired
        _reclaim_expired(tx, _datetime_at(tx.now - timeout + 0.001), timeout)
    _prune_recent(tx)


def _reclaim_expired(tx: SweepTx, cutoff: datetime, timeout: float) -> None:
    jobs, index = tx.doc.jobs, tx.doc.index
    expired: list[str] = []
    floor: datetime | None = None  # the oldest heartbeat among the live claims
    for job_id in index.claimed:
        heartbeat_at = jobs[job_id].claim.heartbeat_at  # type: ignore[union-attr]
        if heartbeat_at < cutoff:
            expired.append(job_id)
        elif floor is None or heartbeat_at < floor:
            floor = heartbeat_at
    for job_id in sorted(expired):
        job = jobs[job_id]
        assert job.claim is not None
        if job.claim.heartbeat_at.timestamp() + timeout < tx.now:
            error = (
                f"reclaimed: worker {job.claim.worker!r} stopped heartbeating "
                f"(token {job.claim.token}, timeout {timeout:g}s)"
            )
            tx.stats["reclaimed"] += 1
            tx._put(tx._requeue(job, error, None))
            tx.reclaimed.append(job_id)
        elif floor is None or job.claim.heartbeat_at < floor:
            floor = job.claim.heartbeat_at  # within the slack: still claimed
    index.heartbeat_floor = floor


def _prune_recent(tx: SweepTx) -> None:
    doc = tx.doc
    cutoff = tx.now - 1.25 * tx.policy.dedupe_window_s - 1
    for holder in dedupe_filter.holders(doc):  # filters last as long as tombstones at least
        floor = holder.filter_floor
        if floor is not None and floor < cutoff:
            dedupe_filter.prune(holder, cutoff)
    recent = doc.recent
    if not recent:
        return
    window = tx.policy.dedupe_window_s
    oldest = next(iter(recent.values()))  # seconds never decrease in insertion order
    # Rebuild only once the oldest is well past the window: O(n) per window/4.
    # A tombstone's second is its job's creation time rounded down, so "+ 1"
    # keeps it at least dedupe_window_s after its job was created.
    if oldest + 1 < tx.now - 1.25 * window:
        cutoff = tx.now - window
        doc.set_recent({k: v for k, v in recent.items() if v + 1 >= cutoff})


def _datetime_at(ts: float) -> datetime:
    return datetime.fromtimestamp(ts, UTC)
