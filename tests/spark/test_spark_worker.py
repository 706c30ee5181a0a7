"""Spark handlers in the worker: batches in one Spark job, and a lost lease cancels the
handler's Spark jobs."""

from __future__ import annotations

import asyncio
import threading
import time

import pytest
from pyspark.sql import SparkSession

import osqueue
from osqueue.api import Job, NewJob
from osqueue.client.worker import current_context
from osqueue.spark.worker import spark_batch, spark_handlers
from osqueue.storage import MemoryStorage

pytestmark = pytest.mark.spark


async def test_a_batch_handler_gets_several_jobs_and_the_session(spark: SparkSession) -> None:
    calls: list[tuple[list[str], int]] = []

    def handle(jobs: list[Job], session: SparkSession) -> None:
        total = session.createDataFrame([(j.payload.decode(),) for j in jobs], "p STRING").count()
        calls.append(([j.id for j in jobs], total))

    async with osqueue.Broker(MemoryStorage()) as broker:
        q = broker.client()
        ids = await q.push_many([NewJob(f"{i}".encode()) for i in range(6)])
        handlers = spark_handlers(spark_batch(handle), spark=spark)
        worker = osqueue.Worker(q, handlers, batch_size=3, concurrency=3, burst=True)
        await worker.run()
        assert sorted(i for got, _ in calls for i in got) == sorted(ids)
        assert all(len(got) == total <= 3 for got, total in calls)
        assert max(total for _, total in calls) > 1
        assert (await q.stats()).completed == 6


async def test_losing_the_lease_cancels_the_handlers_spark_job(spark: SparkSession) -> None:
    entered = threading.Event()
    outcome: dict[str, object] = {}
    calls: list[str] = []

    def handle(job: Job, session: SparkSession) -> None:
        calls.append(job.id)
        if len(calls) > 1:
            return  # the job, claimed again after it was given back: finish quickly
        outcome["job"] = job
        entered.set()
        started = time.monotonic()
        try:
            session.sparkContext.parallelize([1], 1).map(lambda x: time.sleep(120) or x).collect()
        except Exception as exc:
            outcome["error"] = str(exc)
            outcome["lost"] = current_context().lost
            raise
        finally:
            outcome["elapsed_s"] = time.monotonic() - started

    async with osqueue.Broker(MemoryStorage()) as broker:
        q = broker.client()
        job_id = await q.push(b"long")
        handlers = spark_handlers(handle, spark=spark)
        worker = osqueue.Worker(q, handlers, heartbeat_interval_s=0.1, wait_s=0.1)
        runner = asyncio.ensure_future(worker.run())
        try:
            assert await asyncio.to_thread(entered.wait, 60)
            tracker = spark.sparkContext.statusTracker()
            while not tracker.getActiveJobsIds():  # the Spark job is running
                await asyncio.wait({runner}, timeout=0.05)
            job = outcome["job"]
            assert isinstance(job, Job)
            await q.release(job)  # the job is no longer this worker's: next heartbeat says so
            while (await q.stats()).completed < 1:
                await asyncio.wait({runner}, timeout=0.05)
        finally:
            worker.stop()
            await runner
        assert outcome["lost"] is True
        assert "cancel" in str(outcome["error"]).lower()  # Spark's own cancellation error
        assert isinstance(outcome["elapsed_s"], float)
        assert outcome["elapsed_s"] < 60  # cancelled, not slept out
        assert worker.counters.lost == 1
        assert calls == [job_id, job_id]


async def test_a_failed_spark_job_fails_the_job_with_a_one_line_reason(
    spark: SparkSession,
) -> None:
    def handle(job: Job, session: SparkSession) -> None:
        def explode(value: int) -> int:  # local: shipped to the executor by value
            raise ValueError(f"bad record {value}")

        session.sparkContext.parallelize([7], 1).map(explode).collect()

    async with osqueue.Broker(MemoryStorage()) as broker:
        q = broker.client()
        job_id = await q.push(b"x", max_attempts=1)
        worker = osqueue.Worker(q, spark_handlers(handle, spark=spark), burst=True)
        await worker.run()
        dead = broker.document.jobs[job_id]
    assert dead.status == "dead"
    assert dead.last_error is not None
    assert dead.last_error.startswith("osqueue.spark.worker.SparkJobFailed: ")
    assert "ValueError: bad record 7" in dead.last_error
    assert "\n" not in dead.last_error
