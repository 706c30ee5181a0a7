"""Last-write-wins: the one merge rule, shared by the Spark job and the reference.

For each id the index keeps the record that is greatest by
``(ts, deleted, name, score, count)``: the latest timestamp wins; on a tie a
delete beats an upsert, and two upserts with the same timestamp are ordered by
their values, so the winner never depends on the order segments are applied.
Deletes are kept as tombstones (``deleted = true``): a late upsert older than a
delete must not bring the row back.

Because the rule is a maximum, merging is associative, commutative and
idempotent, so folding segments one by one, in any order, in any batches, or
twice, gives the same index: that is what keeps the pipeline exact under retries.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass

from .wal import WalRecord

#: The Parquet index schema (DDL), in the order of the merge key.
INDEX_SCHEMA_DDL = "id STRING, ts BIGINT, deleted BOOLEAN, name STRING, score DOUBLE, count BIGINT"

#: The columns compared, in order, to pick the winner among an id's records.
ORDER_COLUMNS = ("ts", "deleted", "name", "score", "count")


@dataclass(frozen=True, slots=True)
class IndexRow:
    id: str
    ts: int
    deleted: bool
    name: str | None
    score: float | None
    count: int | None

    def order_key(self) -> tuple[object, ...]:
        """The comparison Spark makes on the struct of ``ORDER_COLUMNS`` (nulls first)."""
        return (
            self.ts,
            self.deleted,
            self.name is not None,
            self.name or "",
            self.score is not None,
            self.score or 0.0,
            self.count is not None,
            self.count or 0,
        )


def to_row(record: WalRecord) -> IndexRow:
    if record.op == "delete" or record.fields is None:
        return IndexRow(record.id, record.ts, True, None, None, None)
    f = record.fields
    return IndexRow(record.id, record.ts, False, f.name, f.score, f.count)


def fold(state: dict[str, IndexRow], records: Iterable[WalRecord]) -> dict[str, IndexRow]:
    """Apply ``records`` to ``state`` in place by last-write-wins and return it."""
    for record in records:
        row = to_row(record)
        current = state.get(row.id)
        if current is None or row.order_key() > current.order_key():
            state[row.id] = row
    return state
