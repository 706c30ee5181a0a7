"""``pipeline report`` (Spark over the archive) and ``pipeline verify`` (the CLI's verdict)."""

from __future__ import annotations

from pathlib import Path

import pytest
from pyspark.sql import SparkSession
from spark_helpers import served_broker, wait_archived
from typer.testing import CliRunner

from osqueue.api import NewJob
from osqueue.cli.pipeline import pipeline_app
from osqueue.pipeline.dataroot import DataRoot
from osqueue.pipeline.index import index_segments
from osqueue.pipeline.manifest import manifest_key
from osqueue.pipeline.report import build_report, render, save_chart
from osqueue.pipeline.wal import GenerateConfig, write_wal

pytestmark = pytest.mark.spark


def test_report_counts_throughput_latency_attempts_and_dead_letters(
    spark: SparkSession, file_queue: str, tmp_path: Path
) -> None:
    with served_broker(file_queue) as served:
        q = served.client
        served.run(q.push_many([NewJob(f"{i}".encode(), max_attempts=3) for i in range(8)]))
        served.run(q.push_many([NewJob(b"doomed", max_attempts=1) for _ in range(2)]))
        jobs = served.run(q.claim("w", ["default"], max_jobs=10))
        doomed = [j for j in jobs if j.payload == b"doomed"]
        good = [j for j in jobs if j.payload != b"doomed"]
        for job in doomed:
            served.run(q.fail(job, error="no such customer"))
        served.run(q.fail(good[0], error="flaky", retry_after_s=0.0))
        (again,) = served.run(q.claim("w", ["default"], max_jobs=1, wait_s=5.0))
        assert again.id == good[0].id
        served.run(q.complete_many([again, *good[1:]]))
        wait_archived(served, 8)

        report = build_report(spark, file_queue)
    assert report.completed == 8
    assert report.attempts == {1: 7, 2: 1}
    assert report.retried == 1
    assert report.dead == 2
    assert report.dead_errors == [("no such customer", 2)]
    assert sum(rate * report.bucket_s for _, rate in report.timeline) == pytest.approx(8)
    for p in (report.wait_ms, report.run_ms):
        assert p.p50 is not None
        assert p.p99 is not None
        assert 0 <= p.p50 <= p.p99 <= (p.max or 0)
    assert report.jobs_per_s > 0
    assert render(report).row_count >= 8
    chart = save_chart(report, tmp_path / "chart.png")
    assert chart.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


def test_verify_command_says_ok_or_lists_what_differs(spark: SparkSession, tmp_path: Path) -> None:
    root = DataRoot(str(tmp_path / "lake"))
    segments = write_wal(
        root,
        GenerateConfig(
            namespaces=2, segments_per_namespace=2, rows_per_segment=200, keys_per_namespace=80
        ),
    )
    index_segments(spark, root, segments)
    runner = CliRunner()
    ok = runner.invoke(pipeline_app, ["verify", "--root", root.uri])
    assert ok.exit_code == 0, ok.output
    assert "verify: OK (2 namespaces, 4 segments" in ok.output

    (tmp_path / "lake" / manifest_key("ns-001")).unlink()  # the index of ns-001 is gone
    bad = runner.invoke(pipeline_app, ["verify", "--root", root.uri])
    assert bad.exit_code == 1
    assert "ns-001: 2 segment(s) not indexed" in bad.output
    assert "verify: FAILED" in bad.output
