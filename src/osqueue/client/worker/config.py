"""How a worker runs (:class:`WorkerConfig`) and what it has done (:class:`WorkerCounters`,
with :class:`WorkerRecords` while its metrics are on).

:class:`WorkerConfig` is what :class:`~osqueue.client.worker.Worker` takes
whole; :class:`WorkerOptions` are the same fields as keyword arguments
(``Worker(client, handler, concurrency=8)``), laid over a config by
:func:`worker_config`.
"""

from __future__ import annotations

import dataclasses
import os
import secrets
import socket
from collections import Counter
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from typing import Any, Literal, TypedDict

from osqueue.address import split_host_port
from osqueue.api import Job
from osqueue.errors import InvalidInput
from osqueue.metrics import Histogram

DEFAULT_HEARTBEAT_TIMEOUT_S = 30.0


@dataclass(frozen=True, slots=True)
class WorkerConfig:
    """How a :class:`Worker` runs.  ``concurrency`` counts jobs whose handlers run
    at once (a batch of 10 takes 10 slots), so ``batch_size`` must not exceed it.
    Jobs whose completion is on its way hold no slot."""

    queues: tuple[str, ...] | None = None
    concurrency: int = 1
    batch_size: int = 1
    worker_id: str | None = None
    heartbeat_interval_s: float | None = None
    wait_s: float = 5.0
    shutdown_grace_period_s: float = 30.0
    burst: bool = False
    #: ``host:port`` to serve Prometheus metrics on at ``/metrics`` while
    #: :meth:`Worker.run` runs (port 0: any free port); needs ``osqueue[metrics]``.
    metrics_listen: str | None = None

    def __post_init__(self) -> None:
        _positive_int(self.concurrency, "concurrency")
        _positive_int(self.batch_size, "batch_size")
        if self.batch_size > self.concurrency:
            raise InvalidInput(
                f"{self.batch_size} exceeds concurrency ({self.concurrency}); "
                "concurrency counts jobs whose handlers run at once",
                field="batch_size",
            )
        if self.heartbeat_interval_s is not None:
            _seconds(self.heartbeat_interval_s, "heartbeat_interval_s", positive=True)
        _seconds(self.wait_s, "wait_s")
        _seconds(self.shutdown_grace_period_s, "shutdown_grace_period_s")
        if self.queues is not None:
            if isinstance(self.queues, str) or not self.queues:
                raise InvalidInput("must be a non-empty sequence of queue names", field="queues")
            for name in self.queues:
                if not isinstance(name, str) or not name:
                    raise InvalidInput(f"{name!r} is not a queue name", field="queues")
        if self.worker_id is not None and (
            not isinstance(self.worker_id, str) or not self.worker_id
        ):
            raise InvalidInput("must be a non-empty string", field="worker_id")
        if self.metrics_listen is not None:
            split_host_port(self.metrics_listen, "metrics_listen")


class WorkerOptions(TypedDict, total=False):
    """The fields of :class:`WorkerConfig` as keyword arguments (``queues`` any sequence)."""

    queues: Sequence[str] | None
    concurrency: int
    batch_size: int
    worker_id: str | None
    heartbeat_interval_s: float | None
    wait_s: float
    shutdown_grace_period_s: float
    burst: bool
    metrics_listen: str | None


def worker_config(config: WorkerConfig | None, options: WorkerOptions) -> WorkerConfig:
    """``config`` (default ``WorkerConfig()``) with ``options`` in place of its fields,
    validated as a whole."""
    base = config if config is not None else WorkerConfig()
    if not options:
        return base
    # Typed at the call site (WorkerOptions), checked by WorkerConfig itself.
    fields: dict[str, Any] = dict(options)
    queues = fields.get("queues")
    if isinstance(queues, Iterable) and not isinstance(queues, str):
        fields["queues"] = tuple(queues)
    return dataclasses.replace(base, **fields)


def _positive_int(value: object, field: str) -> None:
    if isinstance(value, bool) or not isinstance(value, int) or value < 1:
        raise InvalidInput(f"{value!r} is not an integer >= 1", field=field)


def _seconds(value: object, field: str, *, positive: bool = False) -> None:
    ok = isinstance(value, int | float) and not isinstance(value, bool) and value >= 0
    if not ok or (positive and value == 0) or value != value or value == float("inf"):
        bound = "> 0" if positive else ">= 0"
        raise InvalidInput(f"{value!r} is not a finite number of seconds {bound}", field=field)


#: The client methods a worker calls: every :class:`~osqueue.api.QueueClient` has them.
WORKER_CALLS = ("claim", "complete_and_claim", "complete", "fail", "release", "heartbeat")


def check_client(client: object) -> None:
    """Refuse, before anything runs, a client of your own that lacks a method the
    worker calls (``complete_and_claim`` most likely: the next claim carries the
    last jobs' completions), naming what is missing."""
    missing = [name for name in WORKER_CALLS if not callable(getattr(client, name, None))]
    if missing:
        raise InvalidInput(
            f"{type(client).__name__} has no {', '.join(missing)}: a worker's client "
            "offers every method of osqueue.api.QueueClient (both clients of osqueue do)",
            field="client",
        )


def broker_heartbeat_timeout_s(client: object) -> float:
    """The broker's heartbeat timeout as ``client`` knows it, else the broker default.

    Clients expose it as ``heartbeat_timeout_s``; an in-process client that does
    not is asked through its broker's config.
    """
    for value in (
        getattr(client, "heartbeat_timeout_s", None),
        getattr(
            getattr(getattr(client, "broker", None), "config", None), "heartbeat_timeout_s", None
        ),
    ):
        if isinstance(value, int | float) and not isinstance(value, bool) and value > 0:
            return float(value)
    return DEFAULT_HEARTBEAT_TIMEOUT_S


def default_worker_id() -> str:
    return f"{socket.gethostname()}-{os.getpid()}-{secrets.token_hex(3)}"


#: What became of a job this worker held (the ``outcome`` label of its metrics).
JobOutcome = Literal["completed", "failed", "retried", "lost", "released"]
JOB_OUTCOMES: tuple[JobOutcome, ...] = ("completed", "failed", "retried", "lost", "released")
#: A claim call, as the claim round-trip histogram tells them apart.
ClaimCall = Literal["claim", "complete_and_claim"]
CLAIM_CALLS: tuple[ClaimCall, ...] = ("claim", "complete_and_claim")

#: Upper bounds of the handler-duration buckets (seconds).
HANDLER_SECONDS_BUCKETS = (
    0.001, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0, 60.0, 300.0, 1800.0
)  # fmt: skip
#: Upper bounds of the claim round-trip buckets (seconds; a long poll waits up to ``wait_s``).
CLAIM_SECONDS_BUCKETS = (
    0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0
)  # fmt: skip


@dataclass(slots=True)
class WorkerRecords:
    """What the metrics need beyond the totals: jobs by queue and outcome, handler
    durations by queue, claim round trips by call.  Kept only while something
    reads them (``Worker.metrics_collector``)."""

    #: (queue, outcome) -> jobs
    jobs: Counter[tuple[str, JobOutcome]] = field(default_factory=Counter)
    #: queue -> jobs claimed
    claimed: Counter[str] = field(default_factory=Counter)
    #: queue -> handler durations (one per handler call: a batch is one)
    handler_seconds: dict[str, Histogram] = field(default_factory=dict)
    claim_seconds: dict[ClaimCall, Histogram] = field(
        default_factory=lambda: {call: Histogram(CLAIM_SECONDS_BUCKETS) for call in CLAIM_CALLS}
    )
    #: claim calls that failed with a transient error (the loop backs off)
    claim_failures: int = 0

    def handler_ran(self, queue: str, seconds: float) -> None:
        histogram = self.handler_seconds.get(queue)
        if histogram is None:
            histogram = self.handler_seconds[queue] = Histogram(HANDLER_SECONDS_BUCKETS)
        histogram.observe(seconds)


@dataclass(slots=True)
class WorkerCounters:
    """Running totals, for progress display (and :attr:`records` for the metrics)."""

    claimed: int = 0
    processed: int = 0
    failed: int = 0
    retried: int = 0
    lost: int = 0
    released: int = 0
    #: per-queue records for the metrics; None while no one reads them
    records: WorkerRecords | None = None

    def as_dict(self) -> dict[str, int]:
        """The totals by name."""
        return {
            "claimed": self.claimed,
            "processed": self.processed,
            "failed": self.failed,
            "retried": self.retried,
            "lost": self.lost,
            "released": self.released,
        }

    def job(self, queue: str, outcome: JobOutcome) -> None:
        """Count what became of a job of ``queue``: its total, and by queue for the
        metrics (when on)."""
        match outcome:
            case "completed":
                self.processed += 1
            case "failed":
                self.failed += 1
            case "retried":
                self.retried += 1
            case "lost":
                self.lost += 1
            case "released":
                self.released += 1
        if self.records is not None:
            self.records.jobs[(queue, outcome)] += 1

    def took(self, jobs: Sequence[Job]) -> None:
        """Count claimed jobs: the total, and by queue for the metrics (when on)."""
        self.claimed += len(jobs)
        if self.records is not None:
            self.records.claimed.update(job.queue for job in jobs)
