"""The broker's dead segments: dead letters spilled, listed, retried and purged.

The pure layer (:mod:`osqueue.state.cold_dead`) decides; this does the I/O
between commits:

* **Spill.**  After a commit, a queue with ``dead_spill_jobs`` more dead jobs
  than ``dead_keep_jobs`` gets a side task that writes its oldest deaths to
  dead segments (``dead/<queue>/...``) and then submits their ``SpillDead``
  ops; an op that failed (a job changed meanwhile) leaves an object no
  reference names, deleted at once.
* **Retry and purge** (:meth:`DeadLetterManager.act`).  The dead jobs the
  document keeps are retried or purged by the ``RetryDead``/``PurgeDead``
  ops; then each dead segment the filter may touch, one commit at a time: its
  object is read and checked, the new objects (the jobs that stay dead, and
  for a retry the retried jobs as ready segments with fresh seqs) are written,
  and one ``SwapDead`` switches the references.  A crash between two swaps
  leaves every segment retried or not, never twice (a swap applied twice
  fails with ``Conflict``: its ``old`` reference is gone); running the retry
  again finishes it.  The old object is deleted after its swap commits.
* **Listing** pages through the document's dead jobs, then the segments'.
* **Set aside.**  A dead segment whose object is missing or fails its check
  (size, SHA-256, header, every line) when a listing, retry or purge reads it
  is set aside (a ``SetAside`` op, as for ready segments): its jobs are
  neither lost nor listed, retried or purged, its payload objects stay held,
  and the rest go on.  ``osqueue segments readmit`` puts it back once
  restored (:meth:`DeadLetterManager.check_restored`, then ``Readmit``).

New objects' keys stay in the segment manager's ``writing`` set until their
op settles, so the orphan sweep (which lists ``dead/`` and ``segments/``)
leaves them alone; an object whose op failed is deleted.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import AsyncIterator, Awaitable, Callable, Coroutine
from dataclasses import dataclass, field
from functools import partial
from typing import Any

from osqueue.broker.cold.asides import PendingAsides
from osqueue.broker.cold.build import build_objects, put_object
from osqueue.broker.core.retry import StorageRetry
from osqueue.errors import (
    Conflict,
    CorruptDocument,
    InvalidInput,
    NotFound,
    OsqueueError,
    StorageError,
)
from osqueue.ids import new_id
from osqueue.state import Counted, Document, Policy, PurgeDead, Removed, Result, RetryDead
from osqueue.state.cold_dead import (
    DeadFilter,
    DeadSpillPlan,
    dead_spill_room,
    key_holder,
    plan_dead_spills,
    plan_swap,
    read_dead,
)
from osqueue.state.dead_letters import DeadRef
from osqueue.state.model import StoredJob
from osqueue.state.ops import Op, SpillDead
from osqueue.storage.port import Storage

log = logging.getLogger(__name__)

#: seqs a retry reserves beyond ``next_seq`` for the pushes that commit before it
SEQ_MARGIN = 100_000
#: tries of one segment's swap whose reserved seqs went stale
_SWAP_TRIES = 5


@dataclass(slots=True)
class DeadPage:
    """One page of a paged retry or purge (the gRPC service's): the dead segments
    earlier pages left in place (passed over), and what this page saw."""

    #: keys of dead segments earlier pages went through and left referenced
    passed: frozenset[str] = frozenset()
    #: keys of this page's dead segments still referenced after it
    kept: list[str] = field(default_factory=list)
    #: dead segments the filter reaches beyond this page
    left: int = 0


@dataclass(slots=True)
class DeadCounters:
    """What the broker did with dead segments."""

    spills: int = 0
    spilled_jobs: int = 0
    failed_spills: int = 0
    swaps: int = 0
    #: dead segments found missing or broken (set aside, reported)
    set_aside: int = 0


class DeadLetterManager:
    """Dead spills in flight, and the retries and purges of dead segments."""

    def __init__(
        self,
        storage: Storage,
        policy: Policy,
        *,
        retry: StorageRetry,
        spawn: Callable[[Coroutine[Any, Any, None]], object],
        submit: Callable[[Op], None],
        pending: Callable[[Op], bool],
        add_op: Callable[[Op], Awaitable[Result]],
        document: Callable[[], Document | None],
        writing: set[str],
        delete: Callable[[str], None],
        changed: Callable[[], None] = lambda: None,
    ) -> None:
        self._storage = storage
        self._policy = policy
        self._retry = retry
        self._spawn = spawn
        self._submit = submit
        self._pending = pending
        self._add_op = add_op
        self._document = document
        self._writing = writing
        self._delete = delete
        #: called when a spill gives up (the segment manager's quiet check)
        self.changed = changed
        self.counters = DeadCounters()
        #: queue -> its SpillDead ops once written (None while being written)
        self.in_flight: dict[str, list[SpillDead] | None] = {}
        #: key -> its SetAside op until it settles (one per object)
        self._asides = PendingAsides(submit, pending, log)
        #: ``doc.stats.dead`` below which no queue can have a spill to plan
        #: (:func:`dead_spill_room`; 0: look at the next commit)
        self._recheck_at = 0
        #: set while no spill's objects are being written
        self._written = asyncio.Event()
        self._written.set()

    @property
    def busy(self) -> bool:
        return bool(self.in_flight or self._asides)

    @property
    def writing(self) -> bool:
        """A spill's objects are being written (the commit loop's hold, as for
        segments: deaths must not pile up in the document faster than they leave)."""
        return not self._written.is_set()

    async def written(self) -> None:
        """Return once no spill's objects are being written."""
        await self._written.wait()

    def _check_written(self) -> None:
        if any(ops is None for ops in self.in_flight.values()):
            self._written.clear()
        else:
            self._written.set()

    # ------------------------------------------------------------------ spills

    def committed(self, doc: Document, serving: bool) -> None:
        """After a commit: settle the dead spills it took, plan the next ones."""
        self._asides.settle()
        for queue, ops in list(self.in_flight.items()):
            if ops is None or any(self._pending(op) for op in ops):
                continue
            del self.in_flight[queue]
            for op in ops:
                self._writing.discard(op.ref.key)
                if doc.dead.find(op.ref.key) is None:
                    self.counters.failed_spills += 1
                    self._delete(op.ref.key)
                else:
                    self.counters.spills += 1
                    self.counters.spilled_jobs += op.ref.count
        if not serving or self._policy.dead_keep_jobs is None:
            return
        deaths = doc.stats.dead
        if deaths < self._recheck_at and not self.in_flight:
            return  # (the one check of a commit with nothing to spill)
        plans: dict[str, list[DeadSpillPlan]] = {}
        for plan in plan_dead_spills(doc, self._policy, exclude=set(self.in_flight)):
            plans.setdefault(plan.jobs[0].queue, []).append(plan)
        for queue, queue_plans in plans.items():
            self.in_flight[queue] = None
            self._spawn(self._spill(queue, queue_plans))
        if plans:
            self._written.clear()
        self._recheck_at = 0
        if not self.in_flight:  # (a queue in flight is left out of the room: look again)
            room = dead_spill_room(doc, self._policy)
            self._recheck_at = deaths + room if room else 0

    async def _spill(self, queue: str, plans: list[DeadSpillPlan]) -> None:
        try:
            await self._write(queue, plans)
        finally:
            self._check_written()

    async def _write(self, queue: str, plans: list[DeadSpillPlan]) -> None:
        # the ids drawn here, not in the thread: their order is the event loop's
        uniques = [new_id() for _ in plans]
        built = await build_objects(
            sum(len(plan.jobs) for plan in plans),
            lambda: [plan.build(unique) for plan, unique in zip(plans, uniques, strict=True)],
        )
        keys = [op.ref.key for op, _ in built]
        self._writing.update(keys)
        try:
            for op, data in built:
                await self._put(op.ref.key, data)
        except BaseException as exc:
            self._writing.difference_update(keys)  # landed after all: the sweep's
            self.in_flight.pop(queue, None)
            self.changed()
            if isinstance(exc, StorageError):
                log.warning("could not write a dead segment: %s", exc, extra={"action": "spill"})
                return
            raise
        ops = [op for op, _ in built]
        self.in_flight[queue] = ops
        for op in ops:
            self._submit(op)

    async def _put(self, key: str, data: bytes) -> None:
        await put_object(self._storage, self._retry, key, data)

    # ------------------------------------------------------------------ reading

    async def read(self, ref: DeadRef) -> list[StoredJob]:
        """``ref``'s jobs, read and checked."""
        return read_dead(ref, await self._storage.get(ref.key))

    async def listing(self, f: DeadFilter) -> AsyncIterator[StoredJob]:
        """The dead jobs ``f`` admits: the document's (newest deaths), then each
        dead segment's, oldest first (a snapshot per segment)."""
        doc = self._document()
        if doc is None:
            return
        for job in [j for j in doc.jobs.values() if f.admits(j)]:
            yield job
        for ref in [r for r in doc.dead if f.admits_ref(r)]:
            try:
                jobs = await self.read(ref)
            except (NotFound, CorruptDocument) as exc:  # swapped meanwhile, or broken
                self._unreadable(ref, exc)
                continue
            for job in jobs:
                if f.admits(job):
                    yield job

    # ------------------------------------------------------------------ retry and purge

    async def act(
        self,
        f: DeadFilter,
        *,
        retry: bool,
        progress: Callable[[int, int], None] | None = None,
        max_segments: int | None = None,
        page: DeadPage | None = None,
    ) -> int:
        """Retry (or purge) the dead jobs ``f`` admits; how many.  The document's
        first (one op), then each segment in one commit of its own; ``progress``
        is told (jobs so far, segments left).  ``max_segments``: stop after that
        many segments (a page; run again to go on); ``page``: pass over the
        segments it names, and learn which this page left in place."""
        doc = self._document()
        if doc is None:
            return 0
        done = 0
        ids = tuple(j.id for j in doc.jobs.values() if f.admits(j))
        if ids:
            op = RetryDead(ids) if retry else PurgeDead(ids)
            result = await self._add_op(op)
            if isinstance(result, Counted):
                done += result.n
            elif isinstance(result, Removed):
                done += len(result.jobs)
        passed = page.passed if page is not None else frozenset()
        refs = [r for r in doc.dead if f.admits_ref(r) and r.key not in passed]
        total = len(refs)
        if max_segments is not None:
            refs = refs[:max_segments]
        for i, ref in enumerate(refs):
            n, kept = await self._swap(ref, f, retry)
            done += n
            if page is not None and kept is not None:
                page.kept.append(kept)
            if progress is not None:
                progress(done, total - i - 1)
        if page is not None:
            page.left = total - len(refs)
        return done

    async def _swap(self, ref: DeadRef, f: DeadFilter, retry: bool) -> tuple[int, str | None]:
        """One dead segment's jobs that ``f`` admits, retried or purged in one commit;
        how many, and the key of the segment left in its place (None: none)."""
        try:
            jobs = await self.read(ref)
        except (NotFound, CorruptDocument) as exc:
            self._unreadable(ref, exc)
            return 0, None
        chosen = None if f.everything else f.admits
        for _ in range(_SWAP_TRIES):
            doc = self._document()
            if doc is None or doc.dead.find(ref.key) != ref:
                return 0, None
            swap = plan_swap(
                ref,
                jobs,
                chosen,
                retry=retry,
                first_seq=doc.next_seq + SEQ_MARGIN,
                unique=new_id,
                holder=partial(key_holder, doc),
            )
            if swap is None:
                return 0, ref.key
            keys = [key for key, _ in swap.objects]
            self._writing.update(keys)
            try:
                for key, data in swap.objects:
                    await self._put(key, data)
                result = await self._add_op(swap.op)
            finally:
                self._writing.difference_update(keys)
            if isinstance(result, Counted):
                self.counters.swaps += 1
                return result.n, None if swap.op.keep is None else swap.op.keep.key
            for key in keys:  # it failed alone: nothing names them
                self._delete(key)
            if isinstance(result, OsqueueError) and not isinstance(result, Conflict):
                raise result
        return 0, ref.key

    def _unreadable(self, ref: DeadRef, exc: OsqueueError) -> None:
        """A dead segment's object could not be read: swapped since (its reference is
        gone), or missing or broken: set aside (next commit) and reported."""
        doc = self._document()
        if doc is None or doc.dead.find(ref.key) != ref:
            return
        why = str(exc) if isinstance(exc, CorruptDocument) else "the object is missing"
        message = (
            "setting dead segment %s aside (its jobs wait until `osqueue segments readmit`): %s"
        )
        if self._asides.add(ref.key, why, message, exc):
            self.counters.set_aside += 1

    async def check_restored(self, key: str) -> int:
        """Before a ``Readmit`` of the dead segment ``key``: its object must be back as
        its reference recorded it (size, SHA-256, header, every line); else
        ``InvalidInput`` naming ``key``.  Returns the jobs it would readmit."""
        doc = self._document()
        entry = doc.dead.aside.get(key) if doc is not None else None
        if entry is None:
            raise InvalidInput(f"dead segment {key} is not set aside", field="key")
        try:
            await self.read(entry.ref)
        except NotFound:
            raise InvalidInput(f"{key} is still missing; restore it first", field="key") from None
        except CorruptDocument as exc:
            raise InvalidInput(f"{key} still fails its check: {exc}", field="key") from exc
        return entry.ref.count
