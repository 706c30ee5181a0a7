"""The last hour of depth and throughput, behind a small provider interface.

Brokers are stateless and the document holds only counters since the queue
began, so "the last hour" needs a history kept somewhere: the document keeps
it.  The broker appends one sample per minute (the counters and each queue's
depth; :mod:`osqueue.state.history`) and keeps an hour of them, so the charts
survive broker restarts and failovers and are the same for every viewer.
:class:`DocumentHistory` draws them, with the live counters as the last point.
A document written by a release without the ring has no samples; then
:class:`SampledHistory` samples the document's counters from the dashboard
process itself (its charts start empty and cover only the time it has run).

A provider implements :class:`History`; the web app and ``osqueue top`` use
nothing else.  :func:`flows_of` is the one place that says which cumulative
counters a snapshot carries (the totals, and each known queue's: the
document's ``queue_totals``); :class:`QueueRates` turns each queue's into its
recent rates for the overview.
"""

from __future__ import annotations

import itertools
import math
from collections import deque
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from typing import Any, Protocol

from osqueue.inspect.snapshot import Snapshot
from osqueue.state.stats import depths

#: the counters a rate is shown for, in the order charts and tables show them
FLOWS = ("pushed", "completed", "failed", "dead")


@dataclass(frozen=True, slots=True)
class Flow:
    """Cumulative counts since the queue began (they only grow)."""

    pushed: int = 0
    completed: int = 0
    failed: int = 0
    dead: int = 0

    def get(self, name: str) -> int:
        value: int = getattr(self, name)
        return value


def flows_of(snapshot: Snapshot) -> tuple[Flow, dict[str, Flow]]:
    """The totals, and each known queue's (the document's ``queue_totals``)."""
    doc = snapshot.doc
    stats = doc.stats
    total = Flow(
        pushed=stats.pushed, completed=stats.completed, failed=stats.failed, dead=stats.dead
    )
    per_queue = {
        q: Flow(pushed=t.pushed, completed=t.completed, failed=t.failed, dead=t.dead)
        for q, t in doc.queue_totals.items()
    }
    return total, per_queue


class QueueRates:
    """Each queue's rates over the last ``window_s``, from the document's per-queue
    counters as this process read them: the first and the last read in the
    window, so a rate needs reads ``min_span_s`` apart.  A queue missing from
    the first read was not known then: it had counted nothing."""

    def __init__(self, *, window_s: float = 60.0, min_span_s: float = 1.0) -> None:
        if window_s <= 0 or min_span_s < 0:
            raise ValueError("window_s must be positive and min_span_s not negative")
        self.window_s = window_s
        self.min_span_s = min_span_s
        #: (read at, each queue's counts)
        self._reads: deque[tuple[float, dict[str, Flow]]] = deque()

    def observe(self, snapshot: Snapshot) -> None:
        _, per_queue = flows_of(snapshot)
        reads = self._reads
        t = snapshot.read_at
        if reads and t < reads[-1][0]:  # a clock that stepped back: start again
            reads.clear()
        reads.append((t, per_queue))
        while len(reads) > 2 and reads[1][0] <= t - self.window_s:
            reads.popleft()

    def rates(self, now: float) -> dict[str, dict[str, float]]:
        """queue -> {"pushed": per second, "completed": per second}, for each queue
        known at the window's last read (empty until there are two reads)."""
        reads = [r for r in self._reads if r[0] >= now - self.window_s]
        if len(reads) < 2:
            return {}
        (t0, first), (t1, last) = reads[0], reads[-1]
        if t1 - t0 < self.min_span_s:
            return {}
        out: dict[str, dict[str, float]] = {}
        for queue, flow in last.items():
            before = first.get(queue, Flow())
            out[queue] = {
                name: round(rate(before.get(name), flow.get(name), t1 - t0), 3)
                for name in ("pushed", "completed")
            }
        return out


@dataclass(frozen=True, slots=True)
class Series:
    """What a chart draws: times, depth per queue, and rates (per second) per flow.

    ``rates[name][i]`` is the rate over the interval that ends at ``times[i]``
    (so the first point has none: it is 0.0 there).
    """

    source: str
    times: list[float] = field(default_factory=list)
    depth: dict[str, list[int | None]] = field(default_factory=dict)
    rates: dict[str, list[float]] = field(default_factory=dict)

    def as_json(self) -> dict[str, Any]:
        rates = {k: [round(v, 3) for v in vs] for k, vs in self.rates.items()}
        return {
            "source": self.source,
            "times": [round(t, 3) for t in self.times],
            "depth": self.depth,
            "rates": rates,
            # the y axes' ticks: round steps the charts draw as they are
            "ticks": {
                "depth": nice_ticks(_peak(self.depth.values()), min_step=1.0),
                "rates": nice_ticks(_peak(rates[n] for n in CHARTED_RATES if n in rates)),
            },
        }


#: the rates the throughput chart draws
CHARTED_RATES = ("pushed", "completed", "failed")


def _peak(lines: Iterable[Sequence[float | int | None]]) -> float:
    return max((v for line in lines for v in line if v is not None), default=0.0)


def nice_ticks(peak: float, *, most: int = 5, min_step: float = 0.0) -> list[float]:
    """Ticks for an axis from 0 up to at least ``peak``: steps of 1, 2 or 5 times a
    power of ten (at least ``min_step``: 1 for counts of jobs), the smallest
    giving at most ``most`` intervals (an empty chart gets 0 and 1)."""
    if not math.isfinite(peak) or peak <= 0:
        return [0.0, 1.0]
    rough = max(peak / most, min_step)
    power = 10.0 ** math.floor(math.log10(rough))
    step = next(m * power for m in (1, 2, 5, 10) if m * power >= rough)
    intervals = math.ceil(peak / step - 1e-9)
    # round away float noise (0.30000000000000004): a step has one significant digit
    digits = max(0, -math.floor(math.log10(step)))
    return [round(i * step, digits) for i in range(intervals + 1)]


class History(Protocol):
    """Where the charts' last hour comes from."""

    @property
    def source(self) -> str:
        """One line for the page: where these numbers come from."""
        ...

    def observe(self, snapshot: Snapshot) -> None:
        """Called with every read of the document (changed or not)."""
        ...

    def last_hour(self, now: float) -> Series: ...


@dataclass(frozen=True, slots=True)
class _Sample:
    t: float
    total: Flow
    depth: dict[str, int]


class SampledHistory:
    """Samples taken by this process: at most one per ``resolution_s``, for ``window_s``."""

    def __init__(self, *, window_s: float = 3600.0, resolution_s: float = 10.0) -> None:
        if window_s <= 0 or resolution_s <= 0:
            raise ValueError("window_s and resolution_s must be positive")
        self.window_s = window_s
        self.resolution_s = resolution_s
        self._samples: deque[_Sample] = deque(maxlen=int(window_s / resolution_s) + 2)

    @property
    def source(self) -> str:
        return (
            "sampled by this dashboard from the document's counters every "
            f"{self.resolution_s:g} s since it started (not kept across restarts)"
        )

    def observe(self, snapshot: Snapshot) -> None:
        t = snapshot.read_at
        samples = self._samples
        if samples and t - samples[-1].t < self.resolution_s:
            return
        index = snapshot.doc.index
        depth = {q: index.count(q, "queued") for q in index.queues()}
        total, _ = flows_of(snapshot)
        samples.append(_Sample(t=t, total=total, depth=depth))

    def last_hour(self, now: float) -> Series:
        kept = [s for s in self._samples if now - s.t <= self.window_s]
        return _series(self.source, kept)


class DocumentHistory:
    """The document's own per-minute samples, then the live counters (see the module
    docstring); a document without samples falls back to sampling here."""

    def __init__(self, fallback: SampledHistory | None = None) -> None:
        self._fallback = fallback or SampledHistory()
        self._latest: Snapshot | None = None

    @property
    def source(self) -> str:
        if self._latest is not None and self._latest.doc.history:
            return "kept by the brokers in the queue document: one sample a minute, one hour"
        return self._fallback.source

    def observe(self, snapshot: Snapshot) -> None:
        self._latest = snapshot
        self._fallback.observe(snapshot)

    def last_hour(self, now: float) -> Series:
        latest = self._latest
        if latest is None or not latest.doc.history:
            return self._fallback.last_hour(now)
        kept = [
            _Sample(
                t=h.at.timestamp(),
                total=Flow(h.pushed, h.completed, h.failed, h.dead),
                depth=dict(h.depth),
            )
            for h in latest.doc.history
            if now - h.at.timestamp() <= 3600.0
        ]
        total, _ = flows_of(latest)
        if not kept or latest.read_at > kept[-1].t:
            kept.append(_Sample(t=latest.read_at, total=total, depth=depths(latest.doc)))
        return _series(self.source, kept)


def _series(source: str, kept: list[_Sample]) -> Series:
    queues = sorted({q for s in kept for q in s.depth})
    series = Series(source=source)
    series.times.extend(s.t for s in kept)
    for q in queues:
        series.depth[q] = [s.depth.get(q) for s in kept]
    for name in FLOWS:
        rates = [0.0]
        for before, after in itertools.pairwise(kept):
            rates.append(rate(before.total.get(name), after.total.get(name), after.t - before.t))
        series.rates[name] = rates[: len(kept)]
    return series


def rate(before: int, after: int, seconds: float) -> float:
    """Per second between two readings of a counter (0 when it went back: another
    document, or a reset)."""
    if seconds <= 0 or after < before:
        return 0.0
    return (after - before) / seconds
