"""The public types every layer shares: jobs, statistics and the client protocol.

``Broker.client()`` (in-process) and ``osqueue.connect(url)`` (gRPC) both return
an object satisfying :class:`QueueClient`; the worker runtime, typed queues,
the Spark data source and the CLI are written against this protocol only.

This module sits at the bottom of the layers (beside :mod:`osqueue.errors`):
the broker, the server and the clients all import it, and it imports nothing
of osqueue but the errors.  A push's options and their defaults are declared
once, here: :class:`NewJob` holds the defaults and :class:`PushOptions` names
the keyword arguments every ``push`` takes.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Literal, Protocol, Required, TypedDict, Unpack, runtime_checkable

import msgspec

from osqueue.errors import InvalidInput, OsqueueError

JobStatus = Literal["waiting", "queued", "claimed", "done", "dead"]
#: How a job ended: completed (``done``), dead-lettered, or cancelled.
FinishedStatus = Literal["done", "dead", "cancelled"]
#: How a result's bytes are to be read: as they are, as UTF-8 text, or as JSON.
ResultKind = Literal["bytes", "text", "json"]
RESULT_KINDS: tuple[ResultKind, ...] = ("bytes", "text", "json")
#: What a job does when a parent ends dead or cancelled: be cancelled too, or run.
ParentFailure = Literal["cancel", "run"]
#: What a schedule does with ticks missed while no broker served.
CatchUp = Literal["once", "skip"]

DEFAULT_QUEUE = "default"
DEFAULT_MAX_ATTEMPTS = 5


class NewJob(msgspec.Struct, frozen=True):
    """A job to push.  ``id`` is chosen by the client (a ULID) if not given,
    before the first send, so a retried push is applied once.

    The field defaults are the defaults of every ``push``."""

    payload: bytes
    queue: str = DEFAULT_QUEUE
    priority: int = 0
    delay_s: float = 0.0
    key: str | None = None
    max_attempts: int = DEFAULT_MAX_ATTEMPTS
    id: str | None = None
    #: the job's group: the queue's ``max_claimed_per_group`` caps its claimed jobs
    group: str | None = None
    #: parents: the job waits (status ``waiting``) until each of them completed
    after: tuple[str, ...] = ()
    #: what a parent that ends dead or cancelled does to this job
    on_parent_failure: ParentFailure = "cancel"
    #: How long the job's result (and how it finished) is kept after it finishes;
    #: None: its queue's ``result_ttl_s``, else the broker's, else a result given
    #: is kept an hour (docs/results.md).  0 keeps nothing.
    result_ttl_s: float | None = None


class JobOptions(TypedDict, total=False):
    """A push's options but its queue (what a queue-bound push takes, such as
    :meth:`osqueue.TypedQueue.push`); each defaults to the :class:`NewJob` field
    of the same name."""

    priority: int
    delay_s: float
    key: str | None
    max_attempts: int
    id: str | None
    group: str | None
    after: tuple[str, ...]
    on_parent_failure: ParentFailure
    result_ttl_s: float | None


class PushOptions(JobOptions, total=False):
    """The keyword arguments of ``push(payload, **options)``; each defaults to the
    :class:`NewJob` field of the same name."""

    queue: str


class ClaimOptions(TypedDict, total=False):
    """A claim's options: how many jobs at most (1), and how long to wait for one
    (0: answer at once).  Every ``claim`` takes them."""

    max_jobs: int
    wait_s: float


class DeadOptions(TypedDict, total=False):
    """Which dead jobs a retry or purge takes besides ``ids`` (no filter and no ids:
    all of them), and how it goes: ``progress(jobs, segments_left)`` after each
    dead segment, ``max_segments`` to stop after that many (call again to go on)."""

    queue: str | None
    error: str | None
    since: float | None
    until: float | None
    progress: Callable[[int, int], None] | None
    max_segments: int | None


class ScheduleSpec(TypedDict, total=False):
    """The keyword arguments of ``schedule(name, **spec)``; each defaults to the
    :class:`osqueue.state.PutSchedule` field of the same name."""

    queue: Required[str]
    payload: bytes
    cron: str | None
    every_s: float | None
    tz: str | None
    priority: int
    max_attempts: int
    catch_up: CatchUp
    paused: bool


class SettingsChange(TypedDict, total=False):
    """The settings ``set_queue(queue, **change)`` changes: None (or left out)
    leaves one as it is, 0 removes a limit."""

    rate_per_s: float | None
    burst: int | None
    max_claimed: int | None
    max_claimed_per_group: int | None
    paused: bool | None
    result_ttl_s: float | None


class Job(msgspec.Struct, frozen=True, gc=False):
    """A claimed job, as a worker sees it.  ``token`` fences every later call."""

    id: str
    queue: str
    payload: bytes
    attempts: int
    max_attempts: int
    token: int
    priority: int = 0
    key: str | None = None
    created_at: float = 0.0
    group: str | None = None


class EncodedResult(msgspec.Struct, frozen=True, gc=False):
    """A job's result as it is stored and sent: ``data`` and how to read it.

    :meth:`of` encodes a value: ``bytes`` (and ``bytearray``, ``memoryview``)
    are kept as they are (``kind="bytes"``), ``str`` as UTF-8 text
    (``"text"``), anything else as JSON (``"json"``, with msgspec: dicts,
    lists, numbers, booleans, ``None`` inside containers, dataclasses, ...).
    :meth:`decode` gives the value back (JSON as plain Python values).
    """

    kind: ResultKind
    data: bytes

    @classmethod
    def of(cls, value: object) -> EncodedResult | None:
        """``value`` encoded; None for None (no result).  An encoded result is
        returned as it is.  A value JSON cannot hold is ``InvalidInput`` naming
        ``result``."""
        if value is None:
            return None
        if isinstance(value, EncodedResult):
            return value
        if isinstance(value, bytes):
            return cls("bytes", value)
        if isinstance(value, bytearray | memoryview):
            return cls("bytes", bytes(value))
        try:
            if isinstance(value, str):
                return cls("text", value.encode("utf-8"))
            return cls("json", msgspec.json.encode(value))
        except (TypeError, ValueError, OverflowError) as exc:  # UnicodeError is a ValueError
            raise InvalidInput(
                f"{type(value).__name__} is not bytes, str or JSON-serialisable: {exc}",
                field="result",
            ) from exc

    def decode(self) -> object:
        """The value: bytes, str, or the JSON value."""
        if self.kind == "bytes":
            return self.data
        if self.kind == "text":
            return self.data.decode("utf-8")
        return msgspec.json.decode(self.data)


class JobResult(msgspec.Struct, frozen=True, gc=False):
    """How a job finished, as :meth:`QueueClient.result` answers.

    ``status`` is ``"done"`` (completed; ``value`` is what the handler
    returned, None if nothing), ``"dead"`` (``error`` is its last error) or
    ``"cancelled"``.  A long poll whose wait ran out before the job finished
    answers the job's live status instead (``"queued"``, ``"claimed"``):
    :attr:`finished` is then False and ``finished_at`` None.
    """

    status: str
    value: object = None
    error: str | None = None
    attempts: int = 0
    #: broker time the job finished, seconds since the Unix epoch
    finished_at: float | None = None

    @property
    def finished(self) -> bool:
        return self.status in ("done", "dead", "cancelled")


@dataclass(frozen=True, slots=True)
class QueueStats:
    #: queued jobs, those in segments included
    depth: int
    claimed: int
    dead: int
    delayed: int
    oldest_age_s: float | None
    #: queued jobs that sit in segment objects (deep backlogs), out of ``depth``
    spilled: int = 0
    #: jobs waiting for their parents (not in ``depth``: not claimable yet)
    waiting: int = 0
    #: the queue is paused (nothing of it is claimed)
    paused: bool = False
    #: live jobs in segments set aside (their object was missing or failed its
    #: check): not in ``depth``, not claimable until ``osqueue segments readmit``
    set_aside: int = 0
    #: the segments set aside that hold them
    set_aside_segments: int = 0
    #: jobs pushed, completed, failed (attempts) and dead (jobs that ran out of
    #: attempts) over the queue's life, carried across failovers
    pushed_total: int = 0
    completed_total: int = 0
    failed_total: int = 0
    dead_total: int = 0


@dataclass(frozen=True, slots=True)
class Stats:
    """A snapshot of the queue document, as of ``version``."""

    version: int
    queues: dict[str, QueueStats] = field(default_factory=dict)
    pushed: int = 0
    completed: int = 0
    dead: int = 0
    claimed: int = 0
    broker_id: str | None = None
    broker_address: str | None = None
    broker_epoch: int = 0
    lease_until: float | None = None
    #: the document's encoded size: what is written, and what counts against
    #: ``max_document_bytes``
    document_bytes: int = 0
    #: ids remembered for ``dedupe_window_s`` after their jobs left
    tombstones: int = 0
    #: jobs the record of finished jobs holds (with their results)
    finished: int = 0
    #: records of finished jobs dropped before their TTL to stay under the caps
    finished_evicted: int = 0

    @property
    def depth(self) -> int:
        return sum(q.depth for q in self.queues.values())


@dataclass(frozen=True, slots=True)
class QueueSettings:
    """A queue's settings (``set_queue``); ``None`` is no limit."""

    queue: str
    paused: bool = False
    rate_per_s: float | None = None
    #: the rate limit's bucket: claims allowed at once after a quiet spell
    burst: int | None = None
    max_claimed: int | None = None
    max_claimed_per_group: int | None = None
    #: how long the queue's finished jobs keep their answers unless their push
    #: says (None: the broker's; see docs/results.md)
    result_ttl_s: float | None = None


@dataclass(frozen=True, slots=True)
class ScheduleInfo:
    """A periodic job as the document holds it (``schedules()``); times are Unix seconds."""

    name: str
    queue: str
    cron: str | None
    tz: str | None
    every_s: float | None
    payload: bytes
    priority: int
    max_attempts: int
    catch_up: CatchUp
    next_run_at: float
    last_run_at: float | None = None
    last_job_id: str | None = None
    #: why the last tick pushed no job (skipped, paused, or the document was full)
    note: str | None = None
    #: paused: its ticks are skipped (no job) until it is put back with paused=False
    paused: bool = False


@runtime_checkable
class QueueClient(Protocol):
    """What every client offers (the in-process one, the remote one, and one of
    your own given to a :class:`~osqueue.Worker`): ``complete_and_claim`` too,
    since a worker's next claim carries the completions of its last jobs."""

    async def push(self, payload: bytes, **options: Unpack[PushOptions]) -> str:
        """Push one job; returns its id once the write that holds it is durable.
        ``options`` are :class:`PushOptions` (queue, priority, delay_s, key,
        max_attempts, id)."""
        ...

    async def push_many(self, jobs: Sequence[NewJob]) -> list[str]: ...

    async def claim(
        self, worker: str, queues: Sequence[str] = ("default",), **options: Unpack[ClaimOptions]
    ) -> list[Job]:
        """Claim up to ``max_jobs`` ready jobs of ``queues`` (in order), waiting up
        to ``wait_s`` for one (:class:`ClaimOptions`)."""
        ...

    async def heartbeat(self, job: Job) -> None: ...

    async def complete(self, job: Job, *, result: object = None) -> None:
        """Mark ``job`` done.  ``result`` (bytes, str, or anything JSON-serialisable;
        see :class:`EncodedResult`) is kept as its result for its ``result_ttl_s``
        (an hour when none is set; docs/results.md)."""
        ...

    async def fail(
        self, job: Job, *, error: str = "", retry_after_s: float | None = None
    ) -> None: ...

    async def release(self, job: Job) -> None:
        """Give a claimed job back untouched (no attempt counted); used on shutdown."""
        ...

    async def complete_and_claim(
        self,
        jobs: Sequence[Job],
        worker: str,
        queues: Sequence[str] = ("default",),
        *,
        max_jobs: int = 1,
        results: Sequence[object] | None = None,
    ) -> tuple[list[OsqueueError | None], list[Job]]:
        """Complete ``jobs``, then claim up to ``max_jobs`` (no wait), in one commit.

        ``results`` (one per job, None for none) are the jobs' results, as
        :meth:`QueueClient.complete` takes them.  Returns one error (or
        ``None``) per completed job, in order, and the jobs claimed.  Raises
        only when the call as a whole failed (bad claim arguments, checked
        before anything is sent, or the broker refusing every op of it)."""
        ...

    async def cancel(self, job_id: str) -> None: ...

    async def result(self, job_id: str, *, wait_s: float = 0.0) -> JobResult:
        """How job ``job_id`` finished, waiting up to ``wait_s`` for it to finish.

        Answered by the commit that finishes the job.  Raises
        :class:`~osqueue.errors.JobNotFound` for an id the queue does not know
        (never pushed, finished longer than its ``result_ttl_s`` ago, or finished
        keeping no entry: without a result and no TTL set, or ``result_ttl_s`` 0); a
        wait that runs out first answers the job's live status."""
        ...

    async def stats(self) -> Stats: ...

    async def close(self) -> None: ...


@runtime_checkable
class Scheduling(Protocol):
    """Periodic jobs and queue settings; both clients of this package offer them."""

    async def schedule(self, name: str, **spec: Unpack[ScheduleSpec]) -> ScheduleInfo:
        """Push a job to ``queue`` on every tick (``spec``: :class:`ScheduleSpec`):
        ``cron`` (five fields, UTC or the ``tz`` named) or ``every_s`` (on the
        multiples of ``every_s`` since the epoch), exactly one of them.
        Re-scheduling a name replaces it.  Each tick yields exactly one job,
        across crashes and failovers; ticks missed while no broker served yield
        one job (``catch_up="once"``) or none (``"skip"``).  A ``paused`` schedule
        pushes no job: its ticks are skipped, and put back with ``paused=False`` it
        fires from its next tick on (never the ticks missed while paused)."""
        ...

    async def unschedule(self, name: str) -> bool:
        """Remove a schedule; False if there was none of that name."""
        ...

    async def schedules(self) -> list[ScheduleInfo]:
        """Every schedule, by name."""
        ...

    async def set_queue(
        self, queue: str, *, remove: bool = False, **change: Unpack[SettingsChange]
    ) -> QueueSettings:
        """Change a queue's settings: ``None`` leaves one as it is, ``0`` removes a
        limit.  Enforced at claim time on the broker's clock; returns them all.
        ``result_ttl_s`` is how long the queue's finished jobs keep their answers
        unless their push says (0: the broker's setting applies again).

        ``remove=True`` (with no setting) forgets the queue instead: a queue is
        listed (stats, metrics, dashboard) from its first push or setting until
        it is removed; refused (``InvalidInput``) while it holds live jobs or
        schedules."""
        ...
