"""Check the index against the WAL, row for row, without Spark.

Every namespace is recomputed in plain Python by folding all of its segments
with the same last-write-wins rule (:mod:`.lww`), then compared with the rows
of the Parquet version its manifest names, tombstones included.
"""

from __future__ import annotations

import io
from collections.abc import Iterator
from dataclasses import dataclass, field

from .dataroot import DataRoot
from .lww import IndexRow, fold
from .manifest import list_namespaces, load_manifest
from .wal import decode_segment, list_segments, parse_segment_key

#: How many differing rows are listed per namespace before "... and N more".
MAX_LISTED = 10


@dataclass(slots=True)
class VerifyReport:
    namespaces: int = 0
    segments: int = 0
    rows: int = 0
    live_rows: int = 0
    differences: list[str] = field(default_factory=list)

    @property
    def ok(self) -> bool:
        return not self.differences


def reference(root: DataRoot) -> dict[str, tuple[dict[str, IndexRow], list[str]]]:
    """Each namespace's expected rows (by id) and its segment keys, from the WAL alone."""
    by_ns: dict[str, list[str]] = {}
    for key in list_segments(root):
        namespace, _ = parse_segment_key(key)
        by_ns.setdefault(namespace, []).append(key)
    out: dict[str, tuple[dict[str, IndexRow], list[str]]] = {}
    for namespace, keys in sorted(by_ns.items()):
        state: dict[str, IndexRow] = {}
        for key, data in zip(keys, root.get_many(keys), strict=True):
            fold(state, decode_segment(data, path=key))
        out[namespace] = (state, keys)
    return out


def read_index(root: DataRoot, path: str | None) -> tuple[dict[str, IndexRow], list[str]]:
    """The rows of one Parquet version directory (``None``: the empty index), by id,
    and the ids found more than once (a broken merge)."""
    import pyarrow.parquet as pq

    rows: dict[str, IndexRow] = {}
    duplicates: list[str] = []
    if path is None:
        return rows, duplicates
    files = [k for k in root.list(path + "/") if k.endswith(".parquet")]
    for data in root.get_many(files):
        table = pq.read_table(io.BytesIO(data))
        for item in table.to_pylist():
            row = IndexRow(
                item["id"],
                item["ts"],
                item["deleted"],
                item["name"],
                item["score"],
                item["count"],
            )
            if row.id in rows:
                duplicates.append(row.id)
            rows[row.id] = row
    return rows, duplicates


def _diff(namespace: str, want: dict[str, IndexRow], got: dict[str, IndexRow]) -> Iterator[str]:
    for rid in sorted(want.keys() | got.keys()):
        expected, actual = want.get(rid), got.get(rid)
        if expected != actual:
            yield f"{namespace}: id {rid}: expected {expected}, index has {actual}"


def verify(root: DataRoot) -> VerifyReport:
    report = VerifyReport()
    expected = reference(root)
    namespaces = sorted(set(expected) | set(list_namespaces(root)))
    for namespace in namespaces:
        want, segments = expected.get(namespace, ({}, []))
        manifest, _ = load_manifest(root, namespace)
        report.namespaces += 1
        report.segments += len(segments)
        missing = sorted(set(segments) - set(manifest.segments))
        if missing:
            report.differences.append(
                f"{namespace}: {len(missing)} segment(s) not indexed, first {missing[0]}"
            )
        unknown = sorted(set(manifest.segments) - set(segments))
        if unknown:
            report.differences.append(f"{namespace}: manifest lists unknown segment {unknown[0]}")
        got, duplicates = read_index(root, manifest.path)
        if duplicates:
            report.differences.append(
                f"{namespace}: {len(duplicates)} id(s) appear twice, first {duplicates[0]}"
            )
        report.rows += len(got)
        report.live_rows += sum(1 for row in got.values() if not row.deleted)
        diffs = list(_diff(namespace, want, got))
        report.differences.extend(diffs[:MAX_LISTED])
        if len(diffs) > MAX_LISTED:
            report.differences.append(
                f"{namespace}: ... and {len(diffs) - MAX_LISTED} more differing rows"
            )
    return report
