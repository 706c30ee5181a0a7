"""The blocking twin of the clients, for scripts and Spark executors: derived, not copied.

Every call runs on a private event loop thread (:class:`LoopThread`), so one
connection and one set of batchers serve all the threads of the process:
concurrent pushes from several threads still coalesce into batch RPCs.

How the twin is derived.  :class:`SyncClientProtocol` is the one source of
every method the twin has: the :class:`~osqueue.api.QueueClient` protocol
(``complete_and_claim`` included), plus the calls both of
this package's clients also offer (``push_results``, ``retry_dead``,
``purge_dead``, and :class:`~osqueue.api.Scheduling`: ``schedule``,
``unschedule``, ``schedules``, ``set_queue``).  Each method of :class:`SyncClient` is one line,
``name = blocking(SyncClientProtocol.name)``: :func:`blocking` turns the
async method into a function that runs the wrapped client's method of that
name on the loop thread and returns its result.  It is typed with a
``ParamSpec``, so mypy --strict checks every sync call against the async
signature (``Unpack[PushOptions]`` keyword arguments included), and its
``functools.wraps`` keeps the name, docstring and signature for ``help()``.
Both clients are checked against the protocol where :func:`connect_sync` hands
its client to :class:`SyncClient`.  A method is still named once in the
class body, not generated in a loop, because mypy cannot see attributes set by
``setattr``; a unit test checks that the table covers the whole protocol.
Only ``close`` (which also stops the loop thread) is written by hand.
"""

from __future__ import annotations

import functools
from collections.abc import Callable, Coroutine, Sequence
from types import TracebackType
from typing import Any, Concatenate, ParamSpec, Protocol, TypeVar, Unpack

from osqueue.api import DeadOptions, NewJob, QueueClient, Scheduling
from osqueue.client.connect import Connecting, connect
from osqueue.client.loop_thread import LoopThread
from osqueue.client.remote.config import RemoteConfig
from osqueue.errors import OsqueueError, ShuttingDown

P = ParamSpec("P")
R = TypeVar("R")


class SyncClientProtocol(QueueClient, Scheduling, Protocol):
    """What a client must offer to get a blocking twin (both clients of this package do)."""

    async def push_results(self, jobs: Sequence[NewJob]) -> list[str | OsqueueError]:
        """Push a batch; one result per job: its id, or the error that job got."""
        ...

    async def retry_dead(
        self, ids: Sequence[str] | None = None, **options: Unpack[DeadOptions]
    ) -> int:
        """Put dead jobs back in their queues: ``ids``, or those the filters admit
        (:class:`~osqueue.api.DeadOptions`; none: all of them).  A ``progress``
        callback runs on the client's loop thread."""
        ...

    async def purge_dead(
        self, ids: Sequence[str] | None = None, **options: Unpack[DeadOptions]
    ) -> int:
        """Delete dead jobs: ``ids``, or those the filters admit (none: all)."""
        ...


def blocking(
    method: Callable[Concatenate[Any, P], Coroutine[Any, Any, R]],
) -> Callable[Concatenate[SyncClient, P], R]:
    """The blocking twin of ``method``: the same call on the client, run on the loop thread."""
    name = method.__name__

    @functools.wraps(method)
    def call(self: SyncClient, /, *args: P.args, **kwargs: P.kwargs) -> R:
        async_method: Callable[P, Coroutine[Any, Any, R]] = getattr(self.client, name)
        return self.loop.run(async_method(*args, **kwargs))

    call.__module__ = __name__  # a method of SyncClient, documented by the protocol
    call.__qualname__ = f"SyncClient.{name}"
    return call


class SyncClient:
    """The blocking twin of :class:`~osqueue.client.remote.RemoteClient` (or of an
    embedded broker's client): the same methods, each waiting for its result."""

    def __init__(self, client: SyncClientProtocol, loop: LoopThread) -> None:
        self.client = client
        self.loop = loop

    push = blocking(SyncClientProtocol.push)
    push_many = blocking(SyncClientProtocol.push_many)
    push_results = blocking(SyncClientProtocol.push_results)
    claim = blocking(SyncClientProtocol.claim)
    complete_and_claim = blocking(SyncClientProtocol.complete_and_claim)
    heartbeat = blocking(SyncClientProtocol.heartbeat)
    complete = blocking(SyncClientProtocol.complete)
    fail = blocking(SyncClientProtocol.fail)
    release = blocking(SyncClientProtocol.release)
    cancel = blocking(SyncClientProtocol.cancel)
    result = blocking(SyncClientProtocol.result)
    stats = blocking(SyncClientProtocol.stats)
    retry_dead = blocking(SyncClientProtocol.retry_dead)
    purge_dead = blocking(SyncClientProtocol.purge_dead)
    schedule = blocking(SyncClientProtocol.schedule)
    unschedule = blocking(SyncClientProtocol.unschedule)
    schedules = blocking(SyncClientProtocol.schedules)
    set_queue = blocking(SyncClientProtocol.set_queue)

    def close(self) -> None:
        """Close the client, then stop its loop thread (idempotent)."""
        try:
            self.loop.run(self.client.close())
        except ShuttingDown:
            pass  # the loop is already closed
        finally:
            self.loop.close()

    def __enter__(self) -> SyncClient:
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.close()


def connect_sync(
    url: str,
    *,
    token: str | None = None,
    tls_ca: str | None = None,
    embedded: bool = False,
    timeout_s: float | None = None,
    config: RemoteConfig | None = None,
    broker_config: Any = None,
) -> SyncClient:
    """The blocking twin of :func:`~osqueue.client.connect.connect` (same arguments)."""
    loop = LoopThread()
    try:
        client = loop.run(
            _opened(
                connect(
                    url,
                    token=token,
                    tls_ca=tls_ca,
                    embedded=embedded,
                    timeout_s=timeout_s,
                    config=config,
                    broker_config=broker_config,
                )
            )
        )
    except BaseException:
        loop.close()
        raise
    return SyncClient(client, loop)


async def _opened(connecting: Connecting) -> SyncClientProtocol:
    return await connecting
