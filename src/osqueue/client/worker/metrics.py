"""The worker's Prometheus metrics, read at scrape time.

A worker records per job only what cannot be read later: what became of the
job (by queue and outcome), how long its handler ran, and each claim call's
round trip (:class:`~osqueue.client.worker.config.WorkerRecords`).  Slots and
threads are read when Prometheus asks.  The endpoint is the generic one of
:mod:`osqueue.metrics.exposition`, on the worker's event loop, from
:meth:`Worker.run <osqueue.client.worker.Worker.run>`'s start to its end.
No metric carries a payload, a job id or a token.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Sequence

from prometheus_client.metrics_core import (
    CounterMetricFamily,
    GaugeMetricFamily,
    HistogramMetricFamily,
    InfoMetricFamily,
    Metric,
)

from osqueue.client.worker.config import (
    CLAIM_CALLS,
    HANDLER_SECONDS_BUCKETS,
    JOB_OUTCOMES,
    WorkerCounters,
    WorkerRecords,
)
from osqueue.client.worker.units import Units
from osqueue.metrics import Histogram
from osqueue.metrics.exposition import buckets_of

__all__ = ["WorkerCollector"]


class WorkerCollector:
    """A prometheus_client collector of one worker's metrics (each is listed in
    docs/operations.md).  Made by the worker (``Worker.metrics_collector()``);
    making one turns the per-job records on."""

    def __init__(
        self,
        *,
        worker_id: str,
        queues: Sequence[str],
        counters: WorkerCounters,
        units: Units,
        stopping: Callable[[], bool],
    ) -> None:
        self._worker_id = worker_id
        self._queues = tuple(queues)
        if counters.records is None:
            counters.records = WorkerRecords()
        self._records: WorkerRecords = counters.records
        self._units = units
        self._stopping = stopping

    def collect(self) -> Iterator[Metric]:
        r = self._records
        yield InfoMetricFamily(
            "osqueue_worker", "This worker: its id.", value={"worker": self._worker_id}
        )
        yield from self._jobs(r)
        yield from self._timings(r)
        units = self._units
        for name, text, value in (
            ("osqueue_worker_slots", "Jobs whose handlers may run at once.", units.concurrency),
            ("osqueue_worker_slots_busy", "Slots whose handlers run now.", units.slots_busy),
            (
                "osqueue_worker_jobs_held",
                "Jobs held: running, being settled, or lost but still in a thread.",
                units.jobs_held,
            ),
            (
                "osqueue_worker_busy_threads",
                "Sync handlers running in a thread (abandoned ones included).",
                units.threads.busy,
            ),
            ("osqueue_worker_stopping", "1 once the worker stops claiming.", self._stopping()),
        ):
            yield GaugeMetricFamily(name, text, value=float(value))

    def _jobs(self, r: WorkerRecords) -> Iterator[Metric]:
        jobs = CounterMetricFamily(
            "osqueue_worker_jobs_total",
            "Jobs this worker held, by queue and what became of them: completed, failed, "
            "retried (the handler raised Retry), lost (another worker has it now), released "
            "(given back at shutdown).",
            labels=["queue", "outcome"],
        )
        counts = {(q, o): 0 for q in self._queues for o in JOB_OUTCOMES} | dict(r.jobs)
        for (queue, outcome), n in counts.items():
            jobs.add_metric([queue, outcome], n)
        yield jobs
        claimed = CounterMetricFamily(
            "osqueue_worker_claimed_jobs_total", "Jobs claimed, by queue.", labels=["queue"]
        )
        for queue, n in (dict.fromkeys(self._queues, 0) | dict(r.claimed)).items():
            claimed.add_metric([queue], n)
        yield claimed

    def _timings(self, r: WorkerRecords) -> Iterator[Metric]:
        handlers = HistogramMetricFamily(
            "osqueue_worker_handler_duration_seconds",
            "How long a handler call ran (a batch handler's call is one), by queue.",
            labels=["queue"],
        )
        empty = Histogram(HANDLER_SECONDS_BUCKETS)
        for queue in dict.fromkeys((*self._queues, *r.handler_seconds)):
            h = r.handler_seconds.get(queue, empty)
            handlers.add_metric([queue], buckets_of(h), h.sum)
        yield handlers
        claims = HistogramMetricFamily(
            "osqueue_worker_claim_duration_seconds",
            "Round trip of an answered claim call: claim (a long poll: it waits up to "
            "wait_s when no job is ready) or complete_and_claim (never waits).",
            labels=["call"],
        )
        for call in CLAIM_CALLS:
            h = r.claim_seconds[call]
            claims.add_metric([call], buckets_of(h), h.sum)
        yield claims
        yield CounterMetricFamily(
            "osqueue_worker_claim_failures_total",
            "Claim calls that failed with a transient error (the worker backs off).",
            value=r.claim_failures,
        )
