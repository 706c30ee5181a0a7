"""The broker's segment I/O: spills written, loads read ahead, objects deleted.

The pure layer (:mod:`osqueue.state.spill`, :mod:`osqueue.state.planning`)
says what a deep backlog needs; this does the I/O between commits, never on
the path of the ops waiting for one.  After every commit the commit loop
hands the :class:`~osqueue.state.Transition` to :meth:`SegmentManager.committed`,
which (synchronously, in microseconds) settles what that commit decided and
plans what comes next:

* **Spill** (:mod:`~osqueue.broker.cold.spill`).  A stream whose tail
  passed ``spill_above_jobs`` gets a side task that builds the object from
  the document's cached job encodings, stores it whole under a key of its own
  (``put``), and only then adds the ``Spill`` op to the next commit.  The key
  stays in :attr:`SegmentManager.writing` until that commit, so the orphan
  sweep leaves it alone; a ``Spill`` that failed (its snapshot went stale)
  leaves an object no reference names, deleted at once.
* **Load.**  A stream's first segment is read ahead once fewer than twice
  ``head_jobs`` ready jobs come before its barrier (the count is kept as an
  estimate lowered by each commit's claims of the queue and recounted every
  few loads, so a commit does not walk the heap), and a ``Load`` of the next
  ``load_jobs`` jobs goes to the next commit once fewer than ``head_jobs`` are
  left, or at once when a claim stopped at the barrier (``Transition.starved``:
  none is left before it then, and the estimate restarts at 0).  The second
  segment is read ahead once the first has two loads left.
  The commit that loads wakes the parked claims it serves, so a long-polling
  claimer waits one load at most.  Objects are kept parsed, within
  ``segment_cache_bytes`` (:mod:`~osqueue.broker.cold.cache`).
* **Set aside.**  Every object read is checked against the size and SHA-256
  its reference recorded at spill.  One that is missing or fails (or whose
  header or a line does not decode) is not tried again: a ``SetAside`` op
  moves its reference to the queue's set-aside list, so the stream's next
  segment loads and the queue keeps flowing.  ``osqueue segments readmit``
  (:meth:`SegmentManager.check_restored`, then a ``Readmit`` op) puts it
  back once the object is restored.
* **Delete.**  An object whose last jobs were loaded (``dropped_segments``) is
  deleted after the commit that dropped it.  The orphan sweep (run with the
  payload sweep) lists ``segments/``; an object two sweeps an interval apart
  found unreferenced, with no spill of it in flight, is deleted right after
  the next commit, checked against that committed document with the lease
  just renewed; a referenced object is never deleted.

Internal ops are submitted with :meth:`~osqueue.broker.core.intake.Intake.add_internal`
(they wake an idle commit loop).  An internal op has no future: after each
commit, an op no longer waiting in the intake was in that commit, and the
document says whether it applied.  A takeover reads no segment: the new
broker's first commits plan the loads it needs.
"""

from __future__ import annotations

import asyncio
import logging
from collections import Counter
from typing import TYPE_CHECKING

from osqueue.broker.cold.asides import PendingAsides
from osqueue.broker.cold.cache import SegmentCache
from osqueue.broker.cold.compact import Compactor
from osqueue.broker.cold.dead import DeadLetterManager
from osqueue.broker.cold.delayed import DelayedManager
from osqueue.broker.cold.demand import ClaimDemand
from osqueue.broker.cold.finished import FinishedObjects
from osqueue.broker.cold.spill import SpillWriter
from osqueue.broker.cold.sweep import SegmentCounters, SegmentDeletes
from osqueue.broker.cold.waiting import WaitingObjects
from osqueue.broker.config import BrokerConfig
from osqueue.broker.core.retry import StorageRetry
from osqueue.clock import Clock
from osqueue.errors import CorruptDocument, InvalidInput, NotFound
from osqueue.state import (
    Cancel,
    Document,
    Load,
    SegmentRef,
    StoredJob,
    Stream,
    Transition,
    jobs_ahead,
)
from osqueue.state.cold_delayed import DELAYED_PREFIX
from osqueue.state.planning import cold_idle, sizes_changed
from osqueue.state.segment_codec import SegmentLines, decode_checked
from osqueue.storage.port import Storage

if TYPE_CHECKING:
    from osqueue.broker.core.intake import Intake
    from osqueue.broker.core.lifecycle import Lifecycle
    from osqueue.broker.core.tasks import SideTasks
    from osqueue.broker.lease.hold import Lease

log = logging.getLogger(__name__)

#: a segment whose load the commit refused is not tried again for this long
_FAILED_PAUSE_S = 5.0
#: a stream's estimate of its jobs ahead is trusted below ``head_jobs`` until this
#: many heads, and at most _RECOUNT_JOBS jobs, were loaded since they were counted
#: (a load that jobs put back made early adds no more than that to the document)
_RECOUNT_LOADS, _RECOUNT_JOBS = 8, 4096


class SegmentManager:
    """Spills, loads and deletes segment objects between the broker's commits.

    Owns the segment cache, the spills and loads in flight (one of each per stream
    at most), each stream's estimate of the ready jobs ahead of its barrier, the
    keys being written, and the orphans due for deletion."""

    def __init__(
        self,
        storage: Storage,
        config: BrokerConfig,
        clock: Clock,
        *,
        retry: StorageRetry,
        tasks: SideTasks,
        intake: Intake,
        lease: Lease,
        life: Lifecycle,
    ) -> None:
        self._storage = storage
        self._demand = ClaimDemand(config.policy(), config.head_max_bytes)
        self._policy = self._demand.policy
        self._clock = clock
        self._retry = retry
        self._tasks = tasks
        self._intake = intake
        self._lease = lease
        self._life = life
        self.cache = SegmentCache(storage, config.segment_cache_bytes, retry)
        self.counters = SegmentCounters()
        #: stream -> the Load submitted for it, until a commit took it
        self._loads: dict[Stream, Load] = {}
        #: stream -> (first reference's key, loaded count, jobs ahead, loaded since counted)
        self._ahead: dict[Stream, tuple[str, int, int, int]] = {}
        #: streams whose load is due (submitted as soon as their object is read)
        self._due: set[Stream] = set()
        self._reading: set[str] = set()
        #: key -> monotonic time before which a refused load is not tried again
        self._failed: dict[str, float] = {}
        #: key -> the SetAside submitted for its broken object, until a commit took it
        self._asides = PendingAsides(intake.add_internal, intake.holds, log)
        #: objects written or being written whose Spill has not committed (or failed) yet
        self.writing: set[str] = set()
        #: deletes after commits, and the orphan sweep
        self.deletes = SegmentDeletes(
            storage,
            tasks=tasks,
            lease=lease,
            life=life,
            counters=self.counters,
            writing=self.writing,
            done=self._check_quiet,
        )
        #: set while no spill, load, read or delete is in flight (:meth:`settled`)
        self._quiet = asyncio.Event()
        self._quiet.set()
        #: the spills in flight (written, then referenced by the next commit)
        self.spills = SpillWriter(
            storage,
            retry=retry,
            tasks=tasks,
            intake=intake,
            life=life,
            counters=self.counters,
            writing=self.writing,
            delete=self._delete,
            changed=self._check_quiet,
        )
        #: waiting children in objects, the sealed record of finished jobs, dead segments
        self.waiting, self.finished = _cold_parts(self)
        self.dead, self.delayed = _dead_part(self), _delayed_part(self)  # (cold/dead, cold/delayed)
        #: the compaction in flight (adjacent small segments merged)
        self.compactor = _compactor(self)

    # ------------------------------------------------------------------ after a commit

    def committed(self, t: Transition) -> None:
        """The commit of ``t`` is durable: settle its segment ops, delete what it
        dropped, and plan the next spills and loads."""
        quiet = not (t.dropped_segments or self.deletes.doomed or self._ahead or self._due)
        if quiet and cold_idle(t.doc, self._policy) and not self.busy:
            self._quiet_commit(t)  # the common case: no part has anything to do
            return
        doc = t.doc
        if self._loads or self.spills.busy or self.compactor.busy:
            self._settle(doc)
        if self._asides:
            self._asides.settle()
        for key in t.dropped_segments:
            self.counters.deleted += 1
            self._delete(key)
        if self.deletes.doomed:
            for key in self.deletes.orphans_after(doc):
                self.cache.evict(key)
        self.waiting.committed(t)  # waiting children in objects (broker/cold/waiting.py)
        self.finished.committed(t)
        life = self._life
        self.dead.committed(doc, life.serving and not life.closing)
        if not life.serving or life.closing:
            return
        self._count_claims(t)
        if t.starved:
            self.counters.starved += 1
        if doc.segments.streams:
            self._plan_loads(doc, t.starved, t.claimed_jobs)
        elif self._ahead or self._due:
            self._ahead.clear()
            self._due.clear()
        self.spills.plan(doc, self._policy, self._demand.configured)
        if doc.segments:
            self.compactor.plan(doc, self._policy)
        self.delayed.committed(t)
        self._check_quiet()

    def _quiet_commit(self, t: Transition) -> None:
        """After a commit that leaves no part (nor, claiming little, the demand) work."""
        if len(t.claimed_jobs) > self._demand.steady_claims:
            self._count_claims(t)
        self._quiet.set()

    def _count_claims(self, t: Transition) -> None:
        """The claim demand after ``t`` (new sizes void the spill memos they make wrong)."""
        old = self._policy
        if self._demand.after_commit(len(t.claimed_jobs)):
            self._policy = self._demand.policy
            sizes_changed(t.doc, old, self._policy)

    @property
    def busy(self) -> bool:
        """A spill, load, read or delete is in flight."""
        if self._loads or self._reading or self._asides.ops or self.spills.in_flight:
            return True
        parts = self.dead.busy or self.waiting.busy or self.finished.busy or self.delayed.busy
        return bool(self.deletes.deleting) or parts or self.compactor.busy

    def _check_quiet(self) -> None:
        if self.busy:
            self._quiet.clear()
        else:
            self._quiet.set()

    async def settled(self) -> None:
        """Return once no spill, load, read or delete is in flight: what the last
        commit planned is done (for tests, benchmarks and tools); or once the
        broker has stopped."""
        closed = self._life.closed
        while self.busy and not closed.is_set():
            self._quiet.clear()
            waits = {
                asyncio.ensure_future(self._quiet.wait()),
                asyncio.ensure_future(closed.wait()),
            }
            try:
                await asyncio.wait(waits, return_when=asyncio.FIRST_COMPLETED)
            finally:
                for waiting in waits:
                    waiting.cancel()

    def _settle(self, doc: Document) -> None:
        """The ops a commit took: did they apply?"""
        for stream, load in list(self._loads.items()):
            if self._intake.holds(load):
                continue  # still waiting for a commit
            del self._loads[stream]
            memo = self._ahead.pop(stream, None)
            ref = doc.segments.find(load.key)
            if ref is not None and ref.loaded == load.from_loaded:
                self._load_failed(load.key, "the load did not apply")
                continue
            self.counters.loads += 1
            self.counters.loaded_jobs += len(load.jobs)
            first = doc.segments.first(stream)
            if memo is not None and first is not None:  # the jobs it put ahead of the barrier
                n = len(load.jobs)
                self._ahead[stream] = (first.key, first.loaded, memo[2] + n, memo[3] + n)
        self.spills.settle(doc)
        self.compactor.settle(doc)

    # ------------------------------------------------------------------ loads

    def _plan_loads(self, doc: Document, starved: set[Stream], claimed: list[StoredJob]) -> None:
        due: set[Stream] = set()
        by_queue = Counter(job.queue for job in claimed) if claimed and self._ahead else Counter()
        streams = doc.segments.streams
        for stream, refs in streams.items():
            if stream in self._loads:
                continue  # decided again once it has committed
            first = refs[0]
            # the load after the next crosses into the second: read it ahead (a read
            # left for then would make that commit's claims wait), if the cache keeps
            # it beside the first (else the first, still loading, would be pushed out)
            near = len(refs) > 1 and first.remaining <= 2 * self._demand.load_of(doc, first)
            if near and self.cache.fits(refs[1].size_bytes):
                self._want(stream, refs[1], False)
            if stream in starved:
                # a claim stopped at the barrier: no ready job is left before it
                # (the estimate, counted exactly, restarts at 0 for the load to raise)
                self._ahead[stream] = (first.key, first.loaded, 0, 0)
                now_due = True
            else:
                head = self._demand.head_of(doc, first)
                ahead = self._jobs_ahead(doc, stream, first, by_queue[stream[0]], head)
                if ahead >= 2 * head:
                    continue
                now_due = ahead < head
            if now_due:
                due.add(stream)
            self._want(stream, first, now_due)
        self._due = due
        if len(self._ahead) > len(streams):
            for stream in [s for s in self._ahead if s not in streams]:
                del self._ahead[stream]

    def _jobs_ahead(
        self, doc: Document, stream: Stream, first: SegmentRef, claimed: int, head: int
    ) -> int:
        """The ready jobs before ``stream``'s barrier, about: an estimate lowered by
        the queue's ``claimed`` and raised by loads, counted (a walk of the heap)
        when it falls below ``head_jobs`` a few loads after the last count
        (:data:`_RECOUNT_LOADS`).  Jobs put back since make it low (a load comes
        early); a cancel makes it high (a claim then starves, and loads at once)."""
        memo = self._ahead.get(stream)
        if memo is not None and memo[0] == first.key and memo[1] == first.loaded:
            estimate = memo[2] - claimed
            if estimate >= head or memo[3] < min(_RECOUNT_LOADS * head, _RECOUNT_JOBS):
                self._ahead[stream] = (first.key, first.loaded, estimate, memo[3])
                return estimate
        ahead = jobs_ahead(doc, stream[0], (stream[1], first.next_seq), 2 * head)
        self._ahead[stream] = (first.key, first.loaded, ahead, 0)
        return ahead

    def _want(self, stream: Stream, ref: SegmentRef, due: bool) -> None:
        """``ref`` is needed soon: read it ahead; ``due``: load its next chunk now."""
        key = ref.key
        if key in self._asides:
            return  # its set-aside is on its way to a commit
        paused = self._failed.get(key)
        if paused is not None:
            if paused > self._clock.monotonic():
                return
            del self._failed[key]
        obj = self.cache.get(key)
        if obj is None:
            if key not in self._reading:
                self._reading.add(key)
                self._tasks.spawn(self._read(stream, ref), "osqueue-segment-read")
        elif due:
            self._submit_load(stream, ref, obj)

    async def _read(self, stream: Stream, ref: SegmentRef) -> None:
        """Read ``ref``'s object ahead; submit its load if it came due meanwhile."""
        try:
            await self.cache.fetch(ref)
        except NotFound:
            self._set_aside(ref.key, "the object is missing")
            return
        except CorruptDocument as exc:
            self._set_aside(ref.key, str(exc))
            return
        finally:
            self._reading.discard(ref.key)
            self._check_quiet()
        life = self._life
        if stream not in self._due or stream in self._loads or not life.serving or life.closing:
            return
        doc = self._lease.doc
        first = doc.segments.first(stream) if doc is not None else None
        obj = self.cache.get(ref.key)
        if first is not None and first.key == ref.key and obj is not None:
            self._submit_load(stream, first, obj)
            self._check_quiet()

    def _submit_load(self, stream: Stream, ref: SegmentRef, obj: SegmentLines) -> None:
        start, size = ref.loaded, self._demand.load_of(self._lease.doc, ref)
        end = min(start + size, ref.count)
        try:
            jobs = self.cache.ahead.jobs(obj, start, end)  # and the job after the chunk
        except CorruptDocument as exc:
            self._set_aside(ref.key, str(exc))
            return
        if len(jobs) <= end - start and end < ref.count:
            self._set_aside(ref.key, "the object is shorter than its reference says")
            return
        after = jobs[-1] if end < ref.count else None  # (None: the chunk ends the object)
        op = Load(ref.key, start, tuple(jobs[: end - start]), after, tuple(obj.lines[start:end]))
        self._loads[stream] = op
        self._due.discard(stream)
        self._intake.add_internal(op)
        if end < ref.count:  # the next chunk: decoded while the next write is in flight
            self.cache.ahead.note(ref.key, end, min(end + size, ref.count))

    def _load_failed(self, key: str, why: str) -> None:
        """A segment could not be loaded: forget what was read of it, and pause it."""
        self.counters.failed_loads += 1
        self.cache.evict(key)
        self._failed[key] = self._clock.monotonic() + _FAILED_PAUSE_S
        log.error(
            "cannot load segment %s (its stream waits; trying again in %gs): %s",
            key,
            _FAILED_PAUSE_S,
            why,
            extra={"action": "load", "key": key},
        )

    def _set_aside(self, key: str, why: str) -> None:
        """``key``'s object is missing or broken: set its reference aside (next
        commit) so the stream goes on without it; it is not read again."""
        self.cache.evict(key)
        message = (
            "setting segment %s aside (its queue goes on without its jobs until "
            "`osqueue segments readmit`): %s"
        )
        if self._asides.add(key, why, message):
            self.counters.set_aside += 1

    async def check_restored(self, key: str) -> int:
        """Before a ``Readmit`` of ``key``: its object must be back as its set-aside
        reference recorded it (size, SHA-256, header, every job line); else
        ``InvalidInput`` naming ``key`` and what is still wrong.  Returns the
        jobs it would readmit."""
        if key.startswith(DELAYED_PREFIX):
            return await self.delayed.check_restored(key)
        remaining = await _check_restored(self._storage, self._lease.doc, key)
        self.cache.evict(key)
        self._failed.pop(key, None)
        return remaining

    # ------------------------------------------------------------------ deletes and orphans

    def _delete(self, key: str) -> None:
        self.cache.evict(key)
        self._quiet.clear()
        self.deletes.delete(key)

    async def sweep(self, suspects: set[str]) -> set[str]:
        """One orphan sweep (:meth:`SegmentDeletes.sweep
        <osqueue.broker.cold.sweep.SegmentDeletes.sweep>`)."""
        return await self.deletes.sweep(suspects)

    # ------------------------------------------------------------------ cancel

    async def locate(self, job_id: str) -> Cancel | None:
        """The ``Cancel`` of ``job_id`` in the segment that holds it live, if one does."""
        found = await self.cache.locate(job_id, lambda: self._lease.doc, self._set_aside)
        if found is None:
            found = await self.waiting.locate(job_id)
        return found if found is not None else await self.delayed.locate(job_id)


async def _check_restored(storage: Storage, doc: Document | None, key: str) -> int:
    """The jobs ``key``'s set-aside reference in ``doc`` would readmit, once its
    object checks (:meth:`SegmentManager.check_restored`)."""
    entry = doc.segments.aside.get(key) if doc is not None else None
    if entry is None:
        raise InvalidInput(f"segment {key} is not set aside", field="key")
    ref = entry.ref
    try:
        decode_checked(ref, await storage.get(key))
    except NotFound:
        raise InvalidInput(
            f"segment {key} is still missing; restore it first", field="key"
        ) from None
    except CorruptDocument as exc:
        raise InvalidInput(f"segment {key} still fails its check: {exc}", field="key") from exc
    return ref.remaining


def _cold_parts(m: SegmentManager) -> tuple[WaitingObjects, FinishedObjects]:
    """The objects of waiting children and of the sealed record of ``m``'s broker
    (sharing its storage, side tasks, keys being written and deletes)."""
    waiting = WaitingObjects(
        m._storage,
        m._policy,
        m._clock,
        retry=m._retry,
        tasks=m._tasks,
        intake=m._intake,
        lease=m._lease,
        life=m._life,
        writing=m.writing,
        delete=m._delete,
        changed=m._check_quiet,
    )
    finished = FinishedObjects(
        m._storage,
        m._policy,
        m._clock,
        tasks=m._tasks,
        intake=m._intake,
        life=m._life,
        writing=m.writing,
        delete=m._delete,
        changed=m._check_quiet,
    )
    return waiting, finished


def _compactor(m: SegmentManager) -> Compactor:
    """The compactions of ``m``'s broker (sharing its storage, cache, side tasks,
    keys being written, deletes and set-asides); told of the objects its spills
    write (small ones are merged as written, not read back)."""
    compactor = Compactor(
        m._storage,
        cache=m.cache,
        retry=m._retry,
        tasks=m._tasks,
        intake=m._intake,
        life=m._life,
        counters=m.counters,
        writing=m.writing,
        delete=m._delete,
        broken=m._set_aside,
        changed=m._check_quiet,
    )
    m.spills.wrote = compactor.wrote
    return compactor


def _dead_part(m: SegmentManager) -> DeadLetterManager:
    """The dead segments of ``m``'s broker (sharing its storage, side tasks, keys
    being written and deletes)."""
    tasks, intake, lease = m._tasks, m._intake, m._lease
    return DeadLetterManager(
        m._storage,
        m._policy,
        retry=m._retry,
        spawn=lambda work: tasks.spawn(work, "osqueue-dead-spill"),
        submit=intake.add_internal,
        pending=intake.holds,
        add_op=intake.add_op,
        document=lambda: lease.doc,
        writing=m.writing,
        delete=m._delete,
        changed=m._check_quiet,
    )


def _delayed_part(m: SegmentManager) -> DelayedManager:
    """The delayed objects of ``m``'s broker (sharing its storage, cache, side tasks,
    keys being written and deletes)."""
    return DelayedManager(
        m._storage, m._policy, m._clock, m, m._retry, m._tasks, m._intake, m._lease, m._life
    )
