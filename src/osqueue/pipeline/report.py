"""How the queue performed, computed by Spark from the archive.

Reads ``table=archive`` (every completed job, with its timings) and
``table=dead`` through the ``osqueue`` data source, and returns a
:class:`QueueReport`: completions per second over time, queue wait and run
time percentiles, attempts, and dead letters.  :func:`render` prints it as a
rich table; :func:`save_chart` draws it as a PNG (matplotlib, Agg backend).
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING

from rich.table import Table

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

QUANTILES = (0.5, 0.95, 0.99)
#: About this many points on the throughput curve.
TIMELINE_POINTS = 60


@dataclass(slots=True)
class Percentiles:
    p50: float | None = None
    p95: float | None = None
    p99: float | None = None
    max: float | None = None


@dataclass(slots=True)
class QueueReport:
    completed: int = 0
    dead: int = 0
    span_s: float = 0.0
    #: Completions per second over the whole span.
    jobs_per_s: float = 0.0
    bucket_s: int = 1
    #: (seconds since the first completion, jobs per second in that bucket)
    timeline: list[tuple[float, float]] = field(default_factory=list)
    wait_ms: Percentiles = field(default_factory=Percentiles)
    run_ms: Percentiles = field(default_factory=Percentiles)
    #: attempts -> how many completed jobs needed that many
    attempts: dict[int, int] = field(default_factory=dict)
    #: last_error -> dead letters with it (most frequent first)
    dead_errors: list[tuple[str, int]] = field(default_factory=list)

    @property
    def retried(self) -> int:
        return sum(n for attempts, n in self.attempts.items() if attempts > 1)


def _percentiles(values: list[float] | None, top: float | None) -> Percentiles:
    if not values:
        return Percentiles()
    return Percentiles(values[0], values[1], values[2], top)


def build_report(spark: SparkSession, url: str, *, queue: str | None = None) -> QueueReport:
    """Run the Spark queries over the archive and the dead letters of the queue at ``url``."""
    from pyspark.sql import functions as F

    from osqueue.spark import register

    register(spark)
    reader = spark.read.format("osqueue").option("url", url)
    if queue is not None:
        reader = reader.option("queue", queue)
    archive = reader.option("table", "archive").load().cache()
    report = QueueReport()
    try:
        quantiles = ", ".join(str(q) for q in QUANTILES)
        summary = archive.agg(
            F.count("*").alias("n"),
            F.min("completed_at").alias("first"),
            F.max("completed_at").alias("last"),
            F.min("created_at").alias("created"),
            F.expr(f"percentile(wait_ms, array({quantiles}))").alias("wait"),
            F.expr(f"percentile(run_ms, array({quantiles}))").alias("run"),
            F.max("wait_ms").alias("wait_max"),
            F.max("run_ms").alias("run_max"),
        ).first()
        assert summary is not None
        report.completed = int(summary["n"])
        if report.completed:
            start = summary["created"] or summary["first"]
            report.span_s = max((summary["last"] - start).total_seconds(), 1e-3)
            report.jobs_per_s = report.completed / report.span_s
            report.wait_ms = _percentiles(summary["wait"], summary["wait_max"])
            report.run_ms = _percentiles(summary["run"], summary["run_max"])
            report.bucket_s = max(1, math.ceil(report.span_s / TIMELINE_POINTS))
            bucket = F.floor(F.unix_micros("completed_at") / 1e6 / report.bucket_s)
            rows = archive.groupBy(bucket.alias("b")).count().orderBy("b").collect()
            counts = {int(r["b"]): int(r["count"]) for r in rows}
            first, last = min(counts), max(counts)
            report.timeline = [  # every bucket, empty ones too
                ((b - first) * report.bucket_s, counts.get(b, 0) / report.bucket_s)
                for b in range(first, last + 1)
            ]
            report.attempts = {
                int(r["attempts"]): int(r["count"])
                for r in archive.groupBy("attempts").count().orderBy("attempts").collect()
            }
    finally:
        archive.unpersist()
    dead = reader.option("table", "dead").load()
    errors = dead.groupBy("last_error").count().orderBy(F.desc("count")).collect()
    report.dead_errors = [(str(r["last_error"]), int(r["count"])) for r in errors]
    report.dead = sum(n for _, n in report.dead_errors)
    return report


def _fmt(value: float | None) -> str:
    return "-" if value is None else f"{value:,.1f}"


def render(report: QueueReport, *, title: str = "queue report (Spark over the archive)") -> Table:
    table = Table(title=title, show_header=True, header_style="bold")
    table.add_column("metric")
    table.add_column("value", justify="right")
    table.add_row("jobs completed", f"{report.completed:,}")
    table.add_row("span (first push to last completion)", f"{report.span_s:,.1f} s")
    table.add_row("throughput", f"{report.jobs_per_s:,.2f} jobs/s")
    peak = max((rate for _, rate in report.timeline), default=0.0)
    table.add_row(f"peak throughput ({report.bucket_s} s buckets)", f"{peak:,.2f} jobs/s")
    for name, p in (("queue wait", report.wait_ms), ("run time", report.run_ms)):
        table.add_row(
            f"{name} p50 / p95 / p99 / max",
            f"{_fmt(p.p50)} / {_fmt(p.p95)} / {_fmt(p.p99)} / {_fmt(p.max)} ms",
        )
    spread = ", ".join(f"{a}: {n:,}" for a, n in sorted(report.attempts.items())) or "-"
    table.add_row("attempts (attempts: jobs)", spread)
    table.add_row("jobs retried (attempts > 1)", f"{report.retried:,}")
    table.add_row("dead letters", f"{report.dead:,}")
    for error, n in report.dead_errors[:3]:
        table.add_row(f"  dead: {error[:60]}", f"{n:,}")
    return table


def save_chart(report: QueueReport, path: Path) -> Path:
    """Draw throughput over time, latency percentiles and attempts into a PNG."""
    import matplotlib

    matplotlib.use("Agg")
    from matplotlib import pyplot as plt

    fig, (ax1, ax2, ax3) = plt.subplots(1, 3, figsize=(15, 4.2))
    try:
        if report.timeline:
            xs, ys = zip(*report.timeline, strict=True)
            ax1.plot(xs, ys, marker="o", markersize=3)
        ax1.set_title(f"completions per second ({report.bucket_s} s buckets)")
        ax1.set_xlabel("seconds")
        ax1.set_ylim(bottom=0)
        ax1.set_ylabel("jobs/s")
        labels = ["p50", "p95", "p99"]
        width = 0.38
        series = (("wait", report.wait_ms, -width / 2), ("run", report.run_ms, width / 2))
        for name, p, offset in series:
            values = [p.p50 or 0.0, p.p95 or 0.0, p.p99 or 0.0]
            ax2.bar([i + offset for i in range(3)], values, width, label=name)
        ax2.set_xticks(range(3), labels)
        ax2.set_ylabel("ms")
        ax2.set_title("queue wait and run time")
        ax2.legend()
        attempts = sorted(report.attempts.items())
        ax3.bar([str(a) for a, _ in attempts], [n for _, n in attempts])
        ax3.set_title(f"attempts per completed job ({report.dead} dead)")
        ax3.set_xlabel("attempts")
        ax3.set_ylabel("jobs")
        fig.tight_layout()
        path.parent.mkdir(parents=True, exist_ok=True)
        fig.savefig(path, dpi=100)
    finally:
        plt.close(fig)
    return path
