"""Archive keys name the version and the queue id; every reader parses them one way
(:func:`osqueue.broker.archive.objects.parse_key`), and a Spark stream over the archive
delivers each object once across a queue created again with the same versions."""

from __future__ import annotations

from pathlib import Path

from osqueue.broker.archive.objects import archive_key, fresh_key, parse_key
from osqueue.inspect.archive import parse_key as dashboard_key
from osqueue.spark.archive import ArchiveOffset, archive_keys, latest_offset
from osqueue.state import DOCUMENT_KEY, Document, encode
from osqueue.state.model import to_datetime

T0 = 1_800_000_000.0
OLD = "01jd0000000000000000000000"
NEW = "01jdzzzzzzzzzzzzzzzzzzzzzz"


def test_a_key_names_its_day_hour_version_and_queue_id() -> None:
    key = archive_key(42, to_datetime(T0), OLD)
    assert key == f"archive/date=2027-01-15/hour=08/00000000000000000042-{OLD}.jsonl"
    parsed = parse_key(key)
    assert parsed is not None
    assert (parsed.day, parsed.hour, parsed.version, parsed.queue_id) == (
        "2027-01-15",
        8,
        42,
        OLD,
    )
    assert not parsed.fresh
    again = fresh_key(key, b"body\n", 1)
    assert again != key
    assert again == fresh_key(key, b"body\n", 1)
    assert fresh_key(key, b"other\n", 1) != again
    fresh = parse_key(again)
    assert fresh is not None
    assert fresh.fresh
    assert fresh.version == 42
    assert fresh.queue_id == OLD
    assert fresh_key(key, b"body\n", 2) != again
    shown = dashboard_key(again)
    assert shown is not None
    assert shown.version == 42


def test_keys_of_other_shapes_are_not_archive_objects() -> None:
    for key in (
        "archive/README",
        "archive/date=2027-01-15/hour=08/00000000000000000042.jsonl",  # no queue id
        f"archive/date=2027-01-15/hour=8/00000000000000000042-{OLD}.jsonl",
        f"archive/date=2027-01-15/hour=08/00000000000000000042-{OLD.upper()}.jsonl",
        f"archive/date=2027-01-15/hour=08/00000000000000000042-{OLD}.json",
    ):
        assert parse_key(key) is None, key
        assert dashboard_key(key) is None, key


def _put(root: Path, key: str) -> None:
    path = root / key
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_bytes(b"{}\n")


def _document(root: Path, queue_id: str, version: int) -> None:
    doc = Document(version=version, queue_id=queue_id)
    (root / DOCUMENT_KEY).write_bytes(encode(doc))


def _delivered(url: str, start: ArchiveOffset) -> tuple[ArchiveOffset, list[str]]:
    """What one micro-batch reads: the objects the next offset covers and ``start`` did not."""
    end = ArchiveOffset.from_dict(latest_offset(url, start).to_dict())
    return end, [k for k in archive_keys(url) if end.covers(k) and not start.covers(k)]


def test_a_stream_delivers_each_object_once_across_a_queue_created_again(tmp_path: Path) -> None:
    url = tmp_path.as_uri()
    at = to_datetime(T0)
    first = [archive_key(v, at, OLD) for v in (3, 5)]
    for key in first:
        _put(tmp_path, key)
    _document(tmp_path, OLD, 6)
    offset, got = _delivered(url, ArchiveOffset())
    assert sorted(got) == sorted(first)

    # queue.json deleted and created again: the same versions under a new queue id
    second = [archive_key(v, at, NEW) for v in (3, 4)]
    for key in second:
        _put(tmp_path, key)
    _document(tmp_path, NEW, 5)
    offset, got = _delivered(url, offset)
    assert sorted(got) == sorted(second)

    # an older queue.json restored: a version met again goes under a fresh key
    restored = fresh_key(second[0], b"other jobs\n", 1)
    _put(tmp_path, restored)
    offset, got = _delivered(url, offset)
    assert got == [restored]
    offset, got = _delivered(url, offset)
    assert got == []
