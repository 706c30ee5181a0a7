"""Failover: run a call until it succeeds, following the broker, until its deadline.

Every call of the remote client goes through :class:`Failover`.  An attempt
that fails is classified (:mod:`~osqueue.client.remote.failures`): a broker
that names its successor is followed at once; a lost connection, a broker
that is not (or no longer) the owner, or an unreadable document makes the
client re-read the document; a busy broker is asked again later.  Between
tries the client waits ``RemoteConfig.backoff`` (capped exponential, with
jitter), and past the call's deadline (``timeout_s`` from its start, plus a
claim's own wait) it raises :class:`~osqueue.errors.BrokerUnavailable` with
the last error as its cause.

A call still open on a channel the client has dropped (another call on it
failed over) is left ``rpc_timeout_s`` to finish; past that gRPC cancels it,
which surfaces as :class:`asyncio.CancelledError` in a task nobody cancelled.
A long poll outlives that grace when its wait is longer (its attempt may last
``rpc_timeout_s`` plus the wait).  Such an attempt is a lost answer, retried on
the next channel like a cut connection (:func:`cut_off`); a cancellation of the
caller's own task still propagates.

Deadlines and waits are read from the injected :class:`~osqueue.clock.Clock`,
so a test drives them with a :class:`~osqueue.clock.ManualClock`.
"""

from __future__ import annotations

import asyncio
import functools
import logging
from collections.abc import AsyncGenerator, AsyncIterator, Awaitable, Callable, Sequence
from typing import Protocol, TypeVar

import grpc

from osqueue.client.remote.config import RemoteConfig
from osqueue.client.remote.connection import Conn, Connection
from osqueue.client.remote.failures import (
    Action,
    BatchRun,
    Failure,
    ItemOutcome,
    classify,
    failure_of_status,
)
from osqueue.clock import Clock
from osqueue.errors import BrokerUnavailable, OsqueueError, ShuttingDown
from osqueue.wire._pb import queue_pb2 as pb

log = logging.getLogger(__name__)

R = TypeVar("R")
R_co = TypeVar("R_co", covariant=True)
I = TypeVar("I")  # noqa: E741 (an item of a batch)

#: One attempt: given the connection and the call's deadline, its result.
Attempt = Callable[[Conn, float], Awaitable[R]]
#: Sends one batch's items on a connection within a timeout; one Status per item.
SendItems = Callable[[Conn, list[I], float], Awaitable[Sequence[pb.Status]]]


class StreamCall(Protocol[R_co]):
    """An open server stream (a ``grpc.aio.UnaryStreamCall``): its messages, and a way out."""

    def __aiter__(self) -> AsyncIterator[R_co]: ...

    def cancel(self) -> bool: ...


def caller_cancelled() -> bool:
    """Whether the running task is being cancelled (by its caller, a timeout, a stop)."""
    task = asyncio.current_task()
    return task is None or task.cancelling() > 0


def cut_off(conn: Conn) -> Failure:
    """An attempt on ``conn`` that gRPC cancelled by closing its channel (the
    caller's task was not cancelled): its answer is lost; find the broker again."""
    error = BrokerUnavailable(f"broker at {conn.address}: the call was cut off (channel closed)")
    return Failure(Action.REDISCOVER, error, unknown=True)


class Failover:
    """Retries attempts over :class:`Connection`, with deadlines and backoff from ``clock``."""

    def __init__(self, connection: Connection, config: RemoteConfig, clock: Clock, url: str):
        self.connection = connection
        self.config = config
        self.clock = clock
        self._url = url
        self._backoff = config.backoff
        #: since when (monotonic) attempts have failed with none answered, and the
        #: last error (None while the broker answers): how a worker tells that no
        #: broker is serving while its calls keep trying
        self.failing_since: float | None = None
        self.last_error: OsqueueError | None = None

    def deadline(self, extra_s: float = 0.0) -> float:
        """A new call's deadline (on the clock's monotonic time): ``timeout_s`` + ``extra_s``."""
        return self.clock.monotonic() + self.config.timeout_s + extra_s

    def attempt_timeout(self, deadline: float, extra_s: float = 0.0) -> float:
        """How long one attempt may take: ``rpc_timeout_s`` + ``extra_s``, within ``deadline``."""
        remaining = deadline - self.clock.monotonic()
        return max(0.001, min(self.config.rpc_timeout_s + extra_s, remaining))

    def check_open(self) -> None:
        """Raise ``ShuttingDown`` once the connection is closed (flushing batches may go on)."""
        if self.connection.closed:
            raise ShuttingDown("the client is closed")

    async def backoff(self, tries: int, deadline: float, why: OsqueueError) -> None:
        """Sleep before try ``tries + 1``; raise ``BrokerUnavailable`` past the deadline."""
        now = self.clock.monotonic()
        if self.failing_since is None:
            self.failing_since = now
        self.last_error = why
        if now >= deadline:
            raise BrokerUnavailable(
                f"no broker for {self._url} answered within "
                f"{self.config.timeout_s:g}s; last error: {why}"
            ) from why
        await self.clock.sleep(min(self._backoff.delay_s(tries), deadline - now))

    async def connect(self, deadline: float) -> Conn:
        """The connection, found again (with backoff until ``deadline``) if there is none."""
        conn = self.connection.current
        if conn is not None:
            return conn
        return await self.connection.ensure(functools.partial(self._wait_for_address, deadline))

    async def _wait_for_address(self, deadline: float, tries: int, why: OsqueueError) -> None:
        await self.backoff(tries, deadline, why)

    async def recover(self, conn: Conn, failure: Failure, tries: int, deadline: float) -> None:
        """Act on a failed attempt on ``conn``: follow, rediscover or just wait, as classified."""
        if failure.action is Action.FOLLOW and failure.address not in (None, conn.address):
            log.info(
                "following the broker to its new address",
                extra={"action": "follow", "old": conn.address, "new": failure.address},
            )
            self.connection.drop(conn, next_address=failure.address)
            if self.clock.monotonic() < deadline:
                return  # a fresh address: no need to wait
        elif failure.action in (Action.FOLLOW, Action.REDISCOVER):
            self.connection.drop(conn)
        await self.backoff(tries, deadline, failure.error)

    async def call(
        self,
        attempt: Attempt[R],
        *,
        deadline: float,
        on_unknown: Callable[[], None] | None = None,
    ) -> tuple[R, Conn]:
        """Run ``attempt(conn, deadline)`` until it succeeds, failing over as needed.

        ``on_unknown`` is called after an attempt whose answer was lost (it may
        have been applied)."""
        tries = 0
        while True:
            self.check_open()
            conn = await self.connect(deadline)
            try:
                answer = await attempt(conn, deadline), conn
                self.failing_since = None
                return answer
            except grpc.aio.AioRpcError as exc:
                failure = classify(exc, conn.address)
                if failure.action is Action.RAISE:
                    self.failing_since = None  # a broker answered (with an error)
                    raise failure.error from exc
            except asyncio.CancelledError:
                if caller_cancelled():
                    raise
                failure = cut_off(conn)
            if failure.unknown and on_unknown is not None:
                on_unknown()
            await self.recover(conn, failure, tries, deadline)
            tries += 1

    async def batch(self, items: list[I], send: SendItems[I]) -> list[ItemOutcome]:
        """Send ``items``; retry the ones the broker did not take (elsewhere or later)."""
        deadline = self.deadline()
        run = BatchRun(len(items))
        tries = 0
        while run.todo:
            sent = run.todo

            async def attempt(
                conn: Conn, deadline: float, sent: list[int] = sent
            ) -> Sequence[pb.Status]:
                return await send(conn, [items[i] for i in sent], self.attempt_timeout(deadline))

            try:
                statuses, conn = await self.call(
                    attempt, deadline=deadline, on_unknown=functools.partial(run.mark_unknown, sent)
                )
            except OsqueueError as exc:
                run.finish(sent, exc)
                break
            again = run.take(sent, statuses)
            if again is None:
                continue
            try:
                await self.recover(conn, failure_of_status(again), tries, deadline)
            except BrokerUnavailable as exc:
                run.finish(run.todo, exc)
                break
            tries += 1
        return run.results()

    async def stream(
        self,
        start: Callable[[Conn, float], StreamCall[R]],
        *,
        deadline: float,
    ) -> AsyncGenerator[R, None]:
        """Yield the messages of the server stream ``start(conn, deadline)`` opens.

        Fails over like :meth:`call` until the first message arrives; a stream
        cut after that simply ends (the next call finds the broker again).
        """
        tries = 0
        while True:
            self.check_open()
            conn = await self.connect(deadline)
            call = start(conn, deadline)
            received = False
            try:
                async for message in call:
                    received = True
                    self.failing_since = None
                    yield message
                self.failing_since = None  # answered (an empty stream too)
                return
            except grpc.aio.AioRpcError as exc:
                failure = classify(exc, conn.address)
                if failure.action is Action.RAISE:
                    self.failing_since = None  # a broker answered (with an error)
                    raise failure.error from exc
                if received:
                    if failure.action is not Action.BACKOFF:
                        self.connection.drop(conn)
                    return
            except asyncio.CancelledError:
                if caller_cancelled():
                    raise
                failure = cut_off(conn)
                if received:
                    return
            finally:
                call.cancel()
            await self.recover(conn, failure, tries, deadline)
            tries += 1
