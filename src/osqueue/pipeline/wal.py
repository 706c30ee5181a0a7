"""Write-ahead log segments: JSON lines of upserts and deletes, per namespace.

A segment is the object ``wal/<namespace>/<seq:06d>.jsonl`` under the data
root.  Each line is one record::

    {"op": "upsert", "id": "k000042", "ts": 1800000000123456,
     "fields": {"name": "item-7", "score": 0.25, "count": 3}}
    {"op": "delete", "id": "k000017", "ts": 1800000000123999}

``ts`` is an integer (microseconds); records of one id may arrive out of order
across segments, which is what makes last-write-wins (see :mod:`.lww`) matter.
:func:`generate` builds a deterministic data set from a seed.
"""

from __future__ import annotations

import random
import re
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from typing import Literal

import msgspec

from osqueue.errors import CorruptDocument, InvalidInput

from .dataroot import DataRoot

WAL_PREFIX = "wal/"

#: The Spark schema of a segment line (DDL).
WAL_SCHEMA_DDL = (
    "op STRING, id STRING, ts BIGINT, fields STRUCT<name: STRING, score: DOUBLE, count: BIGINT>"
)

_NAMESPACE = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.-]{0,99}$")
_SEGMENT = re.compile(r"^wal/([A-Za-z0-9][A-Za-z0-9_.-]{0,99})/(\d{6})\.jsonl$")


class Fields(msgspec.Struct, frozen=True):
    """The value an upsert writes."""

    name: str
    score: float
    count: int


class WalRecord(msgspec.Struct, frozen=True, omit_defaults=True):
    op: Literal["upsert", "delete"]
    id: str
    ts: int
    fields: Fields | None = None


_encoder = msgspec.json.Encoder()
_decoder = msgspec.json.Decoder(WalRecord)


def check_namespace(namespace: str) -> str:
    if not _NAMESPACE.match(namespace):
        raise InvalidInput(
            f"{namespace!r} is not a namespace name (letters, digits, '_', '.', '-')",
            field="namespace",
        )
    return namespace


def segment_key(namespace: str, seq: int) -> str:
    """The key of segment ``seq`` of ``namespace``, relative to the data root."""
    if seq < 0 or seq > 999_999:
        raise InvalidInput(f"{seq} is outside 0..999999", field="seq")
    return f"{WAL_PREFIX}{check_namespace(namespace)}/{seq:06d}.jsonl"


def parse_segment_key(key: str) -> tuple[str, int]:
    """``wal/ns-001/000003.jsonl`` -> ``("ns-001", 3)``."""
    match = _SEGMENT.match(key)
    if match is None:
        raise InvalidInput(
            f"{key!r} is not a segment key (wal/<namespace>/<seq:06d>.jsonl)", field="segment"
        )
    return match.group(1), int(match.group(2))


def encode_segment(records: Sequence[WalRecord]) -> bytes:
    return b"".join(_encoder.encode(r) + b"\n" for r in records)


def decode_segment(data: bytes, *, path: str) -> list[WalRecord]:
    """Parse a segment; a bad line is ``CorruptDocument`` naming the path and byte offset."""
    records: list[WalRecord] = []
    offset = 0
    for line in data.splitlines(keepends=True):
        if line.strip():
            try:
                records.append(_decoder.decode(line))
            except msgspec.ValidationError as exc:
                raise CorruptDocument(
                    f"{path}: bad WAL record at byte {offset}: {exc}", path=path, offset=offset
                ) from exc
            except msgspec.DecodeError as exc:
                raise CorruptDocument(
                    f"{path}: line at byte {offset} is not JSON: {exc}", path=path, offset=offset
                ) from exc
        offset += len(line)
    return records


def list_segments(root: DataRoot) -> list[str]:
    """Every segment key under the root, sorted."""
    return [k for k in root.list(WAL_PREFIX) if _SEGMENT.match(k)]


@dataclass(frozen=True, slots=True)
class GenerateConfig:
    """Shape of a generated data set (deterministic for a given ``seed``)."""

    namespaces: int = 8
    segments_per_namespace: int = 6
    rows_per_segment: int = 2_000
    keys_per_namespace: int = 5_000
    delete_ratio: float = 0.1
    #: How far (in segments) a record's timestamp may stray back into earlier
    #: segments, so late writes and out-of-order deletes occur.
    disorder_segments: float = 1.5
    seed: int = 7
    start_ts: int = 1_800_000_000_000_000

    def __post_init__(self) -> None:
        for name in ("namespaces", "segments_per_namespace", "rows_per_segment"):
            if getattr(self, name) < 1:
                raise InvalidInput("must be at least 1", field=name)
        if self.keys_per_namespace < 1:
            raise InvalidInput("must be at least 1", field="keys_per_namespace")
        if not 0.0 <= self.delete_ratio <= 1.0:
            raise InvalidInput("must be between 0 and 1", field="delete_ratio")
        if self.disorder_segments < 0:
            raise InvalidInput("must not be negative", field="disorder_segments")
        if self.segments_per_namespace > 999_999:
            raise InvalidInput("must be at most 999999", field="segments_per_namespace")

    @property
    def total_rows(self) -> int:
        return self.namespaces * self.segments_per_namespace * self.rows_per_segment


def namespace_name(index: int) -> str:
    return f"ns-{index:03d}"


def generate(config: GenerateConfig) -> Iterator[tuple[str, list[WalRecord]]]:
    """Yield ``(segment_key, records)`` for the whole data set, deterministically."""
    step_us = 1_000
    span_us = config.rows_per_segment * step_us
    for n in range(config.namespaces):
        namespace = namespace_name(n)
        rng = random.Random(f"{config.seed}/{namespace}")
        for seq in range(1, config.segments_per_namespace + 1):
            base = config.start_ts + (seq - 1) * span_us
            records: list[WalRecord] = []
            for i in range(config.rows_per_segment):
                back = int(rng.random() * config.disorder_segments * span_us)
                ts = max(config.start_ts, base + i * step_us - back)
                key = f"k{rng.randrange(config.keys_per_namespace):06d}"
                if rng.random() < config.delete_ratio:
                    records.append(WalRecord(op="delete", id=key, ts=ts))
                else:
                    fields = Fields(
                        name=f"item-{rng.randrange(1_000_000)}",
                        score=round(rng.random() * 100.0, 4),
                        count=rng.randrange(1_000),
                    )
                    records.append(WalRecord(op="upsert", id=key, ts=ts, fields=fields))
            yield segment_key(namespace, seq), records


def write_wal(root: DataRoot, config: GenerateConfig) -> list[str]:
    """Generate the data set and write its segments under ``root``; return their keys."""
    keys: list[str] = []
    batch: list[tuple[str, bytes]] = []
    for key, records in generate(config):
        keys.append(key)
        batch.append((key, encode_segment(records)))
        if len(batch) >= 64:
            root.put_many(batch)
            batch = []
    if batch:
        root.put_many(batch)
    return keys
