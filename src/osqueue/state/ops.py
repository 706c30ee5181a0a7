"""Typed operations on the document and their results.

Every request a broker batches is one of these values; :func:`apply` maps
each type to its transition (no dispatch on strings).  A result is either a
success value below or the :class:`~osqueue.errors.OsqueueError` that op got.
"""

from __future__ import annotations

from dataclasses import dataclass

from osqueue.errors import OsqueueError
from osqueue.state.model import BrokerInfo, StoredJob


@dataclass(frozen=True, slots=True)
class Policy:
    """Rules the transitions follow (from the broker's configuration)."""

    heartbeat_timeout_s: float = 30.0
    backoff_base_s: float = 1.0
    backoff_cap_s: float = 300.0
    max_payload_bytes: int = 64 * 1024 * 1024
    max_inline_payload_bytes: int = 256 * 1024
    max_document_bytes: int = 256 * 1024 * 1024
    max_error_chars: int = 4096
    dedupe_window_s: float = 120.0


# --------------------------------------------------------------------------- ops


@dataclass(frozen=True, slots=True)
class Push:
    id: str
    payload: bytes | None
    queue: str = "default"
    priority: int = 0
    delay_s: float = 0.0
    key: str | None = None
    max_attempts: int = 5
    payload_ref: str | None = None
    payload_size: int = 0


@dataclass(frozen=True, slots=True)
class Claim:
    worker: str
    queues: tuple[str, ...] = ("default",)
    max_jobs: int = 1


@dataclass(frozen=True, slots=True)
class Heartbeat:
    job_id: str
    token: int


@dataclass(frozen=True, slots=True)
class Complete:
    job_id: str
    token: int


@dataclass(frozen=True, slots=True)
class Fail:
    job_id: str
    token: int
    error: str = ""
    retry_after_s: float | None = None


@dataclass(frozen=True, slots=True)
class Release:
    """Give a claimed job back untouched: no attempt is counted."""

    job_id: str
    token: int


@dataclass(frozen=True, slots=True)
class Cancel:
    job_id: str


@dataclass(frozen=True, slots=True)
class RetryDead:
    """Re-queue dead jobs (all of them when ``ids`` is None)."""

    ids: tuple[str, ...] | None = None


@dataclass(frozen=True, slots=True)
class PurgeDead:
    """Delete dead jobs (all of them when ``ids`` is None)."""

    ids: tuple[str, ...] | None = None


@dataclass(frozen=True, slots=True)
class MarkArchived:
    """The archive objects of these versions are written: prune their done jobs."""

    versions: tuple[int, ...]


@dataclass(frozen=True, slots=True)
class RestartHeartbeats:
    """After a takeover: every claimed job's heartbeat clock restarts now."""


Op = (
    Push
    | Claim
    | Heartbeat
    | Complete
    | Fail
    | Release
    | Cancel
    | RetryDead
    | PurgeDead
    | MarkArchived
    | RestartHeartbeats
)


# --------------------------------------------------------------------------- results


@dataclass(frozen=True, slots=True)
class Pushed:
    id: str
    created: bool  # False: the same id was already applied (a retried push)


@dataclass(frozen=True, slots=True)
class Claimed:
    jobs: tuple[StoredJob, ...]


@dataclass(frozen=True, slots=True)
class Ok:
    pass


@dataclass(frozen=True, slots=True)
class Removed:
    """Jobs that left the document (their payload objects may be deleted)."""

    jobs: tuple[StoredJob, ...] = ()


@dataclass(frozen=True, slots=True)
class Counted:
    n: int


OpResult = Pushed | Claimed | Ok | Removed | Counted
Result = OpResult | OsqueueError


__all__ = [
    "BrokerInfo",
    "Cancel",
    "Claim",
    "Claimed",
    "Complete",
    "Counted",
    "Fail",
    "Heartbeat",
    "MarkArchived",
    "Ok",
    "Op",
    "OpResult",
    "Policy",
    "PurgeDead",
    "Push",
    "Pushed",
    "Release",
    "Removed",
    "RestartHeartbeats",
    "Result",
    "RetryDead",
]
