"""An archive with corrupt lines, written straight to a file:// queue's directory, for
the readers' tests (``osqueue archive --verify`` and the Spark data source)."""

from __future__ import annotations

from pathlib import Path

import msgspec

from osqueue.broker.archive.objects import ArchiveRecord, archive_key
from osqueue.state.model import to_datetime

T0 = 1_800_000_000.0
QUEUE_ID = "01jd0000000000000000000000"


def line(job_id: str, version: int) -> bytes:
    """One archive line as the broker writes it."""
    at = "2027-01-15T08:00:00.000Z"
    record = ArchiveRecord(
        id=job_id,
        queue="default",
        priority=0,
        key=None,
        attempts=1,
        max_attempts=5,
        created_at=at,
        first_claimed_at=at,
        claimed_at=at,
        completed_at=at,
        worker="w",
        token=version,
        version=version,
        last_error=None,
    )
    return msgspec.json.encode(record) + b"\n"


def write_corrupt_archive(directory: Path) -> tuple[int, list[tuple[str, int]]]:
    """Three archive objects under ``directory`` (a file:// queue's root): one good,
    two with bad lines.  Returns the good lines' count and every bad (key, line)."""
    keys = [archive_key(v, to_datetime(T0), QUEUE_ID) for v in (1, 2, 3)]
    objects = {
        keys[0]: line("a1", 1) + line("a2", 1),
        keys[1]: (
            line("b1", 2)
            + b'{"id": "b2", "queue": \n'  # 2: does not decode
            + b"\n"  # 3: blank
            + line("b4", 7)  # 4: another version's record
            + line("b5", 2)
        ),
        keys[2]: line("c1", 3) + line("c2", 3)[:40],  # 2: cut short
    }
    for key, data in objects.items():
        path = directory / key
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_bytes(data)
    return 5, [(keys[1], 2), (keys[1], 3), (keys[1], 4), (keys[2], 2)]
