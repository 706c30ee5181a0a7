"""Done jobs as the broker archives them, for the archive writers' and readers' tests."""

from __future__ import annotations

from osqueue.state import Claim, StoredJob
from osqueue.state.model import to_datetime

#: 2027-01-15 08:00:00 UTC: the hour of ``archive/date=2027-01-15/hour=08/``
T0 = 1_800_000_000.0


def done_job(job_id: str, version: int, *, at: float = T0) -> StoredJob:
    """A job of ``default`` completed (by worker ``w``, token 1) in ``version`` at ``at``."""
    when = to_datetime(at)
    return StoredJob(
        id=job_id,
        queue="default",
        seq=1,
        status="done",
        created_at=when,
        first_claimed_at=when,
        claim=Claim(worker="w", token=1, claimed_at=when, heartbeat_at=when),
        done_version=version,
        done_at=when,
    )
