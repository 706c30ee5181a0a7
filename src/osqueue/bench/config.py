"""What a benchmark run is asked to do, and the figures it reports."""

from __future__ import annotations

from dataclasses import dataclass

from osqueue.errors import InvalidInput

#: The keys of :meth:`BenchResult.to_dict`, in the order they are printed.
RESULT_KEYS = (
    "ops_per_s",
    "jobs_per_s",
    "p50_ms",
    "p99_ms",
    "commits",
    "avg_batch",
    "storage",
    "clients",
)


@dataclass(frozen=True, slots=True)
class BenchConfig:
    """One benchmark run: ``clients`` closed-loop clients doing push -> claim -> complete.

    ``jobs`` is the total number of jobs pushed, claimed and completed by all
    clients together; the run also stops starting new cycles after
    ``duration_s``.  ``preload`` jobs are queued before the clock starts (the
    clients then claim the oldest jobs first, so the document keeps its size).
    ``batch`` is the number of jobs per push and per claim call.  ``metrics``:
    the broker serves Prometheus metrics and the run scrapes them every second
    (what metrics cost on the hot path; not with a remote broker).
    """

    storage: str = "memory://bench"
    clients: int = 1
    jobs: int = 10_000
    preload: int = 0
    batch: int = 1
    duration_s: float = 60.0
    payload_bytes: int = 32
    queue: str = "default"
    metrics: bool = False

    def __post_init__(self) -> None:
        if not self.storage:
            raise InvalidInput("must be a storage URL", field="storage")
        if self.clients < 1:
            raise InvalidInput(f"must be at least 1, got {self.clients}", field="clients")
        if self.jobs < 1:
            raise InvalidInput(f"must be at least 1, got {self.jobs}", field="jobs")
        if self.preload < 0:
            raise InvalidInput(f"must not be negative, got {self.preload}", field="preload")
        if self.batch < 1:
            raise InvalidInput(f"must be at least 1, got {self.batch}", field="batch")
        if not self.duration_s > 0:
            raise InvalidInput(f"must be positive, got {self.duration_s}", field="duration_s")
        if self.payload_bytes < 0:
            raise InvalidInput(
                f"must not be negative, got {self.payload_bytes}", field="payload_bytes"
            )
        if not self.queue:
            raise InvalidInput("must be a queue name", field="queue")


@dataclass(frozen=True, slots=True)
class BenchResult:
    """The figures of one run.  ``ops`` counts every push, claim and complete call."""

    ops_per_s: float
    jobs_per_s: float
    p50_ms: float
    p99_ms: float
    commits: int
    avg_batch: float
    storage: str
    clients: int
    jobs: int
    ops: int
    elapsed_s: float
    #: Broker and clients ran in separate processes (``osqueue bench --remote``).
    remote: bool = False
    #: Scrapes of the broker's ``/metrics`` during the run (None: metrics off).
    metrics_scrapes: int | None = None

    def to_dict(self) -> dict[str, float | int | str | bool]:
        """The JSON line's fields: :data:`RESULT_KEYS`, then ``"remote": true`` if
        remote, ``"metrics_scrapes": N`` if metrics were on."""
        d: dict[str, float | int | str | bool] = {
            "ops_per_s": round(self.ops_per_s, 1),
            "jobs_per_s": round(self.jobs_per_s, 1),
            "p50_ms": round(self.p50_ms, 3),
            "p99_ms": round(self.p99_ms, 3),
            "commits": self.commits,
            "avg_batch": round(self.avg_batch, 2),
            "storage": self.storage,
            "clients": self.clients,
        }
        if self.remote:
            d["remote"] = True
        if self.metrics_scrapes is not None:
            d["metrics_scrapes"] = self.metrics_scrapes
        return d
