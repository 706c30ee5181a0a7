"""Typed operations on the document and their results.

Every request a broker batches is one of these values; :func:`apply` maps
each type to its transition (no dispatch on strings).  A result is either a
success value below or the :class:`~osqueue.errors.OsqueueError` that op got.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime

import msgspec

from osqueue.api import CatchUp, FinishedStatus, ParentFailure
from osqueue.errors import OsqueueError
from osqueue.state.dead_letters import DeadRef
from osqueue.state.finished_jobs import FinishedJob, ResultData
from osqueue.state.finished_refs import FinishedRef
from osqueue.state.model import (
    BrokerInfo,
    DelayedRef,
    Schedule,
    SegmentRef,
    StoredJob,
    StoredSettings,
)
from osqueue.state.validate import MAX_ERROR_CHARS
from osqueue.state.waiting_refs import WaitingRef


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
    # Deep backlogs (osqueue.state.planning): the transitions follow Spill and
    # Load ops; these say when the broker makes them.
    #: most jobs per segment object (a spill writes a long tail as several)
    segment_jobs: int = 50_000
    #: ready jobs a stream keeps in the document ahead of its segments: a spill
    #: leaves them, and a load is due once fewer are left
    head_jobs: int = 500
    #: jobs one Load puts back
    load_jobs: int = 500
    #: compaction (osqueue.state.compaction): adjacent segments of a stream holding
    #: at most a tenth of this many jobs each are merged into objects of at most
    #: this many (None: never)
    compact_jobs: int | None = 50_000
    # Scheduling (osqueue.state.schedules, .limits, .deps)
    #: a ``catch_up="skip"`` schedule skips a tick fired later than this after it fell due
    schedule_grace_s: float = 60.0
    #: schedules a document holds at most
    max_schedules: int = 100_000
    #: a stream spills once this many of its ready jobs sit in the document
    #: behind its head and segments (None: never)
    spill_above_jobs: int | None = 1_000
    # Results and the record of finished jobs (osqueue.state.finished_jobs,
    # osqueue.state.results.record: who gets an entry, and for how long).
    #: how long a finished job's record (and result) is kept, unless its push or
    #: queue said; 0: none is kept (a job then gets an entry only for
    #: dependencies); None: a result given is kept an hour, a finish without one
    #: gets no entry (osqueue.state.results.kept_for)
    result_ttl_s: float | None = None
    #: how long a finished job is kept for children pushed after it, if it had
    #: waiting children or a push named parents within this long before
    dependency_window_s: float = 3600.0
    #: results up to this size sit in the document; larger ones in result objects
    result_inline_max_bytes: int = 1024
    #: the largest result accepted at all
    max_result_bytes: int = 64 * 1024 * 1024
    #: the record holds at most this many finished jobs in the document (the soonest
    #: to expire go first), and sealed objects at most this many held entries
    max_finished_jobs: int = 10_000
    #: and at most this many bytes (fewer when the document nears max_document_bytes:
    #: the record yields to jobs)
    max_finished_bytes: int = 2 * 1024 * 1024
    # Dead letters (osqueue.state.cold_dead): the newest dead jobs of a queue stay
    # in the document; older ones move to dead segments (of segment_jobs at most).
    #: dead jobs a queue keeps in the document (None: every one stays)
    dead_keep_jobs: int | None = 100
    #: a queue's dead jobs spill once this many more than dead_keep_jobs have died
    dead_spill_jobs: int = 1_000
    # Cold delayed jobs (osqueue.state.cold_delayed, osqueue.state.delayed_plan).
    #: delayed jobs due later than this spill to objects under delayed/ ...
    delay_horizon_s: float = 60.0
    #: ... once more than this many delayed jobs sit in the document (None: never)
    delay_spill_above_jobs: int | None = 1_000
    #: an object holds the jobs of one queue due in one window this long
    delay_window_s: float = 300.0
    #: an object's next jobs are loaded back this long before they are due
    delay_lead_s: float = 10.0
    #: jobs one LoadDelayed puts back
    delay_load_jobs: int = 5_000
    # Waiting children in objects (osqueue.state.cold_waiting): when the broker
    # spills and loads them.
    #: children waiting for the same parents move to an object once this many sit
    #: in the document (None: never)
    waiting_spill_above_jobs: int | None = 200
    #: most children per object of waiting children
    waiting_object_jobs: int = 5_000
    #: an object whose parents all ended is loaded only while fewer queued jobs
    #: of its queue than this sit in the document (so a fan-in comes back in chunks)
    waiting_load_below_queued: int = 10_000
    #: the record's ``done`` entries are sealed into objects once this many sit
    #: in the document (None: never; osqueue.state.finished_objects)
    finished_seal_above_entries: int | None = 1_000
    #: most entries per sealed object
    finished_object_entries: int = 20_000


# --------------------------------------------------------------------------- ops


class ParentRead(msgspec.Struct, frozen=True, gc=False):
    """A parent a push names, as the broker read it in sealed objects of the record
    of finished jobs (:mod:`osqueue.state.finished_objects`): the push's first
    try failed with ``ReadToConfirm`` naming the objects, and the broker read
    them (``keys``) between commits.  Set by the broker only, never on the wire."""

    id: str
    #: how the parent finished, as an object held it (None: none of ``keys`` did)
    status: FinishedStatus | None
    #: the objects read
    keys: tuple[str, ...] = ()


class Push(msgspec.Struct, frozen=True, gc=False):
    id: str
    payload: bytes | None
    queue: str = "default"
    priority: int = 0
    delay_s: float = 0.0
    key: str | None = None
    max_attempts: int = 5
    payload_ref: str | None = None
    #: the payload object's size (stored with the job when ``payload_ref`` is set)
    payload_size: int = 0
    #: the payload object's hex SHA-256 (stored with the job; None: not recorded)
    payload_sha256: str | None = None
    #: Keep a dedupe tombstone when the job leaves the document: True when the
    #: caller chose the id (it may send this push again); an id the in-process
    #: client made up is never re-sent, so its job needs none.
    dedupe: bool = True
    #: the job's group (``max_claimed_per_group`` caps its claimed jobs)
    group: str | None = None
    #: parents: the job waits until every one of them completed
    after: tuple[str, ...] = ()
    on_parent_failure: ParentFailure = "cancel"
    #: how long the job's record of finishing (and result) is kept (None: the policy's)
    result_ttl_s: float | None = None
    #: cold objects the broker read and found without this id (their filters said
    #: it might be there: osqueue.state.dedupe_filter)
    absent_from: tuple[str, ...] = ()
    #: parents the broker read in sealed objects of the record of finished jobs
    #: (the pure push said "read to confirm" for them)
    sealed_parents: tuple[ParentRead, ...] = ()


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
    #: the job's result: inline, or the result object written before this op
    result: ResultData | None = None


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
    """Cancel a live job.  A job that sits in a segment is named by the segment's
    key and its seq there (the broker finds both by reading the object); one in
    an object of delayed jobs (``delayed/...``) by its key and its position there."""

    job_id: str
    segment: str | None = None
    seq: int | None = None


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


class Spill(msgspec.Struct, frozen=True):
    """The broker wrote a segment object holding ``jobs`` (a snapshot of ready jobs
    of one stream, in seq order): drop them from the document and reference the
    object instead.  Applied only if every job is still in the document
    unchanged and ``ref`` comes after the stream's last reference; otherwise it
    fails alone (``Conflict``) and the object is left to the orphan sweep."""

    ref: SegmentRef
    jobs: tuple[StoredJob, ...]


class Load(msgspec.Struct, frozen=True):
    """Put the next jobs of the segment ``key`` back into the document: ``jobs`` are
    the object's jobs at positions ``from_loaded..`` (cancelled ones included;
    they are skipped), ``next_job`` the one after them (``None``: ``jobs`` end the
    object, whose reference is then dropped).  Applied only if the reference is
    its stream's first and has loaded exactly ``from_loaded`` jobs; otherwise it
    fails alone (``Conflict``)."""

    key: str
    from_loaded: int
    jobs: tuple[StoredJob, ...]
    next_job: StoredJob | None = None
    #: the jobs' lines in the object, if the broker has them: the document's
    #: encoding of each job, kept as it is instead of encoding the job again
    lines: tuple[bytes, ...] = ()


class SetAside(msgspec.Struct, frozen=True, gc=False):
    """The broker found segment ``key``'s object missing or not what its reference
    records: move the reference aside (with ``reason``), so its stream goes on
    without it.  Fails alone (``Conflict``) if ``key`` is not referenced."""

    key: str
    reason: str


class Readmit(msgspec.Struct, frozen=True, gc=False):
    """Put the set-aside reference ``key`` back in its stream, in seq order (the
    broker checked the object against it first).  Fails with ``InvalidInput``
    naming ``key`` if it is not set aside, ``Conflict`` if its seq range
    overlaps a reference spilled since."""

    key: str


# --------------------------------------------------------------------------- compaction


class Compact(msgspec.Struct, frozen=True, gc=False):
    """The broker wrote one object holding the jobs of the adjacent segments
    ``refs`` (their lines, in order): reference it (``ref``) in their place.
    Applied only if each of ``refs`` is still referenced, unchanged and
    adjacent in its stream, and ``ref`` describes exactly their union
    (:func:`osqueue.state.compaction.merged_ref`); otherwise it fails alone
    (``Conflict``) and the object is left to be deleted.  The merged objects
    are reported in ``Transition.dropped_segments`` (deleted after the commit)."""

    refs: tuple[SegmentRef, ...]
    ref: SegmentRef


# Dead segments (osqueue.state.cold_dead) --------------------------------------


class SpillDead(msgspec.Struct, frozen=True):
    """The broker wrote a dead segment holding ``jobs`` (a snapshot of dead jobs of
    one queue, in seq order, that died no earlier than its last dead segment's):
    drop them from the document and reference the object.  Fails alone
    (``Conflict``) if a job changed since the snapshot."""

    ref: DeadRef
    jobs: tuple[StoredJob, ...]


class SwapDead(msgspec.Struct, frozen=True):
    """Retry or purge jobs of the dead segment ``old`` in one commit: its reference
    is replaced by ``keep`` (a new object holding the jobs that stay dead; None:
    none), and ``ready`` references new ready segments holding the retried jobs
    reset to queued, with fresh seqs from ``first_seq`` on (the commit reserves
    them: ``next_seq`` moves past them).  Jobs in neither are purged.  Fails alone
    (``Conflict``) if ``old`` is not referenced as given or ``first_seq`` is
    behind ``next_seq``, so each job is retried at most once.  ``retried`` names
    the jobs ``ready`` holds: their entries in the record of finished jobs (``dead``)
    are dropped, so ``result()`` answers them as live again.  ``purged`` names
    the purged jobs pushed with an id (``dedupe``) and their creation times: those
    created within ``dedupe_window_s`` leave a tombstone (``old``'s filter
    answered for them so far)."""

    old: DeadRef
    keep: DeadRef | None = None
    ready: tuple[SegmentRef, ...] = ()
    first_seq: int = 0
    retried: tuple[str, ...] = ()
    purged: tuple[tuple[str, datetime], ...] = ()


class SpillDelayed(msgspec.Struct, frozen=True):
    """The broker wrote an object of delayed jobs (``jobs``: queued jobs of one queue
    with a ``run_at``, sorted by ``(run_at, seq)``): drop them from the document and
    reference the object.  Fails alone (``Conflict``) if a job changed since the
    snapshot (see :mod:`osqueue.state.cold_delayed`)."""

    ref: DelayedRef
    jobs: tuple[StoredJob, ...]


class LoadDelayed(msgspec.Struct, frozen=True):
    """Put the next jobs of the delayed object ``key`` back (each keeps its
    ``run_at``: never claimable early): ``jobs`` are the object's jobs at positions
    ``from_loaded..``, ``next_run_at`` the run_at of the one after them (None: they
    end the object, whose reference is dropped); ``lines`` their lines there."""

    key: str
    from_loaded: int
    jobs: tuple[StoredJob, ...]
    next_run_at: datetime | None = None
    lines: tuple[bytes, ...] = ()


# --- waiting children in objects (osqueue.state.cold_waiting) ---------------------


class SpillWaiting(msgspec.Struct, frozen=True):
    """The broker wrote ``ref``'s object holding ``jobs`` (waiting jobs of one queue
    that all wait for ``ref.after``): drop them from the document and reference
    the object.  Fails alone (``Conflict``) if a job changed since the snapshot."""

    ref: WaitingRef
    jobs: tuple[StoredJob, ...]


class LoadWaiting(msgspec.Struct, frozen=True):
    """The object ``key`` is due (its parents ended, or one failed): ``jobs`` (all of
    the object's, as read and checked) come back as queued, cancelled, or
    waiting for the parents still pending; the reference goes."""

    key: str
    jobs: tuple[StoredJob, ...]


class SealFinished(msgspec.Struct, frozen=True):
    """The broker wrote ``ref``'s object holding ``entries`` (``done`` entries of the
    record of finished jobs): drop them from the document and reference the
    object (:mod:`osqueue.state.finished_objects`).  Fails alone (``Conflict``)
    if an entry changed since the snapshot."""

    ref: FinishedRef
    entries: tuple[FinishedJob, ...]


class SetQueue(msgspec.Struct, frozen=True, gc=False):
    """Change a queue's settings (None: leave as it is; 0: remove the limit), or
    with ``remove`` (and no setting) forget the queue: it is no longer listed.
    Removing is refused while the queue holds live jobs or schedules."""

    queue: str
    rate_per_s: float | None = None
    burst: int | None = None
    max_claimed: int | None = None
    max_claimed_per_group: int | None = None
    paused: bool | None = None
    result_ttl_s: float | None = None
    remove: bool = False


class PutSchedule(msgspec.Struct, frozen=True, gc=False):
    """Add a schedule, or replace the one of that name (its last tick is kept, so
    a tick it recorded is never fired again); ``paused`` pauses or resumes it."""

    name: str
    queue: str
    cron: str | None = None
    tz: str | None = None
    every_s: float | None = None
    payload: bytes = b""
    priority: int = 0
    max_attempts: int = 5
    catch_up: CatchUp = "once"
    paused: bool = False


class RemoveSchedule(msgspec.Struct, frozen=True, gc=False):
    name: str


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
    | Spill
    | Load
    | SetAside
    | Readmit
    | Compact
    | SpillDead
    | SwapDead
    | SetQueue
    | PutSchedule
    | RemoveSchedule
    | SpillDelayed
    | LoadDelayed
    | SpillWaiting
    | LoadWaiting
    | SealFinished
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


class QueueSet(msgspec.Struct, frozen=True, gc=False):
    """A queue's settings after a :class:`SetQueue`."""

    queue: str
    settings: StoredSettings


class Scheduled(msgspec.Struct, frozen=True, gc=False):
    """The schedule a :class:`PutSchedule` stored (with its first ``next_at``)."""

    schedule: Schedule


OpResult = Pushed | Claimed | Ok | Removed | Counted | QueueSet | Scheduled
Result = OpResult | OsqueueError


__all__ = [
    "BrokerInfo",
    "Cancel",
    "ClaimOp",
    "Claimed",
    "Compact",
    "Complete",
    "Counted",
    "Fail",
    "Heartbeat",
    "Load",
    "LoadDelayed",
    "LoadWaiting",
    "MarkArchived",
    "Ok",
    "Op",
    "OpResult",
    "Policy",
    "PurgeDead",
    "Push",
    "Pushed",
    "PutSchedule",
    "QueueSet",
    "Readmit",
    "Release",
    "RemoveSchedule",
    "Removed",
    "RestartHeartbeats",
    "Result",
    "RetryDead",
    "Scheduled",
    "SealFinished",
    "SetAside",
    "SetQueue",
    "Spill",
    "SpillDead",
    "SpillDelayed",
    "SpillWaiting",
    "SwapDead",
]
