"""The broker's compactions: adjacent small segments read, merged into one object,
and swapped for it by one commit (:mod:`osqueue.state.compaction` decides what).

One compaction is in flight at a time.  After a commit that changed the
references, :meth:`Compactor.plan` asks the state layer for a run to merge;
a side task reads the run's objects through the segment cache (each checked
against its reference), writes the merged object whole under a key of its
own (``put``, three tries), and only then submits the ``Compact`` op.  The
key stays in ``writing`` until the commit that took the op, so the orphan
sweep leaves it alone.  After that commit (:meth:`Compactor.settle`): if the
op applied, the parts were reported in ``dropped_segments`` and the segment
manager deletes them; if it failed (a part was loaded from or cancelled
meanwhile), the merged object is deleted at once.  A part that is missing or
fails its check is set aside, as for a load, and the compaction is given up.
A broker that dies before the commit leaves an object nothing names: the
orphan sweep's.

A part this broker's spill wrote a moment ago (a queue pushed to behind a deep
backlog spills its tail in small objects, merged soon after) is merged from the
lines the spill wrote (:meth:`Compactor.wrote`; the cache keeps them within
its budget): not read back and checked, since the merged object is then built
from exactly what the part was built from.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING

from osqueue.broker.cold.build import put_object
from osqueue.broker.cold.cache import SegmentCache
from osqueue.broker.cold.sweep import SegmentCounters
from osqueue.broker.core.retry import StorageRetry
from osqueue.errors import CorruptDocument, NotFound, OsqueueError, StorageError
from osqueue.ids import new_id
from osqueue.state import Compact, CompactPlan, Document, Policy, SegmentRef, plan_compactions
from osqueue.state.compaction import PART_SHARE
from osqueue.state.segment_codec import SegmentLines
from osqueue.storage.port import Storage

if TYPE_CHECKING:
    from osqueue.broker.core.intake import Intake
    from osqueue.broker.core.lifecycle import Lifecycle
    from osqueue.broker.core.tasks import SideTasks

log = logging.getLogger(__name__)

#: a compaction of at least this many jobs joins and hashes its object in a thread
_BUILD_IN_THREAD_JOBS = 5_000


class Compactor:
    """The compaction in flight (one at most): read, written, submitted, settled."""

    def __init__(
        self,
        storage: Storage,
        *,
        cache: SegmentCache,
        retry: StorageRetry,
        tasks: SideTasks,
        intake: Intake,
        life: Lifecycle,
        counters: SegmentCounters,
        writing: set[str],
        delete: Callable[[str], None],
        broken: Callable[[str, str], None],
        changed: Callable[[], None],
    ) -> None:
        self._storage = storage
        self._cache = cache
        self._retry = retry
        self._tasks = tasks
        self._intake = intake
        self._life = life
        self._counters = counters
        #: objects written or being written whose op has not committed (or failed) yet
        self._keys = writing
        self._delete = delete
        #: sets a part aside (missing, or failing its check)
        self._broken = broken
        #: called when a compaction ends or gives up (the manager's quiet check)
        self._changed = changed
        #: the running compaction: True while it reads and writes, then its op
        self._running: bool | Compact = False
        #: ``Segments.changes`` at the last plan (nothing to plan until it moves)
        self._planned_at = -1
        #: the most jobs a part holds (a tenth of ``compact_jobs``, from the last plan)
        self._part_jobs = 0

    def wrote(self, key: str, data: bytes, lines: Sequence[bytes]) -> None:
        """A spill stored ``data``, built from the job ``lines``, under ``key``: kept
        (:meth:`SegmentCache.keep_written`) if it could be a part."""
        if len(lines) <= self._part_jobs:
            self._cache.keep_written(SegmentLines.written(key, data, lines))

    @property
    def busy(self) -> bool:
        return self._running is not False

    def plan(self, doc: Document, policy: Policy) -> None:
        """Start a compaction if none runs and the references changed since the last look."""
        self._part_jobs = (policy.compact_jobs or 0) // PART_SHARE
        if self._running is not False or policy.compact_jobs is None:
            return
        changes = doc.segments.changes
        if changes == self._planned_at:
            return
        self._planned_at = changes
        plans = plan_compactions(doc, policy)
        if plans:
            self._running = True
            self._tasks.spawn(self._compact(plans[0]), "osqueue-segment-compact")

    def settle(self, doc: Document) -> None:
        """After a commit: did the compaction's op apply?"""
        op = self._running
        if not isinstance(op, Compact) or self._intake.holds(op):
            return
        self._running = False
        key = op.ref.key
        self._keys.discard(key)
        if doc.segments.find(key) is None:  # failed alone: nothing names the object
            self._counters.failed_compactions += 1
            log.info(
                "a compaction did not apply (a segment changed); deleting its object",
                extra={"action": "compact", "key": key},
            )
            self._delete(key)
        else:
            self._counters.compactions += 1
            self._counters.compacted_segments += len(op.refs)

    async def _compact(self, plan: CompactPlan) -> None:
        try:
            await self._run(plan)
        finally:
            if self._running is True:  # given up (or cancelled): no op submitted
                self._running = False
            self._changed()

    async def _run(self, plan: CompactPlan) -> None:
        objects = await self._read(plan)
        if objects is None:
            return
        unique = new_id()
        try:
            if sum(ref.count for ref in plan.refs) < _BUILD_IN_THREAD_JOBS:
                op, data = plan.build(objects, unique)
            else:
                op, data = await asyncio.to_thread(plan.build, objects, unique)
        except OsqueueError as exc:  # a bug: the plan names no valid object
            log.error("cannot build a compacted segment: %s", exc, extra={"action": "compact"})
            return
        key = op.ref.key
        self._keys.add(key)
        try:
            await put_object(self._storage, self._retry, key, data)
        except BaseException as exc:
            self._keys.discard(key)  # if it landed after all, the orphan sweep's
            if isinstance(exc, StorageError):
                log.warning("could not write a compacted segment: %s", exc)
                return
            raise
        life = self._life
        if not life.serving or life.closing:
            self._keys.discard(key)
            return
        self._running = op
        self._intake.add_internal(op)

    async def _read(self, plan: CompactPlan) -> list[SegmentLines] | None:
        """The parts' objects, read and checked; None if one is missing or broken
        (set aside) or cannot be read now."""
        outcomes = await asyncio.gather(
            *(self._part(ref) for ref in plan.refs), return_exceptions=True
        )
        objects: list[SegmentLines] = []
        for ref, got in zip(plan.refs, outcomes, strict=True):
            if isinstance(got, NotFound):
                self._broken(ref.key, "the object is missing")
            elif isinstance(got, CorruptDocument):
                self._broken(ref.key, str(got))
            elif isinstance(got, StorageError):
                log.warning("could not read a segment to compact: %s", got)
            elif isinstance(got, BaseException):
                raise got
            else:
                objects.append(got)
        return objects if len(objects) == len(plan.refs) else None

    async def _part(self, ref: SegmentRef) -> SegmentLines:
        """A part's object: as a spill of this broker wrote it, or read and checked."""
        obj = self._cache.written(ref.key)
        if obj is not None and obj.size_bytes == ref.size_bytes:
            return obj
        return await self._cache.fetch(ref, attempts=3)
