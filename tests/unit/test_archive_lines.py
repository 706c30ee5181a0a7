"""Reading archive objects line by line, pure.

:func:`osqueue.broker.archive.objects.read_lines`.
"""

from __future__ import annotations

import msgspec
from archive_helpers import done_job

from osqueue.broker.archive.objects import (
    ArchiveRecord,
    BadLine,
    corrupt_lines,
    key_version,
    read_lines,
    render,
)

DECODER = msgspec.json.Decoder(ArchiveRecord)
QID = "01jd0000000000000000000000"


def test_what_the_broker_writes_reads_back_with_no_bad_line() -> None:
    key, data = render([done_job("b", 42), done_job("a", 42)], QID)
    assert key_version(key) == 42
    records, bad = read_lines(data, key, DECODER)
    assert [r.id for r in records] == ["a", "b"]
    assert bad == []


def test_an_empty_object_and_a_last_line_without_its_newline_are_bad() -> None:
    key, data = render([done_job("a", 42), done_job("b", 42)], QID)
    assert read_lines(b"", key, DECODER) == ([], [BadLine(key, 1, 0, "the object is empty")])
    records, bad = read_lines(data[:-1], key, DECODER)  # one byte short: the final newline
    assert [r.id for r in records] == ["a"]
    (only,) = bad
    assert (only.line, only.offset) == (2, data.index(b"\n") + 1)
    assert "no newline at the end" in only.reason


def test_a_key_of_another_shape_checks_no_version() -> None:
    _, data = render([done_job("a", 42)], QID)
    assert key_version("archive/README") is None
    records, bad = read_lines(data, "archive/copy.jsonl", DECODER)
    assert [r.version for r in records] == [42]
    assert bad == []


def test_one_error_names_the_count_and_the_first_lines() -> None:
    bad = [BadLine(f"archive/k{i}", i + 1, 10 * i, "blank line") for i in range(7)]
    error = corrupt_lines(bad, shown=2)
    assert str(error) == (
        "7 corrupt archive lines in 7 objects: archive/k0 line 1 (byte 0): blank line; "
        "archive/k1 line 2 (byte 10): blank line; and 5 more"
    )
    assert (error.path, error.offset) == ("archive/k0", 0)
