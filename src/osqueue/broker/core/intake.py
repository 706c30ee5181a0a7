"""The ops waiting for the broker's next commit, and the commit loop's wake-up."""

from __future__ import annotations

import asyncio
from collections.abc import Sequence
from typing import TYPE_CHECKING, Protocol

from osqueue.broker.config import BrokerConfig
from osqueue.errors import InvalidInput, OsqueueError, ResourceExhausted
from osqueue.state import Compact, Load, MarkArchived, Op, Result, SetAside, Spill
from osqueue.state.ops import (
    LoadDelayed,
    LoadWaiting,
    SealFinished,
    SpillDead,
    SpillDelayed,
    SpillWaiting,
)

if TYPE_CHECKING:
    from osqueue.broker.core.lifecycle import Lifecycle
    from osqueue.broker.observe.counters import BrokerCounters

#: The broker's own ops that make an idle commit loop write (archive marks wait
#: for the next commit).
_URGENT = (
    Spill,
    Load,
    SetAside,
    SpillWaiting,
    LoadWaiting,
    SealFinished,
    SpillDead,
    SpillDelayed,
    LoadDelayed,
    Compact,
)


class Answer(Protocol):
    """Where an op's result goes: an ``asyncio.Future``, or a slot of a batch."""

    def done(self) -> bool: ...

    def set_result(self, result: Result, /) -> None: ...


#: Ops waiting for a commit and where their results go, index for index.
Futures = list[Answer]


class _Batch:
    """The results of one :meth:`Intake.submit_many`: one future for the whole
    batch, resolved when its last op is answered (one future per op costs a
    large push a few microseconds a job in the event loop)."""

    __slots__ = ("future", "left", "results")

    def __init__(self, future: asyncio.Future[list[Result]], size: int) -> None:
        self.future = future
        self.left = size
        self.results: list[Result | None] = [None] * size


class _Slot:
    """One op's place in a :class:`_Batch` (an :class:`Answer`)."""

    __slots__ = ("_answered", "batch", "index")

    def __init__(self, batch: _Batch, index: int) -> None:
        self.batch = batch
        self.index = index
        self._answered = False

    def done(self) -> bool:
        return self._answered or self.batch.future.done()

    def set_result(self, result: Result, /) -> None:
        if self._answered:
            return
        self._answered = True
        batch = self.batch
        batch.results[self.index] = result
        batch.left -= 1
        if batch.left == 0 and not batch.future.done():
            batch.future.set_result(batch.results)  # type: ignore[arg-type]  # all set now


def answer_all(futures: Futures, exc: OsqueueError) -> None:
    """Answer every future not answered yet with ``exc``."""
    for fut in futures:
        if not fut.done():
            fut.set_result(exc)


class Intake:
    """The ops waiting for the next commit, and the commit loop's wake-up.

    Owns the pending ops and their callers' futures (index for index), the
    backpressure limit (``max_pending_ops``: beyond it an op is refused with
    ``ResourceExhausted``), the ops the broker adds itself (archive marks that
    ride along with the next commit; segment spills and loads, which also wake
    an idle commit loop: :meth:`add_internal`), and the future the idle commit loop parks
    on (:meth:`idle`): the first op to arrive wakes it.  The commit loop takes
    the oldest ``max_batch_ops`` at a time (:meth:`take_batch`).
    """

    def __init__(self, config: BrokerConfig, life: Lifecycle, counters: BrokerCounters) -> None:
        self._life = life
        self._counters = counters
        self._max_pending = config.max_pending_ops
        self._max_batch = config.max_batch_ops
        self.pending: list[Op] = []
        self.futures: Futures = []
        #: ops of the broker's own, for the next commit (their results go nowhere)
        self.internal: list[Op] = []
        #: one of :attr:`internal` wants a commit even if no caller's op does (the
        #: broker's own load or spill; read, never set, outside this class)
        self.urgent = False
        self._loop: asyncio.AbstractEventLoop | None = None
        #: the commit loop's wake-up while it idles (set by the first op to arrive)
        self._waker: asyncio.Future[None] | None = None

    def add_op(self, op: Op) -> asyncio.Future[Result]:
        """Add an op to the next commit; the future resolves once it is durable."""
        life = self._life
        if not life.serving:
            raise life.refusal()
        pending = self.pending
        if len(pending) >= self._max_pending:
            self._refused((op,))
            raise ResourceExhausted(
                f"{len(pending)} ops are waiting for the broker; back off and retry"
            )
        loop = self._loop
        if loop is None:
            loop = self._loop = asyncio.get_running_loop()
        fut: asyncio.Future[Result] = loop.create_future()
        pending.append(op)
        self.futures.append(fut)
        if self._waker is not None:
            self.wake()
        return fut

    async def submit_many(self, ops: Sequence[Op]) -> list[Result]:
        """Submit a batch: all of it or (raising before anything is queued) none of it."""
        self._life.check_open()
        if len(ops) > self._max_pending:
            raise InvalidInput(
                f"a batch of {len(ops)} ops is larger than max_pending_ops="
                f"{self._max_pending}; split it",
                field="ops",
            )
        if len(self.pending) + len(ops) > self._max_pending:
            self._refused(ops)
            raise ResourceExhausted(
                f"{len(self.pending)} ops are waiting for the broker and this batch has "
                f"{len(ops)}; back off and retry"
            )
        if not ops:
            return []
        life = self._life
        if not life.serving:
            raise life.refusal()
        loop = self._loop
        if loop is None:
            loop = self._loop = asyncio.get_running_loop()
        batch = _Batch(loop.create_future(), len(ops))
        self.pending.extend(ops)
        self.futures.extend(_Slot(batch, i) for i in range(len(ops)))
        if self._waker is not None:
            self.wake()
        return await batch.future

    def _refused(self, ops: Sequence[Op]) -> None:
        records = self._counters.records
        if records is not None:
            records.answered(ops, ResourceExhausted)

    def take_batch(self) -> tuple[list[Op], Futures]:
        """The next commit's ops and their futures: the oldest ``max_batch_ops``."""
        n = self._max_batch
        if len(self.pending) <= n:  # the whole backlog is one batch
            batch, futures = self.pending, self.futures
            self.pending, self.futures = [], []
        else:
            batch, futures = self.pending[:n], self.futures[:n]
            del self.pending[:n], self.futures[:n]
        return batch, futures

    def fail_pending(self, exc: OsqueueError) -> None:
        """Answer every pending op with ``exc`` and drop it (the broker stops)."""
        futures, self.futures = self.futures, []
        self.pending = []
        answer_all(futures, exc)

    def mark_archived(self, version: int) -> None:
        """The archive object of ``version`` is written: the next commit prunes its
        done jobs."""
        self.internal.append(MarkArchived((version,)))

    def add_internal(self, op: Op) -> None:
        """An op of the broker's own that wants a commit soon (a segment spill or
        load): it rides with the next commit, and an idle commit loop wakes for it."""
        self.internal.append(op)
        if type(op) in _URGENT:
            self.urgent = True
        self.wake()

    def take_internal(self) -> list[Op]:
        """The broker's own ops waiting, for the commit being made (none wait then)."""
        internal, self.internal = self.internal, []
        self.urgent = False
        return internal

    def holds(self, op: Op) -> bool:
        """``op`` (one of the broker's own) still waits for a commit."""
        return any(o is op for o in self.internal)

    def merge_marks(self) -> None:
        """Fold the archive marks waiting into one op (for the last commit)."""
        merged = tuple(
            v for op in self.internal if isinstance(op, MarkArchived) for v in op.versions
        )
        others: list[Op] = [op for op in self.internal if not isinstance(op, MarkArchived)]
        if merged:
            others.append(MarkArchived(merged))
        self.internal = others

    def wake(self) -> None:
        """Wake the commit loop if it idles."""
        waker, self._waker = self._waker, None
        if waker is not None and not waker.done():
            waker.set_result(None)

    async def idle(self) -> None:
        """Park the commit loop until :meth:`wake` (an op arrived, a timer fired, a
        parked claim or a stop wants it to look again)."""
        loop = self._loop or asyncio.get_running_loop()
        waker = self._waker = loop.create_future()
        try:
            await waker
        finally:
            self._waker = None
