"""How a DataFrame's columns become jobs (the data source's write side).

* ``payload`` (binary or string) is the job's payload; without it, the whole
  row (every column) is encoded as one JSON object.
* Optional control columns set per row what the options set for all rows:
  ``priority`` (integer), ``key`` (string, idempotency key), ``delay_s``
  (number), ``max_attempts`` (integer), ``queue`` (string), ``id`` (string),
  ``group`` (string: the job's group, see the queue's ``max_claimed_per_group``).

The plan is built and checked on the driver from the schema, so a bad column
fails the query before any task runs, naming the column; row values (nulls)
are checked on the executors, naming the column and the row.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Literal

import msgspec

from osqueue.api import NewJob
from osqueue.errors import InvalidInput

from .options import WriteOptions

if TYPE_CHECKING:
    from pyspark.sql.types import StructType

PayloadKind = Literal["binary", "string", "json"]

_INTEGRAL = ("ByteType", "ShortType", "IntegerType", "LongType")
_NUMERIC = (*_INTEGRAL, "FloatType", "DoubleType", "DecimalType")
#: Control column -> the Spark type names it accepts, and what they are called.
CONTROL: Mapping[str, tuple[tuple[str, ...], str]] = {
    "priority": (_INTEGRAL, "an integer type"),
    "max_attempts": (_INTEGRAL, "an integer type"),
    "delay_s": (_NUMERIC, "a numeric type"),
    "key": (("StringType",), "string"),
    "queue": (("StringType",), "string"),
    "id": (("StringType",), "string"),
    "group": (("StringType",), "string"),
}


@dataclass(frozen=True, slots=True)
class WritePlan:
    """Picklable: shipped from the driver to every write task."""

    columns: tuple[str, ...]
    payload: PayloadKind
    payload_index: int | None
    #: Control column name -> its position in the row.
    control: dict[str, int]
    queue: str
    priority: int
    delay_s: float
    max_attempts: int


def plan_write(schema: StructType, options: WriteOptions) -> WritePlan:
    """Check the DataFrame's schema and decide how each row becomes a job."""
    names = [f.name for f in schema.fields]
    lowered = [n.lower() for n in names]
    for name in set(lowered):
        if lowered.count(name) > 1:
            raise InvalidInput("appears twice (column names are case-insensitive)", field=name)
    types = {f.name.lower(): type(f.dataType).__name__ for f in schema.fields}
    if not names:
        raise InvalidInput("the DataFrame has no columns", field="payload")
    payload: PayloadKind = "json"
    if "payload" in types:
        kind = types["payload"]
        if kind == "BinaryType":
            payload = "binary"
        elif kind == "StringType":
            payload = "string"
        else:
            raise InvalidInput(
                f"column must be binary or string, not {kind.removesuffix('Type').lower()} "
                "(or drop it to send every column as JSON)",
                field="payload",
            )
    control: dict[str, int] = {}
    for name, (accepted, described) in CONTROL.items():
        if name in types:
            if types[name] not in accepted:
                found = types[name].removesuffix("Type").lower()
                raise InvalidInput(f"column must be {described}, not {found}", field=name)
            control[name] = lowered.index(name)
    return WritePlan(
        columns=tuple(names),
        payload=payload,
        payload_index=lowered.index("payload") if payload != "json" else None,
        control=control,
        queue=options.queue,
        priority=options.priority,
        delay_s=options.delay_s,
        max_attempts=options.max_attempts,
    )


def _control(plan: WritePlan, row: tuple[Any, ...], name: str, default: Any) -> Any:
    index = plan.control.get(name)
    if index is None:
        return default
    value = row[index]
    return default if value is None else value


_json = msgspec.json.Encoder(decimal_format="number")


def _payload(plan: WritePlan, row: Any, row_number: int) -> bytes:
    if plan.payload == "json":
        return _json.encode(row.asDict(recursive=True))
    assert plan.payload_index is not None
    value = row[plan.payload_index]
    if value is None:
        raise InvalidInput(f"row {row_number} has a null payload", field="payload")
    if plan.payload == "string":
        return str(value).encode()
    return bytes(value)


def to_new_job(plan: WritePlan, row: Any, *, default_id: str, row_number: int) -> NewJob:
    """One DataFrame row as a job to push."""
    delay = _control(plan, row, "delay_s", plan.delay_s)
    try:
        return NewJob(
            payload=_payload(plan, row, row_number),
            queue=str(_control(plan, row, "queue", plan.queue)),
            priority=int(_control(plan, row, "priority", plan.priority)),
            delay_s=float(delay),
            key=_control(plan, row, "key", None),
            max_attempts=int(_control(plan, row, "max_attempts", plan.max_attempts)),
            id=str(_control(plan, row, "id", default_id)),
            group=_control(plan, row, "group", None),
        )
    except (TypeError, ValueError) as exc:
        raise InvalidInput(f"row {row_number}: {exc}", field="row") from exc
