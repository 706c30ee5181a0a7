"""An index worker: an :class:`osqueue.Worker` running the index handler on Spark,
timing where its wall time goes (Spark merges, manifest I/O, queue operations).

``queue_s`` is the worker's active time (first handler start to last handler
end) during which no handler ran: claiming, completing, and waiting between
batches.  It is the queue's overhead as the pipeline sees it.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Sequence
from dataclasses import asdict, dataclass, field
from typing import TYPE_CHECKING, Any

from osqueue.api import Job, QueueClient
from osqueue.client.worker import Worker, WorkerConfig
from osqueue.spark.worker import spark_batch, spark_handler

from .index import IndexRun, index_jobs
from .task import INDEX_QUEUE

if TYPE_CHECKING:
    from pyspark.sql import SparkSession


@dataclass(slots=True)
class Timings:
    calls: int = 0
    jobs: int = 0
    handler_s: float = 0.0
    spark_s: float = 0.0
    storage_s: float = 0.0
    merges: int = 0
    #: Merges redone because another worker published the namespace first.
    conflicts: int = 0
    segments_applied: int = 0
    segments_skipped: int = 0
    first_start: float | None = None
    last_end: float | None = None
    #: Wall time covered by at least one running handler.
    busy_s: float = 0.0
    _intervals: list[tuple[float, float]] = field(default_factory=list, repr=False)

    @property
    def active_s(self) -> float:
        if self.first_start is None or self.last_end is None:
            return 0.0
        return self.last_end - self.first_start

    @property
    def queue_s(self) -> float:
        return max(0.0, self.active_s - self.busy_s)

    def add_interval(self, start: float, end: float) -> None:
        self._intervals.append((start, end))
        self.first_start = start if self.first_start is None else min(self.first_start, start)
        self.last_end = end if self.last_end is None else max(self.last_end, end)
        busy, reach = 0.0, float("-inf")
        for lo, hi in sorted(self._intervals):
            lo = max(lo, reach)
            if hi > lo:
                busy += hi - lo
            reach = max(reach, hi)
        self.busy_s = busy

    def to_dict(self) -> dict[str, Any]:
        out = {k: v for k, v in asdict(self).items() if not k.startswith("_")}
        out.update(active_s=self.active_s, queue_s=self.queue_s)
        return out


class TimedIndexHandler:
    """``fn(jobs, spark)``: index the jobs and add the time taken to :attr:`timings`."""

    def __init__(self) -> None:
        self.timings = Timings()
        self._lock = threading.Lock()

    def __call__(self, jobs: Sequence[Job], spark: SparkSession) -> list[IndexRun]:
        started = time.time()
        try:
            runs = index_jobs(jobs, spark)
        finally:
            ended = time.time()
        with self._lock:
            t = self.timings
            t.calls += 1
            t.jobs += len(jobs)
            t.handler_s += ended - started
            t.add_interval(started, ended)
            for run in runs:
                t.spark_s += run.spark_s
                t.storage_s += run.storage_s
                t.merges += run.merges
                for result in run.results.values():
                    t.conflicts += max(0, result.attempts - 1)
                    t.segments_applied += len(result.applied)
                    t.segments_skipped += len(result.skipped)
        return runs


def index_worker(
    client: QueueClient,
    spark: SparkSession,
    config: WorkerConfig,
) -> tuple[Worker, TimedIndexHandler]:
    """A worker on the index queue (``config.queues``, default ``index``) and its timings."""
    handler = TimedIndexHandler()
    wrapped = spark_handler(spark_batch(handler), spark)
    queues = config.queues or (INDEX_QUEUE,)
    worker = Worker.from_config(client, {q: wrapped for q in queues}, config)
    return worker, handler
