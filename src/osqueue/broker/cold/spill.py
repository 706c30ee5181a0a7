"""The broker's spills: a deep stream's tail written to segment objects, then
referenced by the next commit (:class:`~osqueue.broker.cold.manager.SegmentManager`
plans them after each commit and settles them after the commit that took them).

A stream has one spill in flight at most.  Its objects are built from the
document's cached job encodings and stored whole (``put``, three tries), and
only then are its ``Spill`` ops added to the next commit, in seq order.  Their
keys stay in ``writing`` until that commit, so the orphan sweep leaves them
alone; a ``Spill`` that failed (its snapshot went stale) leaves an object no
reference names, deleted at once.  While objects are being written,
:attr:`SpillWriter.writing` is true and :meth:`SpillWriter.written` waits for
them (the commit loop's hold: ``spill_hold_bytes``).
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING

from osqueue.broker.cold.build import build_objects, put_object
from osqueue.broker.cold.sweep import SegmentCounters
from osqueue.broker.core.retry import StorageRetry
from osqueue.errors import OsqueueError, StorageError
from osqueue.ids import new_id
from osqueue.state import Document, Policy, Spill, SpillPlan, Stream, plan_spills
from osqueue.storage.port import Storage

if TYPE_CHECKING:
    from osqueue.broker.core.intake import Intake
    from osqueue.broker.core.lifecycle import Lifecycle
    from osqueue.broker.core.tasks import SideTasks

log = logging.getLogger(__name__)

#: most segments one spill of a stream writes (its whole tail, in a burst)
_SEGMENTS_PER_SPILL = 64


class SpillWriter:
    """The spills in flight: their objects written, their ops submitted and settled."""

    def __init__(
        self,
        storage: Storage,
        *,
        retry: StorageRetry,
        tasks: SideTasks,
        intake: Intake,
        life: Lifecycle,
        counters: SegmentCounters,
        writing: set[str],
        delete: Callable[[str], None],
        changed: Callable[[], None],
    ) -> None:
        self._storage = storage
        self._retry = retry
        self._tasks = tasks
        self._intake = intake
        self._life = life
        self._counters = counters
        #: objects written or being written whose Spill has not committed (or failed) yet
        self._keys = writing
        #: deletes an object no reference will name
        self._delete = delete
        #: called when a spill ends or gives up (the manager's quiet check)
        self._changed = changed
        #: stream -> its Spills once their objects are written (None while they are)
        self.in_flight: dict[Stream, list[Spill] | None] = {}
        #: told of each object written, with its job lines, before its Spill goes
        #: (the compactions keep small ones: :meth:`Compactor.wrote`)
        self.wrote: Callable[[str, bytes, Sequence[bytes]], None] | None = None
        #: set while no spill's objects are being written
        self._written = asyncio.Event()
        self._written.set()

    @property
    def busy(self) -> bool:
        """A spill is being written or waits for its commit."""
        return bool(self.in_flight)

    @property
    def writing(self) -> bool:
        """A spill's objects are being written (its ``Spill`` ops are not submitted yet)."""
        return not self._written.is_set()

    async def written(self) -> None:
        """Return once no spill's objects are being written (each has submitted its
        ``Spill`` ops, or given up)."""
        await self._written.wait()

    def _check_written(self) -> None:
        if any(ops is None for ops in self.in_flight.values()):
            self._written.clear()
        else:
            self._written.set()

    # ------------------------------------------------------------------ after a commit

    def settle(self, doc: Document) -> None:
        """The spills a commit took: did they apply?"""
        for stream, spills in list(self.in_flight.items()):
            if spills is None or self._intake.holds(spills[0]):
                continue  # written and submitted together: all in one commit
            del self.in_flight[stream]
            for spill in spills:
                self._settle_one(doc, spill)

    def _settle_one(self, doc: Document, spill: Spill) -> None:
        key = spill.ref.key
        self._keys.discard(key)
        if doc.segments.find(key) is None:  # it failed alone: nothing names the object
            self._counters.failed_spills += 1
            log.info(
                "a spill did not apply (its jobs changed); deleting its object",
                extra={"action": "spill", "key": key},
            )
            self._counters.deleted += 1
            self._delete(key)
        else:
            self._counters.spills += 1
            self._counters.spilled_jobs += spill.ref.count

    def plan(self, doc: Document, policy: Policy, configured: Policy | None = None) -> None:
        """Start a spill of every stream whose tail passed ``spill_above_jobs`` (but
        those with a spill in flight).  ``policy`` holds the claim demand's sizes;
        a queue with no job claimed is planned with the ``configured`` ones (the
        head it keeps in the document is the configured one, not a demand raised
        by other queues' claims).  Nothing to do below the configured
        ``spill_above_jobs`` queued jobs in all (one check)."""
        base = policy if configured is None else configured
        if (above := base.spill_above_jobs) is None or doc.index.queued < above:
            return
        busy = {queue for queue, _ in self.in_flight}
        rounds = [(policy, busy)]
        if base.head_jobs != policy.head_jobs:
            counts = doc.index.counts
            idle = {q for q in doc.index.ready if (q, "claimed") not in counts}
            rounds = [(policy, busy | idle), (base, busy | (doc.index.ready.keys() - idle))]
        streams: dict[Stream, list[SpillPlan]] = {}
        for each, exclude in rounds:
            for plan in plan_spills(doc, each, exclude=exclude, segments=_SEGMENTS_PER_SPILL):
                streams.setdefault((plan.queue, plan.priority), []).append(plan)
        for stream, plans in streams.items():
            self.in_flight[stream] = None
            self._tasks.spawn(self._spill(stream, plans), "osqueue-segment-spill")
        if streams:
            self._written.clear()

    # ------------------------------------------------------------------ the writes

    async def _spill(self, stream: Stream, plans: list[SpillPlan]) -> None:
        """Write the objects of ``plans`` (one stream's tail, in seq order), then
        submit their Spills, in that order, to the next commit."""
        try:
            await self._write(stream, plans)
        finally:
            self._check_written()

    async def _write(self, stream: Stream, plans: list[SpillPlan]) -> None:
        uniques = [new_id() for _ in plans]

        def build() -> list[tuple[Spill, bytes]]:
            return [plan.build(unique) for plan, unique in zip(plans, uniques, strict=True)]

        try:
            built = await build_objects(sum(len(plan.jobs) for plan in plans), build)
        except OsqueueError as exc:  # a bug: a plan names no valid object
            del self.in_flight[stream]
            self._changed()
            log.error("cannot build a segment: %s", exc, extra={"action": "spill"})
            return
        except BaseException:  # cancelled while a thread built them (the broker stops)
            self._give_up(stream, [])
            raise
        keys = [op.ref.key for op, _ in built]
        self._keys.update(keys)
        try:
            outcomes = await asyncio.gather(
                *(self._put(op.ref.key, data) for op, data in built), return_exceptions=True
            )
            failed = next((o for o in outcomes if isinstance(o, BaseException)), None)
            if failed is not None:
                raise failed
        except BaseException as exc:
            # Cancelled (the broker stops) or given up: an object that landed after
            # all is the orphan sweep's; the next commit plans the spill again.
            self._give_up(stream, keys)
            if isinstance(exc, StorageError):
                log.warning("could not write a segment: %s", exc, extra={"action": "spill"})
                return
            raise
        life = self._life
        if not life.serving or life.closing:
            self._give_up(stream, keys)
            return
        ops = [op for op, _ in built]
        if self.wrote is not None:
            for (op, data), plan in zip(built, plans, strict=True):
                self.wrote(op.ref.key, data, plan.lines)
        self.in_flight[stream] = ops
        for op in ops:
            self._intake.add_internal(op)

    def _give_up(self, stream: Stream, keys: list[str]) -> None:
        self._keys.difference_update(keys)
        self.in_flight.pop(stream, None)
        self._changed()

    async def _put(self, key: str, data: bytes) -> None:
        await put_object(self._storage, self._retry, key, data)
