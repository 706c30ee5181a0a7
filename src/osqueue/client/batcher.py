"""Client-side batching: many concurrent calls, one RPC.

Every call of a kind (push, complete, heartbeat...) made in the same event
loop turn, or while earlier batches of that kind are in flight, joins the next
batch.  Nothing waits on a timer: a lone call goes out at once, and under load
batches grow by themselves to what the broker absorbs per round trip (the same
group commit the broker does, one level up).
"""

from __future__ import annotations

import asyncio
import logging
from collections import deque
from collections.abc import Awaitable, Callable, Sequence
from typing import Generic, TypeVar

from osqueue.errors import InvalidInput, ShuttingDown

log = logging.getLogger(__name__)

T = TypeVar("T")
R = TypeVar("R")

#: Sends a batch; returns one outcome per item, in order: a result or the
#: exception that item got.
SendBatch = Callable[[list[T]], Awaitable[Sequence[R | BaseException]]]


class Batcher(Generic[T, R]):
    """Coalesces concurrent :meth:`submit` calls into batches for ``send``."""

    def __init__(
        self,
        send: SendBatch[T, R],
        *,
        name: str,
        max_items: int = 500,
        max_bytes: int = 4 * 1024 * 1024,
        size_of: Callable[[T], int] = lambda _: 0,
        max_in_flight: int = 4,
    ) -> None:
        if max_items < 1 or max_bytes < 1 or max_in_flight < 1:
            raise InvalidInput("max_items, max_bytes and max_in_flight must be >= 1", field=name)
        self.name = name
        self._send = send
        self._max_items = max_items
        self._max_bytes = max_bytes
        self._size_of = size_of
        self._max_in_flight = max_in_flight
        self._queue: deque[tuple[T, int, asyncio.Future[R]]] = deque()
        self._in_flight = 0
        self._scheduled = False
        self._closed = False
        self._tasks: set[asyncio.Task[None]] = set()
        #: Batches sent and items in them (for tests and benchmarks).
        self.batches = 0
        self.items = 0

    async def submit(self, item: T) -> R:
        """Send ``item`` in the next batch and return its result (or raise its error)."""
        return await self._enqueue(item)

    async def submit_many(self, items: Sequence[T]) -> list[R | BaseException]:
        """Send ``items`` (in as few batches as the bounds allow); one outcome each."""
        futures = [self._enqueue(item) for item in items]
        return list(await asyncio.gather(*futures, return_exceptions=True))

    def _enqueue(self, item: T) -> asyncio.Future[R]:
        if self._closed:
            raise ShuttingDown("the client is closed")
        loop = asyncio.get_running_loop()
        future: asyncio.Future[R] = loop.create_future()
        self._queue.append((item, self._size_of(item), future))
        if not self._scheduled:
            # Dispatch after this loop turn so calls made together go together.
            self._scheduled = True
            loop.call_soon(self._dispatch)
        return future

    def _take(self) -> list[tuple[T, asyncio.Future[R]]]:
        batch: list[tuple[T, asyncio.Future[R]]] = []
        size = 0
        while self._queue and len(batch) < self._max_items:
            item, item_size, future = self._queue[0]
            if batch and size + item_size > self._max_bytes:
                break
            self._queue.popleft()
            if future.done():  # its caller gave up before it was sent
                continue
            batch.append((item, future))
            size += item_size
        return batch

    def _dispatch(self) -> None:
        self._scheduled = False
        while self._queue and self._in_flight < self._max_in_flight:
            batch = self._take()
            if not batch:
                continue
            self._in_flight += 1
            task = asyncio.get_running_loop().create_task(
                self._run(batch), name=f"osqueue-batch-{self.name}"
            )
            self._tasks.add(task)
            task.add_done_callback(self._tasks.discard)

    async def _run(self, batch: list[tuple[T, asyncio.Future[R]]]) -> None:
        self.batches += 1
        self.items += len(batch)
        try:
            outcomes = await self._send([item for item, _ in batch])
            if len(outcomes) != len(batch):
                raise RuntimeError(f"{self.name}: {len(outcomes)} outcomes for {len(batch)} items")
            for (_, future), outcome in zip(batch, outcomes, strict=True):
                if future.done():
                    continue
                if isinstance(outcome, BaseException):
                    future.set_exception(outcome)
                else:
                    future.set_result(outcome)
        except asyncio.CancelledError:
            for _, future in batch:
                future.cancel()
            raise
        except BaseException as exc:
            for _, future in batch:
                if not future.done():
                    future.set_exception(exc)
        finally:
            self._in_flight -= 1
            if self._queue and not self._scheduled:
                self._dispatch()

    async def close(self) -> None:
        """Refuse new items; let batches already queued or in flight finish."""
        self._closed = True
        while self._tasks or self._queue:
            if self._queue and not self._scheduled:
                self._dispatch()
            if self._tasks:
                await asyncio.wait(set(self._tasks))
            elif self._queue:
                await asyncio.sleep(0)  # a dispatch is scheduled for this turn

    def cancel(self) -> None:
        """Stop at once: fail queued items and cancel batches in flight."""
        self._closed = True
        while self._queue:
            _, _, future = self._queue.popleft()
            if not future.done():
                future.set_exception(ShuttingDown("the client was closed before this was sent"))
        for task in self._tasks:
            task.cancel()
