"""The ``osqueue`` data source: write jobs from DataFrames, read jobs, dead letters and
the archive back, stream the archive; on file:// and memory:// queues."""

from __future__ import annotations

import json
import os
from pathlib import Path
from urllib.parse import urlparse

import pytest
from corrupt_archive import write_corrupt_archive
from pyspark.sql import SparkSession
from spark_helpers import ServedBroker, served_broker, wait_archived

from osqueue.api import Job, NewJob
from osqueue.errors import BrokerUnavailable, CorruptDocument, InvalidInput, OsqueueError
from osqueue.spark import blocking
from osqueue.spark.errors import osqueue_error
from osqueue.state import DOCUMENT_KEY, decode

pytestmark = pytest.mark.spark


def pushed_count(url: str) -> int:
    blob = blocking.with_storage(url, lambda s: s.read(DOCUMENT_KEY))
    return decode(blob.data).stats.pushed


def claim_all(served: ServedBroker, queue: str, n: int) -> list[Job]:
    return served.run(served.client.claim("tester", [queue], max_jobs=n))


def expect_error(exc: pytest.ExceptionInfo[BaseException]) -> OsqueueError:
    found = osqueue_error(exc.value)
    assert found is not None, f"no osqueue error in: {exc.value}"
    return found


def test_write_then_read_jobs_dead_and_archive_on_a_file_queue(
    spark: SparkSession, file_queue: str
) -> None:
    rows = [(f"payload-{i}", i % 3, f"key-{i}", 1 if i >= 45 else 5) for i in range(50)]
    frame = spark.createDataFrame(
        rows, "payload STRING, priority INT, key STRING, max_attempts INT"
    ).repartition(3)
    with served_broker(file_queue) as served:
        (
            frame.write.format("osqueue")
            .option("url", file_queue)
            .option("queue", "work")
            .option("batch_size", "7")
            .mode("append")
            .save()
        )
        jobs = spark.read.format("osqueue").option("url", file_queue).load().collect()
        assert sorted((r.payload.decode(), r.priority, r.queue, r.status) for r in jobs) == sorted(
            (p, prio, "work", "queued") for p, prio, _, _ in rows
        )

        claimed = claim_all(served, "work", 100)
        assert sorted((j.payload.decode(), j.key, j.max_attempts) for j in claimed) == sorted(
            (p, k, m) for p, _, k, m in rows
        )
        done = [j for j in claimed if j.max_attempts == 5][:20]
        doomed = [j for j in claimed if j.max_attempts == 1]
        for job in done:
            served.run(served.client.complete(job))
        for job in doomed:
            served.run(served.client.fail(job, error="boom: bad input"))
        wait_archived(served, len(done))

        dead = spark.read.format("osqueue").option("url", file_queue).option("table", "dead")
        dead_rows = dead.load().collect()
        assert sorted(r.id for r in dead_rows) == sorted(j.id for j in doomed)
        assert {(r.status, r.last_error) for r in dead_rows} == {("dead", "boom: bad input")}

        archive = (
            spark.read.format("osqueue").option("url", file_queue).option("table", "archive").load()
        )
        assert archive.rdd.getNumPartitions() >= 1
        got = archive.collect()
        assert sorted(r.id for r in got) == sorted(j.id for j in done)
        for row in got:
            assert (row.status, row.attempts, row.worker, row.queue) == (
                "done",
                1,
                "tester",
                "work",
            )
            assert row.wait_ms >= 0
            assert row.run_ms >= 0
            assert row.created_at <= row.claimed_at <= row.completed_at
            assert row.payload is None


def test_archive_objects_are_read_in_parallel_partitions(
    spark: SparkSession, file_queue: str
) -> None:
    with served_broker(file_queue) as served:
        served.run(served.client.push_many([NewJob(f"{i}".encode()) for i in range(12)]))
        for job in claim_all(served, "default", 12):
            served.run(served.client.complete(job))  # one commit, one archive object each
        wait_archived(served, 12)
    archive = (
        spark.read.format("osqueue")
        .option("url", file_queue)
        .option("table", "archive")
        .option("objects_per_partition", "3")
        .load()
    )
    assert archive.rdd.getNumPartitions() == 4
    assert archive.count() == 12


def test_embedded_write_needs_no_running_broker(spark: SparkSession, file_queue: str) -> None:
    payloads = [os.urandom(16) for _ in range(30)]
    frame = spark.createDataFrame([(p,) for p in payloads], "payload BINARY").repartition(2)
    (
        frame.write.format("osqueue")
        .option("url", file_queue)
        .option("embedded", "true")
        .mode("append")
        .save()
    )
    jobs = spark.read.format("osqueue").option("url", file_queue).load().collect()
    assert sorted(bytes(r.payload) for r in jobs) == sorted(payloads)
    doc = decode(blocking.with_storage(file_queue, lambda s: s.read(DOCUMENT_KEY)).data)
    assert doc.broker is not None
    assert doc.broker.address is None


def test_rows_without_a_payload_column_become_json(spark: SparkSession, file_queue: str) -> None:
    rows = [(i, f"name-{i}", i / 4, -i) for i in range(5)]
    frame = spark.createDataFrame(rows, "n INT, name STRING, score DOUBLE, priority INT")
    frame.write.format("osqueue").option("url", file_queue).option("embedded", "true").mode(
        "append"
    ).save()
    jobs = spark.read.format("osqueue").option("url", file_queue).load().collect()
    got = sorted(((json.loads(r.payload), r.priority) for r in jobs), key=lambda g: g[1])
    want = sorted(
        (
            ({"n": n, "name": name, "score": score, "priority": prio}, prio)
            for n, name, score, prio in rows
        ),
        key=lambda w: w[1],
    )
    assert got == want


def test_write_to_a_memory_queue_through_its_served_broker(
    spark: SparkSession, memory_queue: str
) -> None:
    with served_broker(memory_queue) as served:
        frame = spark.createDataFrame(
            [(f"m{i}", f"k{i}") for i in range(40)], "payload STRING, key STRING"
        )
        (
            frame.repartition(2)
            .write.format("osqueue")
            .option("url", memory_queue)
            .option("address", served.address)
            .mode("append")
            .save()
        )
        claimed = claim_all(served, "default", 100)
        assert sorted((j.payload.decode(), j.key) for j in claimed) == sorted(
            (f"m{i}", f"k{i}") for i in range(40)
        )
        # Writing the same keys again while those jobs are live skips them.
        frame.write.format("osqueue").option("url", memory_queue).option(
            "address", served.address
        ).mode("append").save()
        assert served.broker.document.stats.pushed == 40


def test_reading_a_memory_queue_explains_why_it_cannot(
    spark: SparkSession, memory_queue: str
) -> None:
    with pytest.raises(Exception) as caught:
        spark.read.format("osqueue").option("url", memory_queue).load().collect()
    error = expect_error(caught)
    assert isinstance(error, InvalidInput)
    assert error.field == "url"
    assert "memory://" in str(error)


def test_large_payloads_stored_outside_the_document_are_read_back(
    spark: SparkSession, file_queue: str
) -> None:
    big = os.urandom(200 * 1024)
    with served_broker(file_queue) as served:
        served.run(served.client.push(big, queue="big"))
    rows = spark.read.format("osqueue").option("url", file_queue).option("queue", "big").load()
    assert [bytes(r.payload) for r in rows.collect()] == [big]


@pytest.mark.parametrize("tamper", ["rewritten with the same size", "a link out of the store"])
def test_a_payload_object_that_fails_its_check_fails_the_read(
    spark: SparkSession, file_queue: str, tmp_path: Path, tamper: str
) -> None:
    """Never a row with bytes other than the ones pushed: the read fails, naming the
    job and its object."""
    big = os.urandom(200 * 1024)
    with served_broker(file_queue) as served:
        job_id = served.run(served.client.push(big, queue="big"))
    directory = Path(urlparse(file_queue).path)
    ref = decode((directory / DOCUMENT_KEY).read_bytes()).jobs[job_id].payload_ref
    assert ref is not None
    other = os.urandom(len(big))
    if tamper == "a link out of the store":
        (tmp_path / "outside").write_bytes(other)
        (directory / ref).unlink()
        (directory / ref).symlink_to(tmp_path / "outside")
    else:
        (directory / ref).write_bytes(other)
    rows = spark.read.format("osqueue").option("url", file_queue).option("queue", "big").load()
    with pytest.raises(Exception, match="BadPayload") as caught:
        rows.collect()
    message = str(caught.value)
    assert f"payload object {ref} of job {job_id} failed its check" in message


@pytest.mark.parametrize(
    ("schema", "rows", "field"),
    [
        ("payload INT", [(1,)], "payload"),
        ("payload STRING, priority STRING", [("x", "high")], "priority"),
        ("payload STRING, delay_s STRING", [("x", "soon")], "delay_s"),
        ("payload STRING, key INT", [("x", 3)], "key"),
    ],
)
def test_a_bad_column_fails_before_anything_is_pushed(
    spark: SparkSession, file_queue: str, schema: str, rows: list[tuple[object, ...]], field: str
) -> None:
    frame = spark.createDataFrame(rows, schema)
    with served_broker(file_queue), pytest.raises(Exception) as caught:
        frame.write.format("osqueue").option("url", file_queue).mode("append").save()
    error = expect_error(caught)
    assert isinstance(error, InvalidInput)
    assert error.field == field
    assert pushed_count(file_queue) == 0


def test_a_null_payload_names_the_column_and_the_row(spark: SparkSession, file_queue: str) -> None:
    frame = spark.createDataFrame([("a",), (None,)], "payload STRING").coalesce(1)
    with pytest.raises(Exception) as caught:
        frame.write.format("osqueue").option("url", file_queue).option("embedded", "true").mode(
            "append"
        ).save()
    error = expect_error(caught)
    assert isinstance(error, InvalidInput)
    assert error.field == "payload"
    assert "row 1" in str(error)


@pytest.mark.parametrize(
    ("options", "field"),
    [
        ({"table": "nope"}, "table"),
        ({"objects_per_partition": "0"}, "objects_per_partition"),
        ({"colour": "blue"}, "colour"),
    ],
)
def test_bad_read_options_name_the_option(
    spark: SparkSession, file_queue: str, options: dict[str, str], field: str
) -> None:
    reader = spark.read.format("osqueue").option("url", file_queue)
    for name, value in options.items():
        reader = reader.option(name, value)
    with pytest.raises(Exception) as caught:
        reader.load().collect()
    error = expect_error(caught)
    assert isinstance(error, InvalidInput)
    assert error.field == field


def test_overwrite_is_refused(spark: SparkSession, file_queue: str) -> None:
    frame = spark.createDataFrame([("a",)], "payload STRING")
    with pytest.raises(Exception) as caught:
        frame.write.format("osqueue").option("url", file_queue).mode("overwrite").save()
    error = expect_error(caught)
    assert isinstance(error, InvalidInput)
    assert error.field == "mode"


def test_a_missing_broker_is_a_clear_error(spark: SparkSession, file_queue: str) -> None:
    frame = spark.createDataFrame([("a",)], "payload STRING").coalesce(1)
    with pytest.raises(Exception) as caught:
        frame.write.format("osqueue").option("url", file_queue).option("broker_wait_s", "1").mode(
            "append"
        ).save()
    error = expect_error(caught)
    assert isinstance(error, BrokerUnavailable)
    assert "no broker serves" in str(error)
    assert "embedded=true" in str(error)


def test_a_streaming_query_sees_completed_jobs_as_they_land(
    spark: SparkSession, file_queue: str
) -> None:
    with served_broker(file_queue) as served:
        served.run(served.client.push_many([NewJob(f"{i}".encode()) for i in range(30)]))
        stream = (
            spark.readStream.format("osqueue")
            .option("url", file_queue)
            .option("table", "archive")
            .load()
        )
        query = stream.writeStream.format("memory").queryName("osqueue_archive_stream").start()
        completed: list[Job] = []
        try:
            for size in (10, 15, 5):
                # Claimed just before it completes: a claim held across the Spark
                # work of the rounds before would outlive heartbeat_timeout_s on a
                # slow machine, and its completion would be refused (LeaseLost).
                chunk = claim_all(served, "default", size)
                assert len(chunk) == size
                assert served.run(served.client.complete_many(chunk)) == [None] * size
                completed.extend(chunk)
                wait_archived(served, len(completed))
                query.processAllAvailable()
                seen = [r.id for r in spark.table("osqueue_archive_stream").collect()]
                assert sorted(seen) == sorted(j.id for j in completed)  # no repeats
        finally:
            query.stop()


def test_a_corrupt_archive_line_fails_the_read_naming_its_key_and_line(
    spark: SparkSession, file_queue: str
) -> None:
    _, bad = write_corrupt_archive(Path(urlparse(file_queue).path))
    archive = spark.read.format("osqueue").option("url", file_queue).option("table", "archive")
    with pytest.raises(Exception) as info:
        archive.load().collect()
    error = expect_error(info)
    assert isinstance(error, CorruptDocument)
    assert str(error).startswith("4 corrupt archive lines in 2 objects: ")
    for key, line in bad[:3]:  # the first five are named; the fourth is in the other object
        assert f"{key} line {line} (byte " in str(error)
    assert f"{bad[3][0]} line 2 (byte " in str(error)
