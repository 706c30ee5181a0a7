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

from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Literal, Protocol, TypedDict, Unpack, runtime_checkable

import msgspec

from osqueue.errors import OsqueueError

JobStatus = Literal["queued", "claimed", "done", "dead"]

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


class JobOptions(TypedDict, total=False):
    """A push's options but its queue (what a queue-bound push takes, such as
    :meth:`osqueue.TypedQueue.push`); each defaults to the :class:`NewJob` field
    of the same name."""

    priority: int
    delay_s: float
    key: str | None
    max_attempts: int
    id: str | None


class PushOptions(JobOptions, total=False):
    """The keyword arguments of ``push(payload, **options)``; each defaults to the
    :class:`NewJob` field of the same name."""

    queue: str


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

    @property
    def depth(self) -> int:
        return sum(q.depth for q in self.queues.values())


@runtime_checkable
class QueueClient(Protocol):
    async def push(self, payload: bytes, **options: Unpack[PushOptions]) -> str:
        """Push one job; returns its id once the write that holds it is durable.
        ``options`` are :class:`PushOptions` (queue, priority, delay_s, key,
        max_attempts, id)."""
        ...

    async def push_many(self, jobs: Sequence[NewJob]) -> list[str]: ...

    async def claim(
        self,
        worker: str,
        queues: Sequence[str] = ("default",),
        *,
        max_jobs: int = 1,
        wait_s: float = 0.0,
    ) -> list[Job]: ...

    async def heartbeat(self, job: Job) -> None: ...

    async def complete(self, job: Job) -> None: ...

    async def fail(
        self, job: Job, *, error: str = "", retry_after_s: float | None = None
    ) -> None: ...

    async def release(self, job: Job) -> None:
        """Give a claimed job back untouched (no attempt counted); used on shutdown."""
        ...

    async def cancel(self, job_id: str) -> None: ...

    async def stats(self) -> Stats: ...

    async def close(self) -> None: ...


@runtime_checkable
class CompletesAndClaims(Protocol):
    """A client that can settle a worker's last jobs and claim its next in one commit.

    Both clients of this package can; the worker runtime uses it when the
    client it is given can, and separate calls otherwise.
    """

    async def complete_and_claim(
        self,
        jobs: Sequence[Job],
        worker: str,
        queues: Sequence[str] = ("default",),
        *,
        max_jobs: int = 1,
    ) -> tuple[list[OsqueueError | None], list[Job]]:
        """Complete ``jobs``, then claim up to ``max_jobs`` (no wait), in one commit.

        Returns one error (or ``None``) per completed job, in order, and the
        jobs claimed.  Raises only when the call as a whole failed (bad claim
        arguments, checked before anything is sent, or the broker refusing
        every op of it)."""
        ...
