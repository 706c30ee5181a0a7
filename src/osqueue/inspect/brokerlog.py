"""The broker as a viewer observes it: who holds the lease, the failover history,
and how fast the document changes.

The document names only the current broker, so the history of epochs is what
this process saw: :class:`BrokerLog` records each change of broker, epoch or
address with the time it first saw it.  The commit rate comes from the
document's ``version``, which grows by one on every write (commits and lease
renewals alike).  Figures only the broker knows (ops per commit, commit
latency) come from a :class:`CommitMetrics` provider: :class:`DocumentMetrics`
reads the summary the serving broker keeps in the document (``broker.perf``:
its commits of the last minute, refreshed every few seconds), so they need no
metrics endpoint.
"""

from __future__ import annotations

from collections import deque
from dataclasses import dataclass
from typing import Protocol

from osqueue.inspect.snapshot import Snapshot


@dataclass(frozen=True, slots=True)
class Tenure:
    """One broker at one epoch (and address), as first seen by this process."""

    epoch: int
    broker_id: str
    address: str | None
    seen_at: float
    lease_until: float


@dataclass(frozen=True, slots=True)
class CommitFigures:
    """What the broker reports about its commits (any of them may be unknown)."""

    commits_per_s: float | None = None
    ops_per_commit: float | None = None
    p99_commit_s: float | None = None


class CommitMetrics(Protocol):
    """Where broker-side commit figures come from (the metrics endpoint, later)."""

    async def figures(self) -> CommitFigures | None: ...


class DocumentMetrics:
    """The serving broker's own summary of its last minute of commits, from the
    latest document read (``observe`` it on the snapshot source)."""

    def __init__(self) -> None:
        self._latest: Snapshot | None = None

    def observe(self, snapshot: Snapshot) -> None:
        self._latest = snapshot

    async def figures(self) -> CommitFigures | None:
        latest = self._latest
        owner = latest.doc.broker if latest is not None else None
        perf = owner.perf if owner is not None else None
        if perf is None or not perf.commits:
            return None
        return CommitFigures(
            commits_per_s=perf.commits / perf.window_s,
            ops_per_commit=perf.ops / perf.commits,
            p99_commit_s=perf.p99_ms / 1000.0,
        )


class NoMetrics:
    """No broker metrics yet: every figure is unknown."""

    async def figures(self) -> CommitFigures | None:
        return None


class BrokerLog:
    """Epochs and document versions seen by this process (bounded)."""

    def __init__(self, *, max_tenures: int = 100, rate_window_s: float = 60.0) -> None:
        self.rate_window_s = rate_window_s
        self._tenures: deque[Tenure] = deque(maxlen=max_tenures)
        self._versions: deque[tuple[float, int]] = deque()

    def observe(self, snapshot: Snapshot) -> None:
        owner = snapshot.doc.broker
        t = snapshot.read_at
        if owner is not None:
            last = self._tenures[-1] if self._tenures else None
            if last is None or (last.broker_id, last.epoch, last.address) != (
                owner.id,
                owner.epoch,
                owner.address,
            ):
                self._tenures.append(
                    Tenure(
                        epoch=owner.epoch,
                        broker_id=owner.id,
                        address=owner.address,
                        seen_at=t,
                        lease_until=owner.lease_until.timestamp(),
                    )
                )
        versions = self._versions
        versions.append((t, snapshot.version))
        while len(versions) > 2 and t - versions[0][0] > self.rate_window_s:
            versions.popleft()

    def tenures(self) -> list[Tenure]:
        """Newest first."""
        return list(reversed(self._tenures))

    def commit_rate(self) -> float | None:
        """Document writes per second over the last ``rate_window_s`` (None: not
        enough readings yet)."""
        if len(self._versions) < 2:
            return None
        (t0, v0), (t1, v1) = self._versions[0], self._versions[-1]
        if t1 <= t0 or v1 < v0:
            return None
        return (v1 - v0) / (t1 - t0)
