"""What the broker did: its counters and the records kept per commit for the
metrics (:mod:`osqueue.broker.observe.activity` logs them)."""

from __future__ import annotations

import logging
from collections import Counter, OrderedDict, deque
from collections.abc import Sequence
from dataclasses import dataclass, field
from itertools import repeat
from typing import Literal

from osqueue.metrics import Histogram
from osqueue.state import validate
from osqueue.state.model import BrokerPerf, WorkerSeen, to_datetime

log = logging.getLogger(__name__)

#: What the broker was doing when a storage call failed (the label of
#: ``osqueue_broker_storage_errors_total``).
StorageCall = Literal[
    "document_read", "document_write", "archive_write", "payload_sweep", "result_sweep"
]
STORAGE_CALLS: tuple[StorageCall, ...] = (
    "document_read",
    "document_write",
    "archive_write",
    "payload_sweep",
    "result_sweep",
)

#: Upper bounds of the commit-duration buckets (seconds): a memory store's
#: commits take well under a millisecond, an object store's tens to hundreds.
COMMIT_SECONDS_BUCKETS = (
    0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0
)  # fmt: skip
#: Upper bounds of the ops-per-commit buckets (0: a commit that only renews the lease).
COMMIT_OPS_BUCKETS = (0, 1, 2, 5, 10, 20, 50, 100, 200, 500, 1000, 2000, 5000, 10_000, 20_000)


@dataclass(slots=True)
class CommitRecords:
    """What the metrics need beyond the totals, recorded once per commit (never per
    op): the commit's duration and size, and its ops counted by (op type, result
    type).  Kept only while something reads them (``Broker.metrics_collector``)."""

    commit_seconds: Histogram = field(default_factory=lambda: Histogram(COMMIT_SECONDS_BUCKETS))
    commit_ops: Histogram = field(default_factory=lambda: Histogram(COMMIT_OPS_BUCKETS))
    #: (op type, result type) -> ops; the result type is an error class for an op
    #: that failed, refused ones (backpressure) and unconfirmed ones included
    ops: Counter[tuple[type, type]] = field(default_factory=Counter)

    def commit(self, batch: Sequence[object], results: Sequence[object], seconds: float) -> None:
        """A commit of ``batch`` (the callers' ops; ``results`` start with theirs) took
        ``seconds`` from the batch's first attempt until it was durable."""
        self.commit_seconds.observe(seconds)
        self.commit_ops.observe(len(batch))
        if batch:  # zip stops with the batch: the broker's own ops are not counted
            self.ops.update(zip(map(type, batch), map(type, results), strict=False))

    def answered(self, ops: Sequence[object], error: type) -> None:
        """``ops`` were answered ``error`` without a commit (refused, or not confirmed)."""
        self.ops.update(zip(map(type, ops), repeat(error)))


#: commit durations :class:`CommitWindow` keeps for its quantiles (the newest)
WINDOW_SAMPLES = 20_000


class CommitWindow:
    """The commits of the last ``window_s`` (monotonic time), counted per second
    with their ops, and the durations of the newest :data:`WINDOW_SAMPLES` of
    them, for a summary recomputed at most every ``refresh_s``: the cost per
    commit is two appends or an increment, and the memory and the sort at a
    refresh stay bounded at any commit rate (a busy broker's p50 and p99 are
    then those of its newest commits)."""

    def __init__(self, window_s: float = 60.0, refresh_s: float = 5.0) -> None:
        self.window_s = window_s
        self.refresh_s = refresh_s
        #: [second, commits, ops] per second that had a commit, oldest first
        self._seconds: deque[list[int]] = deque()
        #: (monotonic time, duration) of the newest commits
        self._samples: deque[tuple[float, float]] = deque(maxlen=WINDOW_SAMPLES)
        self._perf: BrokerPerf | None = None
        self._perf_at = -float("inf")

    def add(self, mono: float, seconds: float, ops: int) -> None:
        self._samples.append((mono, seconds))
        second = int(mono)
        counts = self._seconds
        if counts and counts[-1][0] == second:
            last = counts[-1]
            last[1] += 1
            last[2] += ops
        else:
            counts.append([second, 1, ops])

    def perf(self, mono: float) -> BrokerPerf | None:
        """The summary as of ``mono`` (None before the first commit)."""
        if mono - self._perf_at < self.refresh_s:
            return self._perf
        self._perf_at = mono
        since = mono - self.window_s
        counts, samples = self._seconds, self._samples
        while counts and counts[0][0] + 1 <= since:  # (a second wholly before the window)
            counts.popleft()
        while samples and samples[0][0] < since:
            samples.popleft()
        if not counts or not samples:
            self._perf = None
            return None
        times = sorted(sample[1] for sample in samples)
        self._perf = BrokerPerf(
            window_s=self.window_s,
            commits=sum(c[1] for c in counts),
            ops=sum(c[2] for c in counts),
            p50_ms=round(times[len(times) // 2] * 1000, 3),
            p99_ms=round(times[min(len(times) - 1, int(0.99 * len(times)))] * 1000, 3),
        )
        return self._perf


#: A worker's queues in :class:`RecentWorkers` (the first this many it asked for).
MAX_QUEUES_SHOWN = 8
#: How long :class:`RecentWorkers` remembers a worker that stopped claiming.
RECENT_WORKERS_WINDOW_S = 300.0


_Seen = tuple[float, tuple[str, ...], tuple[str, ...]]


class RecentWorkers:
    """The workers this broker heard from recently: each one's last claim (waiting
    or not) and the queues it asked for, for readers of the document.

    The document shows only workers that hold a job (their claims); an idle
    worker is one that keeps asking and gets nothing, which only the broker
    sees.  This record is that sight, bounded: a claim costs one dict move (no
    work per commit), at most ``max_workers`` are kept (the longest silent
    go first), and :meth:`summary` is rebuilt when a worker is new and else at
    most every ``refresh_s`` (a new worker shows at once, last-seen times
    within ``refresh_s``), so what rides in the document
    (``BrokerInfo.workers``, beside ``perf``) is the same tuple between
    rebuilds.  It is this broker's sight only: a broker that takes over
    starts with none, and fills it within a claim round."""

    def __init__(
        self,
        window_s: float = RECENT_WORKERS_WINDOW_S,
        max_workers: int = 64,
        refresh_s: float = 5.0,
    ) -> None:
        self.window_s = window_s
        self.max_workers = max_workers
        self.refresh_s = refresh_s
        #: worker -> (broker time of its last claim, the queues shown, the queues it
        #: asked for as given: a claim naming them again is not checked again)
        self._seen: OrderedDict[str, _Seen] = OrderedDict()
        self._summary: tuple[WorkerSeen, ...] = ()
        self._summary_at = -float("inf")
        #: a worker was heard from for the first time since the last summary: rebuild
        #: it now, not at the refresh (read by the lease's owner every commit)
        self.news = False

    def claimed(self, worker: str, queues: tuple[str, ...], now: float) -> None:
        """``worker`` asked for jobs of ``queues`` at broker time ``now`` (the names
        are checked first: the record reaches the document)."""
        seen = self._seen
        known = seen.get(worker)
        if known is not None and known[2] == queues:  # checked when first seen
            seen[worker] = (now, known[1], queues)
        else:
            validate.worker_name(worker)
            shown = validate.queue_names(queues)[:MAX_QUEUES_SHOWN]
            if known is None:
                self.news = True
            seen[worker] = (now, shown, queues)
        seen.move_to_end(worker)
        if len(seen) > self.max_workers:
            seen.popitem(last=False)

    def summary(self, now: float) -> tuple[WorkerSeen, ...]:
        """The workers heard from in the last ``window_s``, newest first."""
        if not self.news and now - self._summary_at < self.refresh_s:
            return self._summary
        self._summary_at = now
        self.news = False
        seen = self._seen
        while seen:
            oldest = next(iter(seen))
            if seen[oldest][0] >= now - self.window_s:
                break
            del seen[oldest]
        self._summary = tuple(
            WorkerSeen(worker=w, seen_at=to_datetime(at), queues=queues)
            for w, (at, queues, _) in reversed(seen.items())
        )
        return self._summary


@dataclass(slots=True)
class BrokerCounters:
    """Running totals since the broker was made (``Broker.counters``)."""

    commits: int = 0
    ops: int = 0
    conflicts: int = 0
    storage_errors: int = 0
    archives: int = 0
    payloads_swept: int = 0
    results_swept: int = 0
    write_bytes: int = 0
    batch_sizes: list[int] = field(default_factory=list)
    #: the storage errors by what failed (they add up to ``storage_errors``)
    storage_errors_by: Counter[StorageCall] = field(default_factory=Counter)
    #: per-commit records for the metrics; None while no one reads them
    records: CommitRecords | None = None
    #: the last minute of commits, summarised into the document (BrokerInfo.perf)
    window: CommitWindow = field(default_factory=CommitWindow)
    #: the workers heard from recently, summarised into the document (BrokerInfo.workers)
    workers: RecentWorkers = field(default_factory=RecentWorkers)

    def storage_error(self, call: StorageCall) -> None:
        """A storage call failed (it is retried, or the broker stops)."""
        self.storage_errors += 1
        self.storage_errors_by[call] += 1

    def totals(self) -> tuple[int, int, int, int, int, int]:
        """(commits, ops, conflicts, storage errors, archive objects, bytes written)."""
        return (
            self.commits,
            self.ops,
            self.conflicts,
            self.storage_errors,
            self.archives,
            self.write_bytes,
        )
