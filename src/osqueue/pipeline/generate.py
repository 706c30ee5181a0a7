"""``pipeline generate``: write WAL segments, then enqueue one indexing job per segment.

The jobs are pushed through the ``osqueue`` data source writer (a DataFrame
with ``payload``, ``key`` and ``group`` columns), so enqueueing is itself a
Spark write.  Each job's idempotency key is ``<namespace>/<segment file>``:
running ``generate`` twice does not queue a segment twice while its job is
live.  Each job's group is its namespace, and :func:`limit_index_queue` sets
the index queue's ``max_claimed_per_group`` to one: two workers never index
one namespace at once, so they never race its manifest.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING

from osqueue.api import Scheduling

from .dataroot import DataRoot
from .task import INDEX_PER_NAMESPACE, INDEX_QUEUE, task_for
from .wal import GenerateConfig, parse_segment_key, write_wal

if TYPE_CHECKING:
    from pyspark.sql import SparkSession


@dataclass(frozen=True, slots=True)
class Generated:
    segments: list[str]
    rows: int


def job_order(segments: Sequence[str]) -> list[str]:
    """Segment 1 of every namespace, then segment 2, ...: a batch of claimed jobs
    spans namespaces, so workers rarely race on one namespace (they may, safely)."""
    return sorted(segments, key=lambda key: parse_segment_key(key)[::-1])


def enqueue(
    spark: SparkSession,
    queue_url: str,
    root: DataRoot,
    segments: Sequence[str],
    *,
    queue: str = INDEX_QUEUE,
    options: Mapping[str, str] | None = None,
) -> int:
    """Push one indexing job per segment through the data source; return how many rows."""
    from pyspark.sql.types import StringType, StructField, StructType

    from osqueue.spark import register

    register(spark)
    tasks = [task_for(root.uri, key) for key in job_order(segments)]
    rows = [(task.encode().decode(), task.key, task.group) for task in tasks]
    schema = StructType(
        [StructField(name, StringType(), nullable=False) for name in ("payload", "key", "group")]
    )
    frame = spark.createDataFrame(rows, schema)
    writer = frame.coalesce(1).write.format("osqueue").option("url", queue_url)
    writer = writer.option("queue", queue)
    for name, value in (options or {}).items():
        writer = writer.option(name, value)
    writer.mode("append").save()
    return len(rows)


async def limit_index_queue(client: Scheduling, queue: str = INDEX_QUEUE) -> None:
    """At most one indexing job per namespace claimed at once (the queue's setting,
    held in the document; setting it again changes nothing)."""
    await client.set_queue(queue, max_claimed_per_group=INDEX_PER_NAMESPACE)


def generate(
    spark: SparkSession,
    queue_url: str,
    root: DataRoot,
    config: GenerateConfig,
    *,
    queue: str = INDEX_QUEUE,
    options: Mapping[str, str] | None = None,
) -> Generated:
    segments = write_wal(root, config)
    enqueue(spark, queue_url, root, segments, queue=queue, options=options)
    return Generated(segments=segments, rows=config.total_rows)
