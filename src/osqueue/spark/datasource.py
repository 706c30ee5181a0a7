"""The ``osqueue`` PySpark data source (Python Data Source API, Spark 4).

Read (``spark.read.format("osqueue").option("url", URL).option("table", T).load()``):

* ``table=jobs``: every job in the queue document, as of one version, and the
  jobs that sit in objects: a deep backlog's segments, delayed jobs, dead
  segments, waiting children (one Spark task per object reads it);
* ``table=dead``: the dead letters, those in dead segments too;

  a payload stored as an object is read through the broker's checked read
  (:func:`~osqueue.broker.objects.payloads.read_payload`): one that fails its size or
  SHA-256 check (or that the store refuses) fails the read with ``BadPayload``
  naming the job and the object, never a row with other bytes; one gone since
  the snapshot (its job finished meanwhile) is a null payload;
* ``table=archive``: every completed job, read from the archive objects in
  parallel (one Spark task per ``objects_per_partition`` objects of one hour).
  A corrupt line fails the read with ``CorruptDocument`` naming each bad line's
  object key and line number (every object of the task is read first), never a
  silently shorter table.

Stream (``spark.readStream.format("osqueue")``, archive only): each micro-batch
holds the archive objects that appeared since the last one, exactly once.

Write (``df.write.format("osqueue").option("url", URL).mode("append").save()``):
one job per row (see :mod:`.columns`), each Spark partition pushing in batches
through the queue's broker, found in the queue document (or at ``address``).
With ``embedded=true`` the rows are pushed once, when the write commits, through
an in-process broker started if no live broker holds the queue.

Spark runs all of this in its own Python worker processes: options are parsed
(and rejected) when the query is planned; heavy imports happen in ``read()``.
"""

from __future__ import annotations

import logging
import uuid
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from pyspark.sql.datasource import (
    DataSource,
    DataSourceReader,
    DataSourceStreamReader,
    DataSourceWriter,
    InputPartition,
    WriterCommitMessage,
)

from osqueue.api import NewJob
from osqueue.broker.archive.objects import BadLine, corrupt_lines
from osqueue.broker.objects.payloads import BadPayload, read_payload
from osqueue.errors import InvalidInput, NotFound
from osqueue.state.dead_letters import DeadRef
from osqueue.state.model import DelayedRef, SegmentRef, StoredJob
from osqueue.state.waiting_refs import WaitingRef

from . import blocking
from .archive import ArchiveOffset, archive_keys, latest_offset, plan_archive
from .columns import WritePlan, plan_write, to_new_job
from .options import ReadOptions, WriteOptions
from .push import PushCounts, push_embedded, push_remote
from .rows import SCHEMA_DDL, Row, archive_rows, job_row, spark_schema, to_arrow

if TYPE_CHECKING:
    from pyspark.sql.types import StructType

log = logging.getLogger(__name__)

#: Rows of the jobs table shipped in one Spark partition.
JOB_ROWS_PER_PARTITION = 50_000


class OsqueueDataSource(DataSource):
    """``format("osqueue")``; register with :func:`osqueue.spark.register`."""

    @classmethod
    def name(cls) -> str:
        return "osqueue"

    def schema(self) -> StructType:
        schema: StructType = spark_schema()
        return schema

    def reader(self, schema: StructType) -> DataSourceReader:
        _check_schema(schema)
        options = ReadOptions.parse(self.options)
        if options.table == "archive":
            return ArchiveReader(options)
        return JobsReader(options)

    def streamReader(self, schema: StructType) -> DataSourceStreamReader:
        _check_schema(schema)
        options = ReadOptions.parse(self.options)
        if options.table != "archive":
            raise InvalidInput(
                f"streaming reads the archive only, not {options.table!r}", field="table"
            )
        return ArchiveStreamReader(options)

    def writer(self, schema: StructType, overwrite: bool) -> DataSourceWriter:
        if overwrite:
            raise InvalidInput("a queue can only be appended to: use .mode('append')", field="mode")
        options = WriteOptions.parse(self.options)
        return JobsWriter(options, plan_write(schema, options), uuid.uuid4().hex[:12])


def _check_schema(schema: StructType) -> None:
    if schema != spark_schema():
        raise InvalidInput(
            f"the osqueue source has a fixed schema ({SCHEMA_DDL}); do not pass .schema()",
            field="schema",
        )


# --------------------------------------------------------------------------- jobs / dead


@dataclass
class JobsPartition(InputPartition):
    rows: list[Row]
    #: Row position -> its job, for payloads stored outside the document (the job
    #: records what the object must hold).
    objects: dict[int, StoredJob] = field(default_factory=dict)


@dataclass
class SegmentPartition(InputPartition):
    """The live jobs of one segment object, read by the task."""

    ref: SegmentRef


@dataclass
class DelayedPartition(InputPartition):
    """The live jobs of one object of delayed jobs (``delayed/``), read by the task."""

    ref: DelayedRef


@dataclass
class DeadPartition(InputPartition):
    """The jobs of one dead segment (``dead/``), read by the task."""

    ref: DeadRef


@dataclass
class WaitingPartition(InputPartition):
    """The waiting children in one object (``waiting/``), read by the task."""

    ref: WaitingRef


class JobsReader(DataSourceReader):
    """One snapshot: the document is read once, when the query is planned; each
    segment it references is read by a task of its own.  A segment whose jobs
    were all loaded back and deleted before its task ran is no longer there:
    the task reads the document again and returns those jobs as they are
    then (the ones still in the document).  A dead segment or an object of
    waiting children gone since the plan returns no rows: its jobs were
    retried, purged or loaded since, and the document cannot tell which of
    its jobs they are without the object."""

    def __init__(self, options: ReadOptions) -> None:
        self.options = options

    def partitions(self) -> Sequence[InputPartition]:
        from osqueue.state import DOCUMENT_KEY, decode

        try:
            blob = blocking.with_storage(self.options.url, lambda s: s.read(DOCUMENT_KEY))
        except NotFound:
            raise InvalidInput(
                f"no queue at {self.options.url!r} (it has no {DOCUMENT_KEY})", field="url"
            ) from None
        doc = decode(blob.data)
        wanted = [
            job
            for job in doc.jobs.values()
            if (self.options.table == "jobs" or job.status == "dead")
            and (self.options.queue is None or job.queue == self.options.queue)
        ]
        parts: list[InputPartition] = []
        for start in range(0, len(wanted), JOB_ROWS_PER_PARTITION):
            chunk = wanted[start : start + JOB_ROWS_PER_PARTITION]
            objects = {i: j for i, j in enumerate(chunk) if j.payload_ref is not None}
            parts.append(JobsPartition([job_row(j) for j in chunk], objects))
        if self.options.table == "jobs":
            parts.extend(
                SegmentPartition(ref)
                for ref in doc.segments
                if ref.remaining > 0
                and (self.options.queue is None or ref.queue == self.options.queue)
            )
            parts.extend(
                DelayedPartition(d)
                for d in doc.delayed
                if d.remaining > 0 and (self.options.queue is None or d.queue == self.options.queue)
            )
            parts.extend(
                WaitingPartition(w)
                for w in doc.waiting_cold
                if w.live > 0 and (self.options.queue is None or w.queue == self.options.queue)
            )
        parts.extend(
            DeadPartition(r)
            for r in doc.dead
            if self.options.queue is None or r.queue == self.options.queue
        )
        return parts or [JobsPartition([])]

    def read(self, partition: InputPartition) -> Iterator[Any]:
        if isinstance(
            partition, SegmentPartition | DelayedPartition | DeadPartition | WaitingPartition
        ):
            yield from self._read_segment(partition.ref)
            return
        assert isinstance(partition, JobsPartition)
        rows = partition.rows
        if partition.objects:
            objects = sorted(partition.objects.items())

            async def fetch(store: Any) -> list[bytes | None]:
                return [await _payload(store, job) for _, job in objects]

            payloads = blocking.with_storage(self.options.url, fetch)
            rows = list(rows)
            for (i, _), payload in zip(objects, payloads, strict=True):
                rows[i] = (*rows[i][:-1], payload)
        if rows:
            yield to_arrow(rows)

    def _read_segment(self, ref: SegmentRef | DelayedRef | DeadRef | WaitingRef) -> Iterator[Any]:
        async def fetch(store: Any) -> list[tuple[StoredJob, bytes | None]]:
            from osqueue.broker.cold.read import (
                SnapshotMoved,
                read_dead_segment,
                read_delayed,
                read_spilled,
                read_waiting,
            )

            try:
                if isinstance(ref, DelayedRef):
                    jobs = await read_delayed(store, ref)
                elif isinstance(ref, DeadRef):
                    jobs = await read_dead_segment(store, ref)
                elif isinstance(ref, WaitingRef):
                    jobs = await read_waiting(store, ref)
                else:
                    jobs = await read_spilled(store, ref)
            except SnapshotMoved:
                if isinstance(ref, DeadRef | WaitingRef):
                    return []
                jobs = await _moved_on(store, ref)
            return [(job, await _payload(store, job)) for job in jobs]

        found = blocking.with_storage(self.options.url, fetch)
        if found:
            yield to_arrow((*job_row(job)[:-1], payload) for job, payload in found)


async def _moved_on(store: Any, ref: SegmentRef | DelayedRef) -> list[StoredJob]:
    """The jobs of ``ref``'s range as the document holds them now (its object is
    gone: they were loaded back since the query was planned)."""
    from osqueue.state import DOCUMENT_KEY, decode

    doc = decode((await store.read(DOCUMENT_KEY)).data)
    if isinstance(ref, DelayedRef):  # its queue's jobs within its seq and id bounds
        return sorted(
            (
                job
                for job in doc.jobs.values()
                if job.queue == ref.queue
                and ref.min_seq <= job.seq <= ref.max_seq
                and ref.min_id <= job.id <= ref.max_id
            ),
            key=lambda job: job.seq,
        )
    return sorted(
        (
            job
            for job in doc.jobs.values()
            if (job.queue, job.priority) == ref.stream and ref.next_seq <= job.seq <= ref.last_seq
        ),
        key=lambda job: job.seq,
    )


async def _payload(store: Any, job: StoredJob) -> bytes | None:
    """``job``'s payload, checked; None if its object is gone (the job left since the
    snapshot).  An object that fails its check raises :class:`BadPayload`."""
    if job.payload_ref is None:
        return job.payload
    try:
        return await read_payload(store, job)
    except BadPayload as exc:
        if exc.missing:
            return None
        raise


# --------------------------------------------------------------------------- archive


@dataclass
class ArchivePartition(InputPartition):
    keys: list[str]


def _read_archive(url: str, keys: list[str], queue: str | None) -> Iterator[Any]:
    async def fetch(store: Any) -> list[bytes]:
        return [await store.get(key) for key in keys]

    rows: list[Row] = []
    bad: list[BadLine] = []
    for key, data in zip(keys, blocking.with_storage(url, fetch), strict=True):
        got, corrupt = archive_rows(data, key=key)
        rows.extend(r for r in got if queue is None or r[1] == queue)
        bad.extend(corrupt)
    if bad:  # fails the query: a report over the archive must not undercount silently
        raise corrupt_lines(bad)
    if rows:
        yield to_arrow(rows)


class ArchiveReader(DataSourceReader):
    def __init__(self, options: ReadOptions) -> None:
        self.options = options

    def partitions(self) -> Sequence[InputPartition]:
        keys = archive_keys(self.options.url)
        groups = plan_archive(keys, self.options.objects_per_partition)
        return [ArchivePartition(g) for g in groups] or [ArchivePartition([])]

    def read(self, partition: InputPartition) -> Iterator[Any]:
        assert isinstance(partition, ArchivePartition)
        return _read_archive(self.options.url, partition.keys, self.options.queue)


class ArchiveStreamReader(DataSourceStreamReader):
    """Offsets name the archive versions already delivered (see :class:`ArchiveOffset`)."""

    def __init__(self, options: ReadOptions) -> None:
        self.options = options

    def initialOffset(self) -> dict[str, Any]:
        return ArchiveOffset().to_dict()

    def latestOffset(
        self, start: dict[str, Any] | None = None, limit: Any = None
    ) -> dict[str, Any]:
        base = ArchiveOffset.from_dict(start) if start else ArchiveOffset()
        return latest_offset(self.options.url, base).to_dict()

    def partitions(self, start: dict[str, Any], end: dict[str, Any]) -> Sequence[InputPartition]:
        first, last = ArchiveOffset.from_dict(start), ArchiveOffset.from_dict(end)
        keys = [k for k in archive_keys(self.options.url) if last.covers(k) and not first.covers(k)]
        return [ArchivePartition(g) for g in plan_archive(keys, self.options.objects_per_partition)]

    def read(self, partition: InputPartition) -> Iterator[Any]:
        assert isinstance(partition, ArchivePartition)
        return _read_archive(self.options.url, partition.keys, self.options.queue)

    def commit(self, end: dict[str, Any]) -> None:
        return None


# --------------------------------------------------------------------------- write


@dataclass
class PushMessage(WriterCommitMessage):
    counts: PushCounts
    #: Embedded mode: the jobs, pushed once every task has succeeded.
    jobs: list[NewJob] = field(default_factory=list)


class JobsWriter(DataSourceWriter):
    def __init__(self, options: WriteOptions, plan: WritePlan, write_id: str) -> None:
        self.options = options
        self.plan = plan
        self.write_id = write_id

    def write(self, iterator: Iterator[Any]) -> PushMessage:
        from pyspark import TaskContext

        context = TaskContext.get()
        partition = context.partitionId() if context is not None else 0
        # Ids are a function of (write, partition, row): a retried task re-sends the
        # same ids and the broker applies each push once.
        prefix = f"w{self.write_id}-{partition:05d}-"
        jobs = (
            to_new_job(self.plan, row, default_id=f"{prefix}{n:09d}", row_number=n)
            for n, row in enumerate(iterator)
        )
        if self.options.embedded:
            batch = list(jobs)
            return PushMessage(PushCounts(rows=len(batch)), batch)
        return PushMessage(blocking.run(lambda: push_remote(self.options, jobs)))

    def commit(self, messages: list[WriterCommitMessage | None]) -> None:
        counts = PushCounts()
        jobs: list[NewJob] = []
        for message in messages:
            if isinstance(message, PushMessage):
                counts = counts + message.counts
                jobs.extend(message.jobs)
        if self.options.embedded:
            counts = blocking.run(lambda: push_embedded(self.options, jobs))
        log.info(
            "osqueue write committed",
            extra={
                "action": "write",
                "url": self.options.url,
                "pushed": counts.pushed,
                "duplicates": counts.duplicates,
            },
        )

    def abort(self, messages: list[WriterCommitMessage | None]) -> None:
        pushed = sum(m.counts.pushed for m in messages if isinstance(m, PushMessage))
        if pushed:
            log.warning(
                "osqueue write aborted; jobs pushed by finished tasks stay queued",
                extra={"action": "write_abort", "url": self.options.url, "pushed": pushed},
            )
