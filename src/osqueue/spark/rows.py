"""The data source's row shape, and how jobs and archive lines become rows.

One declared schema serves the three tables:

* ``jobs``: every job in the queue document (any status);
* ``dead``: the dead letters only;
* ``archive``: every completed job, from the archive objects.

``wait_ms`` is the time from creation to the first claim (queue wait, delays
included); ``run_ms`` the time from the last claim to completion.  Times are
UTC; ``payload`` is null in the archive (it keeps timings, not payloads).
"""

from __future__ import annotations

from collections.abc import Iterable
from datetime import datetime
from typing import TYPE_CHECKING, Any

import msgspec

from osqueue.broker.archive.objects import BadLine, read_lines

if TYPE_CHECKING:
    from osqueue.state.model import StoredJob

SCHEMA_DDL = (
    "id STRING, queue STRING, priority INT, status STRING, attempts INT, "
    "created_at TIMESTAMP, claimed_at TIMESTAMP, completed_at TIMESTAMP, "
    "wait_ms DOUBLE, run_ms DOUBLE, worker STRING, last_error STRING, payload BINARY"
)
COLUMNS = (
    "id",
    "queue",
    "priority",
    "status",
    "attempts",
    "created_at",
    "claimed_at",
    "completed_at",
    "wait_ms",
    "run_ms",
    "worker",
    "last_error",
    "payload",
)
TABLES = ("jobs", "dead", "archive")

#: A row as a tuple in ``COLUMNS`` order.
Row = tuple[Any, ...]


def _ms(start: datetime | None, end: datetime | None) -> float | None:
    if start is None or end is None:
        return None
    return (end - start).total_seconds() * 1000.0


class ArchiveRecord(msgspec.Struct, frozen=True):
    """One line of an archive object (see DESIGN.md, Archive)."""

    id: str
    queue: str
    created_at: datetime
    completed_at: datetime
    priority: int = 0
    key: str | None = None
    attempts: int = 0
    max_attempts: int = 0
    first_claimed_at: datetime | None = None
    claimed_at: datetime | None = None
    worker: str | None = None
    token: int | None = None
    version: int | None = None
    last_error: str | None = None


_archive_decoder = msgspec.json.Decoder(ArchiveRecord)


def archive_rows(data: bytes, *, key: str) -> tuple[list[Row], list[BadLine]]:
    """Rows of one archive object, and its corrupt lines (key, line number, why)."""
    records, bad = read_lines(data, key, _archive_decoder)
    rows = [
        (
            r.id,
            r.queue,
            r.priority,
            "done",
            r.attempts,
            r.created_at,
            r.claimed_at,
            r.completed_at,
            _ms(r.created_at, r.first_claimed_at),
            _ms(r.claimed_at, r.completed_at),
            r.worker,
            r.last_error,
            None,
        )
        for r in records
    ]
    return rows, bad


def job_row(job: StoredJob) -> Row:
    """A document job as a row; ``payload`` is the inline payload (None for a reference)."""
    claimed_at = job.claim.claimed_at if job.claim is not None else None
    run_start = claimed_at if claimed_at is not None else job.first_claimed_at
    return (
        job.id,
        job.queue,
        job.priority,
        job.status,
        job.attempts,
        job.created_at,
        claimed_at,
        job.done_at,
        _ms(job.created_at, job.first_claimed_at),
        _ms(run_start, job.done_at),
        job.claim.worker if job.claim is not None else None,
        job.last_error,
        job.payload,
    )


def to_arrow(rows: Iterable[Row]) -> Any:
    """Rows as one ``pyarrow.RecordBatch`` in the declared schema (imported lazily)."""
    import pyarrow as pa

    columns: list[list[Any]] = [[] for _ in COLUMNS]
    for row in rows:
        for i, value in enumerate(row):
            columns[i].append(value)
    return pa.RecordBatch.from_arrays(
        [pa.array(col, type=typ) for col, typ in zip(columns, arrow_types(), strict=True)],
        names=list(COLUMNS),
    )


def spark_schema() -> Any:
    """The declared schema as a ``pyspark.sql.types.StructType`` (no JVM needed)."""
    from pyspark.sql import types as T

    ts = T.TimestampType()
    kinds = [
        T.StringType(),
        T.StringType(),
        T.IntegerType(),
        T.StringType(),
        T.IntegerType(),
        ts,
        ts,
        ts,
        T.DoubleType(),
        T.DoubleType(),
        T.StringType(),
        T.StringType(),
        T.BinaryType(),
    ]
    return T.StructType(
        [T.StructField(name, kind, True) for name, kind in zip(COLUMNS, kinds, strict=True)]
    )


def arrow_types() -> list[Any]:
    import pyarrow as pa

    ts = pa.timestamp("us", tz="UTC")
    return [
        pa.string(),
        pa.string(),
        pa.int32(),
        pa.string(),
        pa.int32(),
        ts,
        ts,
        ts,
        pa.float64(),
        pa.float64(),
        pa.string(),
        pa.string(),
        pa.binary(),
    ]
