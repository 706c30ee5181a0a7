"""Typed operations on the document and their results.

Every request a broker batches is one of these values; :func:`apply` maps
each type to its transition (no dispatch on strings).  A result is either a
success value below or the :class:`~osqueue.errors.OsqueueError` that op got.
"""

from __future__ import annotations

from dataclasses import dataclass

import msgspec

from osqueue.errors import OsqueueError
from osqueue.state.model import BrokerInfo, StoredJob
from osqueue.state.validate import MAX_ERROR_CHARS


@dataclass(frozen=True, slots=True)
class Policy:
    """Rules the transitions follow (from the broker's configuration)."""

    heartbeat_timeout_s: float = 30.0
    backoff_base_s: float = 1.0
    backoff_cap_s: float = 300.0
    max_payload_bytes: int = 64 * 1024 * 1024
    max_inline_payload_bytes: int = 256 * 1024
    max_document_bytes: int = 256 * 1024 * 1024
    max_error_chars: int = MAX_ERROR_CHARS
    dedupe_window_s: float = 120.0


# --------------------------------------------------------------------------- ops


class Push(msgspec.Struct, frozen=True, gc=False):
    id: str
    payload: bytes | None
    queue: str = "default"
    priority: int = 0
    delay_s: float = 0.0
    key: str | None = None
    max_attempts: int = 5
    payload_ref: str | None = None
    payload_size: int = 0
    #: Keep a dedupe tombstone when the job leaves the document: True when the
    #: caller chose the id (it may send this push again); an id the in-process
    #: client made up is never re-sent, so its job needs none.
    dedupe: bool = True


class ClaimOp(msgspec.Struct, frozen=True, gc=False):
    """Claim up to ``max_jobs`` ready jobs of ``queues`` for ``worker`` (the op;
    the record a claimed job carries is :class:`osqueue.state.model.Claim`)."""

    worker: str
    queues: tuple[str, ...] = ("default",)
    max_jobs: int = 1


class Heartbeat(msgspec.Struct, frozen=True, gc=False):
    job_id: str
    token: int


class Complete(msgspec.Struct, frozen=True, gc=False):
    job_id: str
    token: int


class Fail(msgspec.Struct, frozen=True, gc=False):
    job_id: str
    token: int
    error: str = ""
    retry_after_s: float | None = None


class Release(msgspec.Struct, frozen=True, gc=False):
    """Give a claimed job back untouched: no attempt is counted."""

    job_id: str
    token: int


class Cancel(msgspec.Struct, frozen=True, gc=False):
    job_id: str


class RetryDead(msgspec.Struct, frozen=True, gc=False):
    """Re-queue dead jobs (all of them when ``ids`` is None)."""

    ids: tuple[str, ...] | None = None


class PurgeDead(msgspec.Struct, frozen=True, gc=False):
    """Delete dead jobs (all of them when ``ids`` is None)."""

    ids: tuple[str, ...] | None = None


class MarkArchived(msgspec.Struct, frozen=True, gc=False):
    """The archive objects of these versions are written: prune their done jobs."""

    versions: tuple[int, ...]


class RestartHeartbeats(msgspec.Struct, frozen=True, gc=False):
    """After a takeover: every claimed job's heartbeat clock restarts now."""


Op = (
    Push
    | ClaimOp
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


class Pushed(msgspec.Struct, frozen=True, gc=False):
    id: str
    created: bool  # False: the same id was already applied (a retried push)


class Claimed(msgspec.Struct, frozen=True):
    jobs: tuple[StoredJob, ...]


class Ok(msgspec.Struct, frozen=True, gc=False):
    pass


class Removed(msgspec.Struct, frozen=True):
    """Jobs that left the document (their payload objects may be deleted)."""

    jobs: tuple[StoredJob, ...] = ()


class Counted(msgspec.Struct, frozen=True, gc=False):
    n: int


OpResult = Pushed | Claimed | Ok | Removed | Counted
Result = OpResult | OsqueueError


__all__ = [
    "BrokerInfo",
    "Cancel",
    "ClaimOp",
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
