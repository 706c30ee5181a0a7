"""The indexing job: fold WAL segments into a namespace's Parquet index with Spark.

For a batch of claimed jobs (each names a namespace and a segment):

1. read each namespace's manifest (and its ETag);
2. drop segments the manifest already lists (a re-run after a crash is a no-op);
3. one Spark job reads the current Parquet versions and the new segments, keeps
   the last write per id (:mod:`.lww`), and writes one new version directory
   per namespace under ``index/_versions/<batch>/namespace=<ns>``;
4. publish each namespace by compare-and-set on its manifest; a namespace whose
   manifest changed meanwhile is re-read and merged again on top of the winner.

Nothing is visible until step 4, and step 4 is atomic per namespace, so a crash
anywhere leaves either the old or the new version, never a mix, and two
workers on one namespace never lose each other's segments.
"""

from __future__ import annotations

import logging
import time
import uuid
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from osqueue.api import Job
from osqueue.errors import Conflict, InvalidInput
from osqueue.spark.worker import spark_batch

from .dataroot import DataRoot
from .lww import INDEX_SCHEMA_DDL, ORDER_COLUMNS
from .manifest import VERSIONS_PREFIX, Manifest, load_manifest, publish_manifest
from .task import IndexTask
from .wal import WAL_SCHEMA_DDL, check_namespace, parse_segment_key

if TYPE_CHECKING:
    from pyspark.sql import DataFrame, SparkSession

log = logging.getLogger(__name__)

#: A hook called just before a namespace's manifest is published:
#: ``(namespace, attempt)``.  Tests use it to line racing workers up.
BeforePublish = Callable[[str, int], None]


@dataclass(slots=True)
class IndexResult:
    """What one call did to one namespace."""

    namespace: str
    version: int = 0
    applied: list[str] = field(default_factory=list)
    skipped: list[str] = field(default_factory=list)
    #: Merges attempted (more than one means a manifest race was lost and redone).
    attempts: int = 0


@dataclass(slots=True)
class IndexRun:
    results: dict[str, IndexResult] = field(default_factory=dict)
    spark_s: float = 0.0
    storage_s: float = 0.0
    merges: int = 0


def _merge_frame(
    spark: SparkSession,
    root: DataRoot,
    work: Mapping[str, Sequence[str]],
    current: Mapping[str, str | None],
) -> DataFrame:
    from pyspark.sql import functions as F

    paths = [root.hadoop(seg) for segs in work.values() for seg in segs]
    raw = spark.read.schema(WAL_SCHEMA_DDL).option("mode", "FAILFAST").json(paths)
    valid = (
        F.col("op").isin("upsert", "delete")
        & F.col("id").isNotNull()
        & F.col("ts").isNotNull()
        & ((F.col("op") == "delete") | F.col("fields").isNotNull())
    )
    wal = raw.select(
        F.when(
            valid,
            F.regexp_extract(F.col("_metadata.file_path"), r"/wal/([^/]+)/[^/]+$", 1),
        )
        .otherwise(
            F.raise_error(
                F.concat(
                    F.lit("bad WAL record in "),
                    F.col("_metadata.file_path"),
                    F.lit(": needs op upsert|delete, id, ts, and fields for an upsert"),
                )
            )
        )
        .alias("namespace"),
        "id",
        "ts",
        (F.col("op") == "delete").alias("deleted"),
        F.col("fields.name").alias("name"),
        F.col("fields.score").alias("score"),
        F.col("fields.count").alias("count"),
    )
    frames = [wal]
    for namespace, path in current.items():
        if path is not None:
            frames.append(
                spark.read.schema(INDEX_SCHEMA_DDL)
                .parquet(root.hadoop(path))
                .withColumn("namespace", F.lit(namespace))
            )
    union = frames[0]
    for frame in frames[1:]:
        union = union.unionByName(frame)
    return (
        union.groupBy("namespace", "id")
        .agg(F.max(F.struct(*ORDER_COLUMNS)).alias("w"))
        .select("namespace", "id", *(f"w.{c}" for c in ORDER_COLUMNS))
    )


def merge(
    spark: SparkSession,
    root: DataRoot,
    work: Mapping[str, Sequence[str]],
    current: Mapping[str, str | None],
) -> dict[str, str | None]:
    """Run one Spark job; return each namespace's new version key (None: empty)."""
    out_key = f"{VERSIONS_PREFIX}{uuid.uuid4().hex}"
    frame = _merge_frame(spark, root, work, current)
    frame.write.partitionBy("namespace").mode("errorifexists").parquet(root.hadoop(out_key))
    written = {k.split("/")[3] for k in root.list(out_key + "/") if k.count("/") >= 4}
    versions: dict[str, str | None] = {}
    for namespace in work:
        directory = f"namespace={namespace}"
        versions[namespace] = f"{out_key}/{directory}" if directory in written else None
    return versions


def _group(segments: Iterable[str]) -> dict[str, set[str]]:
    out: dict[str, set[str]] = {}
    for segment in segments:
        namespace, _ = parse_segment_key(segment)
        out.setdefault(namespace, set()).add(segment)
    return out


def index_segments(
    spark: SparkSession,
    root: DataRoot,
    segments: Iterable[str],
    *,
    before_publish: BeforePublish | None = None,
    max_attempts: int = 32,
) -> IndexRun:
    """Fold ``segments`` (keys, any namespaces) into their namespaces' indexes."""
    pending = _group(segments)
    run = IndexRun(results={ns: IndexResult(ns) for ns in pending})
    for attempt in range(1, max_attempts + 1):
        if not pending:
            return run
        started = time.perf_counter()
        manifests = {ns: load_manifest(root, ns) for ns in pending}
        work: dict[str, list[str]] = {}
        for ns, wanted in pending.items():
            done = set(manifests[ns][0].segments)
            run.results[ns].skipped = sorted(set(run.results[ns].skipped) | (wanted & done))
            todo = sorted(wanted - done)
            if todo:
                work[ns] = todo
            else:
                run.results[ns].version = manifests[ns][0].version
        run.storage_s += time.perf_counter() - started
        if not work:
            return run
        started = time.perf_counter()
        versions = merge(spark, root, work, {ns: manifests[ns][0].path for ns in work})
        run.spark_s += time.perf_counter() - started
        run.merges += 1
        started = time.perf_counter()
        pending = {}
        for ns, todo in work.items():
            result = run.results[ns]
            result.attempts += 1
            old, etag = manifests[ns]
            new = old.with_version(versions[ns], set(old.segments) | set(todo))
            if before_publish is not None:
                before_publish(ns, attempt)
            if _publish(root, new, etag, versions[ns]):
                result.version = new.version
                result.applied = todo
                log.info(
                    "published index version",
                    extra={"action": "publish", "namespace": ns, "version": new.version},
                )
            else:
                pending[ns] = set(todo)
        run.storage_s += time.perf_counter() - started
    raise Conflict(f"gave up after {max_attempts} manifest races on {sorted(pending)}")


def _publish(root: DataRoot, new: Manifest, etag: str | None, version: str | None) -> bool:
    try:
        publish_manifest(root, new, if_match=etag)
    except Conflict:
        log.info(
            "manifest changed under us; merging again",
            extra={"action": "publish_conflict", "namespace": new.namespace},
        )
        if version is not None:
            root.delete_prefix(version + "/")
        return False
    return True


def tasks_of(jobs: Iterable[Job]) -> dict[str, list[IndexTask]]:
    """Decode job payloads and group them by data root."""
    by_root: dict[str, list[IndexTask]] = {}
    for job in jobs:
        task = IndexTask.decode(job.payload)
        check_namespace(task.namespace)
        by_root.setdefault(task.root, []).append(task)
    return by_root


def index_jobs(jobs: Sequence[Job], spark: SparkSession) -> list[IndexRun]:
    """Index every job's segment, in one Spark job per data root."""
    if not jobs:
        raise InvalidInput("no jobs", field="jobs")
    return [
        index_segments(spark, DataRoot(root_uri), [t.segment for t in tasks])
        for root_uri, tasks in tasks_of(jobs).items()
    ]


#: The worker handler: ``osqueue work URL --spark --handler osqueue.pipeline.index:handler``.
handler = spark_batch(index_jobs)
