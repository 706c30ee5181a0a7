"""The WAL-to-index pipeline: the Spark index equals a plain-Python replay of the WAL,
whatever the batching and order, when a job is re-run after it published, when
two workers race on one namespace, and when a worker process is SIGKILLed mid-job."""

from __future__ import annotations

import asyncio
import os
import signal
import subprocess
import sys
import threading
from pathlib import Path

import pytest
from pyspark.sql import SparkSession
from spark_helpers import archive_records, served_broker, wait_until

import osqueue
from osqueue.client.worker import WorkerConfig
from osqueue.clock import ManualClock
from osqueue.pipeline.dataroot import DataRoot
from osqueue.pipeline.generate import enqueue, job_order
from osqueue.pipeline.index import index_jobs, index_segments
from osqueue.pipeline.lww import IndexRow, fold
from osqueue.pipeline.manifest import load_manifest
from osqueue.pipeline.task import INDEX_QUEUE, task_for
from osqueue.pipeline.verify import read_index, reference, verify
from osqueue.pipeline.wal import GenerateConfig, decode_segment, list_segments, write_wal
from osqueue.pipeline.worker import index_worker
from osqueue.storage import MemoryStorage

pytestmark = pytest.mark.spark

SMALL = GenerateConfig(
    namespaces=3, segments_per_namespace=4, rows_per_segment=300, keys_per_namespace=120, seed=11
)


def make_root(
    tmp_path: Path, name: str, config: GenerateConfig = SMALL
) -> tuple[DataRoot, list[str]]:
    root = DataRoot(str(tmp_path / name))
    return root, write_wal(root, config)


def index_rows(root: DataRoot) -> dict[str, dict[str, IndexRow]]:
    out = {}
    for namespace in reference(root):
        manifest, _ = load_manifest(root, namespace)
        rows, duplicates = read_index(root, manifest.path)
        assert duplicates == []
        out[namespace] = rows
    return out


def test_the_data_set_needs_last_write_wins(tmp_path: Path) -> None:
    """Applying records in file order gives a different answer: the test data has
    late writes and out-of-order deletes, so the tests below prove something."""
    root, segments = make_root(tmp_path, "lake")
    expected = reference(root)
    naive_differs = False
    for rows, keys in expected.values():
        naive: dict[str, str] = {}
        for key in keys:
            for record in decode_segment(root.get(key), path=key):
                naive[record.id] = record.op
        live = {rid for rid, op in naive.items() if op == "upsert"}
        naive_differs |= live != {rid for rid, row in rows.items() if not row.deleted}
    assert naive_differs
    assert len(segments) == 12


def test_index_equals_the_plain_python_reference_row_for_row(
    spark: SparkSession, tmp_path: Path
) -> None:
    root, segments = make_root(tmp_path, "lake")
    ordered = job_order(segments)
    for start in range(0, len(ordered), 5):  # batches that span namespaces
        index_segments(spark, root, ordered[start : start + 5])
    report = verify(root)
    assert report.ok, report.differences
    assert report.segments == 12
    assert report.rows == sum(len(rows) for rows, _ in reference(root).values())

    versions = {ns: load_manifest(root, ns)[0].version for ns in reference(root)}
    rerun = index_segments(spark, root, segments)  # everything is already published
    assert rerun.merges == 0
    assert all(r.applied == [] and len(r.skipped) == 4 for r in rerun.results.values())
    assert {ns: load_manifest(root, ns)[0].version for ns in versions} == versions


def test_order_and_batching_do_not_change_the_index(spark: SparkSession, tmp_path: Path) -> None:
    one, segments = make_root(tmp_path, "one")
    two, _ = make_root(tmp_path, "two")
    index_segments(spark, one, segments)  # everything in one Spark job
    for segment in reversed(segments):  # newest first, one segment per job
        index_segments(spark, two, [segment])
    assert index_rows(one) == index_rows(two)
    assert verify(two).ok


def test_two_workers_racing_on_one_namespace_lose_nothing(
    spark: SparkSession, tmp_path: Path
) -> None:
    root, segments = make_root(tmp_path, "lake")
    mine = [s for s in segments if s.startswith("wal/ns-001/")]
    both_merged = threading.Barrier(2, timeout=60)

    def line_up(namespace: str, attempt: int) -> None:
        if attempt == 1:  # both built a version from the same manifest: one must lose
            both_merged.wait()

    runs = {}

    def worker(name: str, part: list[str]) -> None:
        runs[name] = index_segments(spark, root, part, before_publish=line_up)

    threads = [
        threading.Thread(target=worker, args=("a", mine[:2])),
        threading.Thread(target=worker, args=("b", mine[2:])),
    ]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout=120)
    attempts = sorted(run.results["ns-001"].attempts for run in runs.values())
    assert attempts == [1, 2]  # the loser re-read the manifest and merged again
    manifest, _ = load_manifest(root, "ns-001")
    assert manifest.segments == tuple(mine)
    assert manifest.version == 2
    expected, _ = reference(root)["ns-001"]
    got, _ = read_index(root, manifest.path)
    assert got == expected


async def test_a_job_re_run_after_it_published_changes_nothing(
    spark: SparkSession, tmp_path: Path
) -> None:
    root, segments = make_root(tmp_path, "lake")
    clock = ManualClock()
    config = osqueue.BrokerConfig(heartbeat_timeout_s=5.0, backoff_base_s=1.0)
    async with osqueue.Broker(MemoryStorage(), config, clock=clock) as broker:
        q = broker.client()
        for segment in segments:
            task = task_for(root.uri, segment)
            await q.push(task.encode(), queue=INDEX_QUEUE, key=task.key)
        jobs = await q.claim("crashes", [INDEX_QUEUE], max_jobs=3)
        await asyncio.to_thread(index_jobs, jobs, spark)  # published, then "crashed"
        published = {ns: load_manifest(root, ns)[0] for ns in ("ns-000", "ns-001", "ns-002")}

        clock.advance(6.0)
        await q.push(b"tick", queue="other")  # a commit sweeps the stale claims
        clock.advance(2.0)  # past the retry backoff
        again = await q.claim("survivor", [INDEX_QUEUE], max_jobs=3)
        assert sorted(j.id for j in again) == sorted(j.id for j in jobs)
        assert {j.attempts for j in again} == {2}
        runs = await asyncio.to_thread(index_jobs, again, spark)
        assert all(r.applied == [] for run in runs for r in run.results.values())
        assert {ns: load_manifest(root, ns)[0] for ns in published} == published
        for job in again:
            await q.complete(job)

        rest = await q.claim("survivor", [INDEX_QUEUE], max_jobs=100)
        await asyncio.to_thread(index_jobs, rest, spark)
    assert verify(root).ok


@pytest.mark.chaos
@pytest.mark.slow
def test_a_worker_killed_mid_job_is_replaced_and_the_index_stays_exact(
    spark: SparkSession, tmp_path: Path, file_queue: str
) -> None:
    data = GenerateConfig(
        namespaces=2, segments_per_namespace=3, rows_per_segment=400, keys_per_namespace=150
    )
    root, segments = make_root(tmp_path, "lake", data)
    log = tmp_path / "victim.log"
    with served_broker(file_queue, heartbeat_timeout_s=2.0, backoff_base_s=0.1) as served:
        enqueue(spark, file_queue, root, segments)
        command = [
            sys.executable,
            "-m",
            "osqueue.cli.pipeline",
            "index",
            file_queue,
            "--worker-id",
            "victim",
            "--batch-size",
            "2",
            "--heartbeat-interval-s",
            "0.3",
            "--spark-master",
            "local[1]",
            "--spark-conf",
            "spark.ui.enabled=false",
        ]
        env = {**os.environ, "PYSPARK_PYTHON": sys.executable}
        with log.open("wb") as out:
            victim = subprocess.Popen(
                command, stdout=out, stderr=subprocess.STDOUT, env=env, start_new_session=True
            )
        try:

            def held() -> list[str]:
                return [
                    job.id
                    for job in served.jobs()
                    if job.status == "claimed" and job.claim and job.claim.worker == "victim"
                ]

            wait_until(lambda: bool(held()), timeout_s=120, what="the victim to claim jobs")
            killed = held()
            os.killpg(victim.pid, signal.SIGKILL)  # the worker and its JVM, mid-job
        finally:
            if victim.poll() is None:
                os.killpg(victim.pid, signal.SIGKILL)
            victim.wait()

        async def survive() -> None:
            config = WorkerConfig(
                queues=(INDEX_QUEUE,), batch_size=2, concurrency=2, worker_id="survivor", wait_s=0.2
            )
            worker, _ = index_worker(served.client, spark, config)
            runner = asyncio.ensure_future(worker.run())
            while (await served.client.stats()).completed < len(segments):
                await asyncio.wait({runner}, timeout=0.2)
                assert not runner.done(), runner
            worker.stop()
            await runner

        served.run(survive())
        wait_until(
            lambda: len(archive_records(file_queue)) == len(segments),
            timeout_s=30,
            what="every job archived",
        )
    records = {r["id"]: r for r in archive_records(file_queue)}
    assert killed
    for job_id in killed:
        assert (records[job_id]["attempts"], records[job_id]["worker"]) == (2, "survivor")
    report = verify(root)
    assert report.ok, report.differences
    assert report.segments == len(list_segments(root))


def test_fold_is_independent_of_record_order(tmp_path: Path) -> None:
    root, segments = make_root(tmp_path, "lake")
    records = [r for key in segments for r in decode_segment(root.get(key), path=key)]
    forward = fold({}, records)
    backward = fold({}, reversed(records))
    assert forward == backward
