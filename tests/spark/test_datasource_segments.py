"""``spark.read.format("osqueue")`` of a deep backlog returns the jobs in the document
and those in segment objects (a task per segment), large payloads included; a
segment loaded and deleted after the query was planned is read from the
document instead."""

from __future__ import annotations

from pathlib import Path

import pytest
from cold_helpers import COLD, fan_in, kill
from pyspark.sql import SparkSession
from spark_helpers import served_broker

from osqueue.errors import CorruptDocument
from osqueue.spark.datasource import (
    DeadPartition,
    DelayedPartition,
    JobsReader,
    SegmentPartition,
    WaitingPartition,
)
from osqueue.spark.options import ReadOptions

pytestmark = pytest.mark.spark

DEEP = {
    "segment_jobs": 40,
    "head_jobs": 5,
    "load_jobs": 10,
    "spill_above_jobs": 20,
    "inline_payload_max_bytes": 64,
    "payload_sweep_interval_s": None,
    "stats_log_interval_s": None,
}


def test_a_read_returns_every_job_of_the_document_and_its_segments(
    spark: SparkSession, file_queue: str
) -> None:
    rows = [(f"payload-{i}" + ("x" * 100 if i % 50 == 7 else ""), i % 2) for i in range(400)]
    frame = spark.createDataFrame(rows, "payload STRING, priority INT").repartition(3)
    with served_broker(file_queue, **DEEP) as served:
        frame.write.format("osqueue").option("url", file_queue).option("queue", "work").mode(
            "append"
        ).save()
        served.run(served.broker.segments.settled())
        spilled = served.run(served.client.stats()).queues["work"].spilled
        assert spilled > 300
        plan = JobsReader(ReadOptions.parse({"url": file_queue})).partitions()
        assert sum(isinstance(p, SegmentPartition) for p in plan) >= 300 // 40

        jobs = spark.read.format("osqueue").option("url", file_queue).load().collect()
        assert sorted((r.payload.decode(), r.priority) for r in jobs) == sorted(rows)
        assert {r.status for r in jobs} == {"queued"}

        claimed = []
        while len(claimed) < 30:  # a claim stops at a segment not loaded yet
            claimed += served.run(
                served.client.claim("w", ["work"], max_jobs=30 - len(claimed), wait_s=30.0)
            )
        served.run(served.broker.segments.settled())
        after = spark.read.format("osqueue").option("url", file_queue).load()
        assert after.count() == 400
        assert after.filter("status = 'claimed'").count() == 30


def test_a_segment_gone_since_the_plan_is_read_from_the_document(
    spark: SparkSession, file_queue: str
) -> None:
    with served_broker(file_queue, **DEEP) as served:
        for i in range(120):
            served.run(served.client.push(b"p%d" % i))
        served.run(served.broker.segments.settled())
        reader = JobsReader(ReadOptions.parse({"url": file_queue}))
        plan = reader.partitions()
        first = next(p for p in plan if isinstance(p, SegmentPartition))
        got = served.run(served.client.claim("w", max_jobs=100, wait_s=30.0))
        while len(got) < 100:  # the claims load the first segment back, and drop it
            got += served.run(served.client.claim("w", max_jobs=100 - len(got), wait_s=30.0))
        served.run(served.broker.segments.settled())
        assert served.broker.document.segments.find(first.ref.key) is None
        rows = [row for batch in reader.read(first) for row in batch.to_pylist()]
        expected = sorted(
            (j.id, j.status)
            for j in served.jobs()
            if first.ref.next_seq <= j.seq <= first.ref.last_seq
        )
        assert sorted((r["id"], r["status"]) for r in rows) == expected
        assert {r["status"] for r in rows} == {"claimed"}


def test_a_segment_task_refuses_an_object_that_fails_its_check(file_queue: str) -> None:
    with served_broker(file_queue, **DEEP) as served:
        for i in range(120):
            served.run(served.client.push(b"p%d" % i))
        served.run(served.broker.segments.settled())
        reader = JobsReader(ReadOptions.parse({"url": file_queue}))
        first = next(p for p in reader.partitions() if isinstance(p, SegmentPartition))
        path = Path(file_queue.removeprefix("file://")) / first.ref.key
        data = path.read_bytes()
        path.write_bytes(data.replace(b'"payload":"cD', b'"payload":"SE', 1))  # same size
        with pytest.raises(CorruptDocument, match="does not match its reference"):
            list(reader.read(first))


DELAYED = {
    **DEEP,
    "segment_jobs": 10,
    "delay_spill_above_jobs": 5,
    "delay_window_s": 3600.0,
}


def test_a_read_returns_the_delayed_jobs_in_objects_too(file_queue: str) -> None:
    with served_broker(file_queue, **DELAYED) as served:
        ids = [
            served.run(served.client.push(b"p%d" % i, delay_s=86_400.0 + i, id=f"d{i:02d}"))
            for i in range(30)
        ]
        served.run(served.broker.segments.settled())
        assert sum(ref.remaining for ref in served.broker.document.delayed) >= 25
        reader = JobsReader(ReadOptions.parse({"url": file_queue}))
        plan = reader.partitions()
        assert sum(isinstance(p, DelayedPartition) for p in plan) >= 3
        rows = [row for part in plan for batch in reader.read(part) for row in batch.to_pylist()]
        assert sorted(r["id"] for r in rows) == ids
        assert {bytes(r["payload"]) for r in rows} == {b"p%d" % i for i in range(30)}


def test_a_read_returns_dead_jobs_in_dead_segments_and_waiting_children_in_objects(
    file_queue: str,
) -> None:
    with served_broker(file_queue, **{**DEEP, **COLD}) as served:
        dead = served.run(kill(served.broker, 14))
        parent, children = served.run(fan_in(served.broker, 22))
        doc = served.broker.document
        assert doc.dead.count() >= 10
        assert doc.waiting_cold.jobs() >= 17

        def rows(table: str) -> list[dict[str, object]]:
            reader = JobsReader(ReadOptions.parse({"url": file_queue, "table": table}))
            plan = reader.partitions()
            assert sum(isinstance(p, DeadPartition) for p in plan) == len(list(doc.dead))
            waiting = sum(isinstance(p, WaitingPartition) for p in plan)
            assert waiting == (len(doc.waiting_cold) if table == "jobs" else 0)
            return [r for part in plan for batch in reader.read(part) for r in batch.to_pylist()]

        every = {r["id"]: r for r in rows("jobs")}
        assert sorted(every) == sorted([*dead, parent, *children])
        assert {every[i]["status"] for i in dead} == {"dead"}
        assert {every[i]["status"] for i in children} == {"waiting"}
        assert [bytes(every[i]["payload"]) for i in children] == [  # type: ignore[arg-type]
            b"child-%d" % n for n in range(22)
        ]
        assert sorted(r["id"] for r in rows("dead")) == dead
