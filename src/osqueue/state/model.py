"""The queue document as values.

The document is one JSON object (``queue.json``).  Jobs are immutable
``msgspec`` structs; a transition replaces a job, never edits it, so each job's
encoded bytes can be cached and a commit re-encodes only what changed.

Times are UTC ``datetime`` values written as RFC 3339 strings, stamped by the
broker's clock only (invariant 6).
"""

from __future__ import annotations

import functools
import re
from datetime import UTC, datetime
from typing import Annotated

import msgspec

from osqueue.api import CatchUp, JobStatus, ParentFailure
from osqueue.ids import new_id
from osqueue.state.dead_letters import DeadAside, DeadRef
from osqueue.state.finished_jobs import FinishedJob
from osqueue.state.finished_refs import FinishedRef
from osqueue.state.history import HistorySample
from osqueue.state.waiting_refs import WaitingAside, WaitingRef

#: The document's format, the one this osqueue reads and writes.  A document of
#: any other format (an earlier, pre-release one, or a later one) is refused
#: (``CorruptDocument`` at ``$.format``) and never overwritten.
FORMAT = 4

#: A queue id: 26 lowercase characters of Crockford base32 (a lowercased ULID)
QUEUE_ID_RE = re.compile(r"[0-9a-hjkmnp-tv-z]{26}")


def new_queue_id() -> str:
    """A fresh queue id, drawn when the broker creates the document."""
    return new_id().lower()


STATUSES: tuple[JobStatus, ...] = ("waiting", "queued", "claimed", "done", "dead")


def to_datetime(ts: float) -> datetime:
    """Broker clock seconds -> a millisecond-precision UTC datetime (the nearest
    millisecond; ``round(ts * 1000)`` is an integer rounding, where ``round(ts, 3)``
    formats the float in decimal: they differ only within a fraction of a
    microsecond of a half millisecond)."""
    return _ms_datetime(round(ts * 1000))


@functools.lru_cache(maxsize=256)
def _ms_datetime(ms: int) -> datetime:
    # A busy broker stamps many commits within one millisecond (datetimes are immutable).
    # ms / 1000 is the double nearest the decimal, which fromtimestamp takes exactly
    # to its microsecond.
    return datetime.fromtimestamp(ms / 1000, UTC)


def to_seconds(dt: datetime) -> float:
    return dt.timestamp()


class Claim(msgspec.Struct, frozen=True, omit_defaults=True, gc=False):
    """Who holds a claimed job, under which fencing token, and since when."""

    worker: str
    token: int
    claimed_at: datetime
    heartbeat_at: datetime


class StoredJob(msgspec.Struct, frozen=True, omit_defaults=True, gc=False):
    """A job as the document stores it."""

    id: str
    queue: str
    seq: int
    status: JobStatus
    created_at: datetime
    priority: int = 0
    payload: bytes | None = None
    payload_ref: str | None = None
    run_at: datetime | None = None
    attempts: int = 0
    max_attempts: int = 5
    key: str | None = None
    first_claimed_at: datetime | None = None
    claim: Claim | None = None
    last_error: str | None = None
    done_version: int | None = None
    #: when it completed, or when it died (a dead job has no ``done_version``)
    done_at: datetime | None = None
    #: False: no dedupe tombstone when the job leaves (its push is never re-sent).
    dedupe: bool = True
    #: the job's group: a queue's ``max_claimed_per_group`` caps its claimed jobs
    group: str | None = None
    #: the parents a ``waiting`` job still waits for (empty once it is queued)
    after: tuple[str, ...] = ()
    #: what a parent that ends dead or cancelled does to this job
    on_parent_failure: ParentFailure = "cancel"
    #: how long its record of finishing (and result) is kept (None: the broker's default)
    result_ttl_s: float | None = None
    #: What the payload object must hold, recorded at push: its size and the hex
    #: SHA-256 of its bytes.  A claim whose object does not match fails that job
    #: (see :mod:`osqueue.broker.objects.payloads`).  None in documents written before
    #: they were recorded (their objects are read unchecked) and for inline jobs.
    payload_ref_bytes: Annotated[int, msgspec.Meta(ge=0)] | None = None
    payload_ref_sha256: Annotated[str, msgspec.Meta(pattern="^[0-9a-f]{64}$")] | None = None

    @property
    def payload_size(self) -> int:
        """The payload's size: inline, or the object's as recorded at push (0 if unknown)."""
        if self.payload is not None:
            return len(self.payload)
        return self.payload_ref_bytes or 0


class BrokerPerf(msgspec.Struct, frozen=True, gc=False):
    """How the broker's commits went over its last ``window_s`` (what ``osqueue top``
    and the dashboard show without a metrics endpoint)."""

    window_s: float
    commits: int
    ops: int
    p50_ms: float
    p99_ms: float


class WorkerSeen(msgspec.Struct, frozen=True, omit_defaults=True, gc=False):
    """A worker the broker heard from recently (its last claim, waiting or not), so
    readers of the document see idle workers too (see
    :class:`osqueue.broker.observe.counters.RecentWorkers`)."""

    worker: str
    #: broker time of its last claim
    seen_at: datetime
    #: the queues it asked for
    queues: tuple[str, ...] = ()


class BrokerInfo(msgspec.Struct, frozen=True, omit_defaults=True):
    """The broker that owns the document, where to reach it, and its lease.

    ``lease_s`` is the lease's length, which is what decides: an observer (a
    standby) takes over once it has seen no new version for that long on its
    own monotonic clock; 0 marks a lease released by a graceful stop.
    ``lease_until`` is the writer's wall clock plus ``lease_s``, for display
    and for spotting a skewed clock, never for deciding (docs/failover.md)."""

    id: str
    address: str | None
    epoch: int
    lease_until: datetime
    lease_s: Annotated[float, msgspec.Meta(ge=0)]
    #: The broker's heartbeat timeout, so remote workers can pace their heartbeats.
    heartbeat_timeout_s: float | None = None
    #: The broker's recent commits (refreshed every few seconds while it serves).
    perf: BrokerPerf | None = None
    #: The workers that claimed recently, newest first (refreshed with ``perf``; bounded).
    workers: tuple[WorkerSeen, ...] = ()


class Counters(msgspec.Struct, frozen=True):
    pushed: int = 0
    completed: int = 0
    dead: int = 0
    failed: int = 0
    reclaimed: int = 0
    cancelled: int = 0
    #: records of finished jobs dropped before their TTL (the record's caps)
    finished_evicted: int = 0


class QueueTotals(msgspec.Struct, array_like=True, gc=False):
    """One queue's counters over its life (``[pushed, completed, failed, dead]`` in
    the document).  A queue is *known* while it has an entry: the first push or
    setting that names it adds one, and only ``set_queue(..., remove=True)``
    drops it, so a queue with no jobs at the moment stays listed with zeros.

    Mutable on purpose: a commit adds one to a field per op (the transition owns
    its document; :meth:`~osqueue.state.document.Document.copy` copies these)."""

    pushed: Annotated[int, msgspec.Meta(ge=0)] = 0
    completed: Annotated[int, msgspec.Meta(ge=0)] = 0
    failed: Annotated[int, msgspec.Meta(ge=0)] = 0
    dead: Annotated[int, msgspec.Meta(ge=0)] = 0


class SegmentRef(msgspec.Struct, frozen=True, omit_defaults=True, gc=False):
    """The document's reference to one segment object: a run of ready queued jobs
    of one stream (queue and priority), in seq order, that lives outside the
    document (see :mod:`osqueue.state.segments`).

    The object never changes; this reference does, as loads take its jobs back
    (``loaded``, ``next_seq``) and cancels strike them (``cancelled``).  The
    jobs not loaded yet are those at positions ``loaded..count-1`` of the
    object, the first of which has seq ``next_seq``.
    """

    #: the object's key (``segments/...``, unique per written object)
    key: str
    queue: str
    priority: int
    #: seqs of the object's first and last job
    first_seq: int
    last_seq: int
    #: jobs in the object
    count: int
    #: the object's size and the hex SHA-256 of its bytes, recorded at spill:
    #: every reader checks both (:func:`osqueue.state.segment_codec.check_segment`)
    size_bytes: int = msgspec.field(name="bytes")
    sha256: Annotated[str, msgspec.Meta(pattern="^[0-9a-f]{64}$")]
    #: seq of the first job not loaded yet: the stream's claims stop here
    next_seq: int
    #: creation time of the job at ``next_seq`` (for ``oldest_age_s``)
    next_created_at: datetime
    #: lexicographic bounds of the object's ids (to find a spilled id's segment)
    min_id: str
    max_id: str
    #: how many of the object's jobs, in order, are back in the document
    loaded: int = 0
    #: ids of jobs not loaded yet that were cancelled while spilled (skipped on load)
    cancelled: tuple[str, ...] = ()
    #: id -> idempotency key of the jobs not loaded yet that carry one
    keyed: dict[str, str] = {}
    #: payload objects of the jobs not loaded yet (the payload sweep keeps them)
    payload_refs: tuple[str, ...] = ()
    #: filters of the ids of its dedupe jobs, and the newest of their creation
    #: times: a retried push is recognised by them until ``dedupe_window_s`` after
    #: it (osqueue.state.dedupe_filter; a merge concatenates the filters)
    id_filter: tuple[str, ...] = ()
    dedupe_created: datetime | None = None

    @property
    def stream(self) -> tuple[str, int]:
        return (self.queue, self.priority)

    @property
    def remaining(self) -> int:
        """Jobs still in the object that are live (not loaded, not cancelled)."""
        return self.count - self.loaded - len(self.cancelled)


class SetAsideRef(msgspec.Struct, frozen=True, gc=False):
    """A segment reference set aside: its object was missing or did not match
    ``ref`` (size, SHA-256, content), so the stream goes on without it.  Its jobs
    are neither lost nor claimable until ``osqueue segments readmit`` puts the
    reference back (their idempotency keys and payload objects stay held)."""

    ref: SegmentRef
    #: what was wrong with the object, as the broker found it
    reason: str
    #: broker time of the set-aside
    at: datetime


class DelayedRef(msgspec.Struct, frozen=True, omit_defaults=True, gc=False):
    """The document's reference to one object of delayed jobs (``delayed/...``):
    queued jobs of one queue due in one window of ``delay_window_s``, sorted by
    ``(run_at, seq)``, loaded back ahead of their time (see
    :mod:`osqueue.state.cold_delayed`).  Like :class:`SegmentRef`, the object never
    changes; loads advance ``loaded``/``next_run_at``, cancels strike ids."""

    #: the object's key (``delayed/<queue>/<window start>=<unique>.jsonl``)
    key: str
    queue: str
    #: the start of the due-time window the object's jobs fall in
    window_at: datetime
    #: the run_at of its first and last job
    first_run_at: datetime
    last_run_at: datetime
    #: jobs in the object
    count: int
    #: the object's size and hex SHA-256, recorded at spill and checked by every reader
    size_bytes: int = msgspec.field(name="bytes")
    sha256: Annotated[str, msgspec.Meta(pattern="^[0-9a-f]{64}$")]
    #: the run_at of the first job not loaded yet: the load is due a lead before it
    next_run_at: datetime
    #: lexicographic bounds of the object's ids (to find a spilled id's object)
    min_id: str
    max_id: str
    #: bounds of the object's seqs and priorities: a listing in claim order
    #: ((priority, seq) per queue) reads only the objects its page reaches
    min_seq: int
    max_seq: int
    min_priority: int = 0
    max_priority: int = 0
    #: how many of the object's jobs, in order, are back in the document
    loaded: int = 0
    #: ids of jobs not loaded yet cancelled while spilled (skipped on load)
    cancelled: tuple[str, ...] = ()
    #: id -> idempotency key of the jobs not loaded yet that carry one
    keyed: dict[str, str] = {}
    #: payload objects of the jobs not loaded yet (the payload sweep keeps them)
    payload_refs: tuple[str, ...] = ()
    #: the filter of its dedupe jobs' ids and the newest of their creation times,
    #: as a :class:`SegmentRef` has them (osqueue.state.dedupe_filter): no tombstones
    id_filter: tuple[str, ...] = ()
    dedupe_created: datetime | None = None

    @property
    def remaining(self) -> int:
        """Jobs still in the object that are live (not loaded, not cancelled)."""
        return self.count - self.loaded - len(self.cancelled)


class DelayedAside(msgspec.Struct, frozen=True, gc=False):
    """A delayed object's reference set aside (its object missing or failing its
    check): its jobs are neither lost nor claimable until a readmit, their keys
    and payload objects stay held (as :class:`SetAsideRef` for segments)."""

    ref: DelayedRef
    reason: str
    at: datetime


class QueueSection(msgspec.Struct, frozen=True, omit_defaults=True):
    """What the document keeps per queue: its segment references, and
    the ones set aside."""

    segments: list[SegmentRef] = []
    set_aside: list[SetAsideRef] = []


class StoredSettings(msgspec.Struct, frozen=True, omit_defaults=True, gc=False):
    """One queue's settings (see :mod:`osqueue.state.limits`): checked at
    claim time on the broker's clock.  ``None`` is no limit."""

    #: a paused queue is not claimable (pushes still land)
    paused: bool = False
    #: the token bucket's refill rate (claims per second)
    rate_per_s: float | None = None
    #: the bucket's capacity (None with a rate: one second's worth, at least 1)
    burst: int | None = None
    #: at most this many of the queue's jobs claimed at once
    max_claimed: int | None = None
    #: at most this many jobs of one group claimed at once
    max_claimed_per_group: int | None = None
    #: how long the queue's finished jobs keep their answers unless their push
    #: says (None: the broker's; :func:`osqueue.state.results.result_ttl`)
    result_ttl_s: float | None = None
    #: the bucket's level at ``tokens_at`` (None: full)
    tokens: float | None = None
    tokens_at: datetime | None = None


class Schedule(msgspec.Struct, frozen=True, omit_defaults=True, gc=False):
    """A periodic job (see :mod:`osqueue.state.schedules`).

    Exactly one of ``cron`` and ``every_s`` is set.  ``next_at`` is the next
    tick to fire; the commit that fires it pushes the tick's job and moves
    ``next_at`` on, so each tick is recorded and pushed by one write."""

    name: str
    queue: str
    next_at: datetime
    created_at: datetime
    cron: str | None = None
    #: the time zone ``cron`` is read in (IANA name; None: UTC)
    tz: str | None = None
    every_s: float | None = None
    payload: bytes = b""
    priority: int = 0
    max_attempts: int = 5
    catch_up: CatchUp = "once"
    #: the last tick recorded (fired or skipped)
    last_at: datetime | None = None
    #: the job the last fired tick pushed
    last_job: str | None = None
    #: why the last tick pushed no job (skipped, paused, the document full)
    last_note: str | None = None
    #: paused: its ticks come due and are recorded as skipped, no job pushed
    paused: bool = False


class Header(msgspec.Struct, frozen=True, omit_defaults=True):
    """Everything in the document but the jobs (encoded once per commit)."""

    format: int
    version: int
    broker: BrokerInfo | None
    next_token: int
    next_seq: int
    archived_through: int
    stats: Counters
    #: this document's incarnation (:func:`new_queue_id`): part of every archive key
    queue_id: str | None = None
    #: one sample per minute for the last hour (see :mod:`osqueue.state.history`)
    history: tuple[HistorySample, ...] = ()
    #: queue -> its settings (pause, rate, caps)
    queue_settings: dict[str, StoredSettings] = {}
    #: broker time of the last push that named parents
    dependencies_at: datetime | None = None
    #: the known queues and their counters (:class:`QueueTotals`)
    queue_totals: dict[str, QueueTotals] = {}


class WireDocument(msgspec.Struct, frozen=True):
    """The document exactly as it is stored; used for decoding."""

    format: int
    version: int
    broker: BrokerInfo | None
    next_token: int
    next_seq: int
    archived_through: int
    stats: Counters
    jobs: list[StoredJob]
    #: this document's incarnation (None only in a document written before it was
    #: recorded: the broker assigns one on its first write)
    queue_id: str | None = None
    #: the dedupe tombstones: second (``YYYY-MM-DDTHH:MM:SSZ``) -> ids
    tombstones: dict[str, list[str]] = {}
    #: one sample per minute for the last hour
    history: tuple[HistorySample, ...] = ()
    #: the per-queue sections (segment references)
    queues: dict[str, QueueSection] = {}
    #: queue -> its dead segments, in the order their jobs died (:mod:`osqueue.state.cold_dead`)
    dead: dict[str, list[DeadRef]] = {}
    #: queue -> its settings
    queue_settings: dict[str, StoredSettings] = {}
    #: the periodic jobs (:mod:`osqueue.state.schedules`)
    schedules: list[Schedule] = []
    dependencies_at: datetime | None = None
    #: the record of finished jobs
    finished: list[FinishedJob] = []
    #: the objects of waiting children (format 4; :mod:`osqueue.state.waiting_refs`)
    waiting: list[WaitingRef] = []
    #: the sealed objects of the record of finished jobs (:mod:`osqueue.state.finished_objects`)
    finished_objects: list[FinishedRef] = []
    #: the known queues and their counters
    queue_totals: dict[str, QueueTotals] = {}
    #: references to objects of delayed jobs (:mod:`osqueue.state.cold_delayed`)
    delayed: list[DelayedRef] = []
    #: and those set aside
    delayed_aside: list[DelayedAside] = []
    #: dead segments set aside (object missing or broken; :mod:`osqueue.state.dead_letters`)
    dead_aside: list[DeadAside] = []
    #: objects of waiting children set aside (:mod:`osqueue.state.waiting_refs`)
    waiting_aside: list[WaitingAside] = []
