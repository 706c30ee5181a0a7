"""The broker's cold delayed jobs: objects under ``delayed/`` written, loaded back
ahead of their time, deleted (the pure side: :mod:`osqueue.state.cold_delayed`,
:mod:`osqueue.state.delayed_ops`, :mod:`osqueue.state.delayed_plan`).

:class:`~osqueue.broker.cold.manager.SegmentManager` owns a :class:`DelayedManager`
and hands it every committed transition (:meth:`DelayedManager.committed`).  With
no reference and no more delayed-heap entries than ``delay_spill_above_jobs``,
that is one comparison.  Otherwise, between commits and never on the path of the
ops waiting for one:

* **Spill** (one at a time): the delayed jobs due later than ``delay_horizon_s``
  are written, by queue and window, to objects built from the document's cached
  job encodings (``put``, three tries; in a thread when large); only then do the
  ``SpillDelayed`` ops go to the next commit.  Their keys stay in the segment
  manager's ``writing`` set (never an orphan) until that commit; a spill that
  failed (a job changed meanwhile) leaves an object no reference names: deleted.
* **Load**: an object's next ``delay_load_jobs`` jobs are loaded once the first of
  them is due within ``delay_lead_s`` (read through the segment cache, checked
  against the recorded size and SHA-256).  A timer set for the next reference's
  ``next_run_at - delay_lead_s`` wakes the manager when no commit comes, and the
  load op wakes an idle commit loop.  Loaded jobs keep their ``run_at``: the
  document's delayed heap makes them claimable when due, and parked claimers are
  woken then as for any delayed job.  So a job is claimable within the commit
  after its time if its load (a read and a commit) took less than the lead.
* **Delete**: an object whose last jobs were loaded is in ``dropped_segments`` and
  deleted by the segment manager after that commit; orphans by its sweep.

A missing or broken object is set aside (a ``SetAside`` op: its reference moves
to the document's set-aside list, logged with ``action=set_aside`` and counted),
and readmitted by ``osqueue segments readmit`` once restored
(:meth:`DelayedManager.check_restored`); a read that fails with a storage error
is tried again after a pause.  The other objects load as usual.  A takeover
reads no object: its first commit plans what is due.
"""

from __future__ import annotations

import asyncio
import logging
from dataclasses import dataclass
from typing import TYPE_CHECKING, Protocol

from osqueue.broker.cold.asides import PendingAsides
from osqueue.broker.cold.build import build_objects, put_object
from osqueue.broker.cold.cache import SegmentCache
from osqueue.broker.core.retry import StorageRetry
from osqueue.clock import Clock, Timer
from osqueue.errors import CorruptDocument, InvalidInput, NotFound, OsqueueError, StorageError
from osqueue.ids import new_id
from osqueue.state import Cancel, Document, Policy, Transition
from osqueue.state.delayed_plan import (
    DelayedSpillPlan,
    delayed_cancel_op,
    delayed_candidates,
    delayed_load_op,
    load_at,
    loads_due,
    plan_delayed_spills,
)
from osqueue.state.model import DelayedRef
from osqueue.state.ops import LoadDelayed, SpillDelayed
from osqueue.state.segment_codec import SegmentLines
from osqueue.storage.port import Storage

if TYPE_CHECKING:
    from osqueue.broker.core.intake import Intake
    from osqueue.broker.core.lifecycle import Lifecycle
    from osqueue.broker.core.tasks import SideTasks
    from osqueue.broker.lease.hold import Lease

log = logging.getLogger(__name__)

#: an object whose read or load failed is not tried again for this long
_FAILED_PAUSE_S = 5.0


@dataclass(slots=True)
class DelayedCounters:
    """What the broker did with delayed objects (``Broker.segments.delayed.counters``)."""

    spills: int = 0
    spilled_jobs: int = 0
    loads: int = 0
    loaded_jobs: int = 0
    failed_spills: int = 0
    failed_loads: int = 0
    #: objects set aside (missing, or failing their check)
    set_aside: int = 0


class SegmentsHost(Protocol):
    """What the segment manager that owns a :class:`DelayedManager` shares with it."""

    cache: SegmentCache
    writing: set[str]

    def _delete(self, key: str) -> None: ...

    def _check_quiet(self) -> None: ...


class DelayedManager:
    """Spills and loads of delayed objects between the broker's commits."""

    def __init__(
        self,
        storage: Storage,
        policy: Policy,
        clock: Clock,
        host: SegmentsHost,
        retry: StorageRetry,
        tasks: SideTasks,
        intake: Intake,
        lease: Lease,
        life: Lifecycle,
    ) -> None:
        self._storage = storage
        self._policy = policy
        self._clock = clock
        self._retry = retry
        self._tasks = tasks
        self._intake = intake
        self._lease = lease
        self._life = life
        #: the segment cache (one budget for every kind of object read)
        self._cache = host.cache
        #: the segment manager's keys in flight (the orphan sweep leaves them alone)
        self._writing = host.writing
        self._delete = host._delete
        #: the manager's quiet check (called when something in flight ends)
        self._changed = host._check_quiet
        self.counters = DelayedCounters()
        #: the spill in flight: True while its objects are written, then its ops
        self._spill: bool | list[SpillDelayed] = False
        #: key -> the LoadDelayed submitted for it, until a commit took it
        self._loads: dict[str, LoadDelayed] = {}
        self._reading: set[str] = set()
        #: key -> monotonic time before which a failed object is not tried again
        self._failed: dict[str, float] = {}
        #: key -> the SetAside submitted for its broken object, until a commit took it
        self._asides = PendingAsides(intake.add_internal, intake.holds, log)
        self._timer: Timer | None = None
        self._timer_at: float | None = None
        #: set while no spill's objects are being written
        self._written = asyncio.Event()
        self._written.set()

    @property
    def busy(self) -> bool:
        return bool(self._spill or self._loads or self._reading or self._asides)

    @property
    def writing(self) -> bool:
        """A spill's objects are being written (the commit loop's hold, as for segments)."""
        return self._spill is True

    async def written(self) -> None:
        """Return once no spill's objects are being written."""
        await self._written.wait()

    # ------------------------------------------------------------------ after a commit

    def committed(self, t: Transition) -> None:
        """The commit of ``t`` is durable: settle its delayed ops, plan the next."""
        doc = t.doc
        if self._spill or self._loads or self._asides:
            self._settle(doc)
        policy = self._policy
        above = policy.delay_spill_above_jobs
        if not doc.delayed and (above is None or len(doc.index.delayed) <= above):
            return  # the one cheap check: nothing spilled, nothing to spill
        life = self._life
        if not life.serving or life.closing:
            return
        now = self._clock.now()
        if not self._spill:
            plans = plan_delayed_spills(doc, policy, now)
            if plans:
                self._spill = True
                self._written.clear()
                self._tasks.spawn(self._write(plans), "osqueue-delayed-spill")
        if doc.delayed:
            self._plan_loads(doc, now)

    def _settle(self, doc: Document) -> None:
        self._asides.settle()
        for key, load in list(self._loads.items()):
            if self._intake.holds(load):
                continue
            del self._loads[key]
            ref = doc.delayed.find(key)
            if ref is not None and ref.loaded == load.from_loaded:
                self._load_failed(key, "the load did not apply")
                continue
            self.counters.loads += 1
            self.counters.loaded_jobs += len(load.jobs)
        spill = self._spill
        if isinstance(spill, list) and not any(self._intake.holds(op) for op in spill):
            self._spill = False
            for op in spill:
                key = op.ref.key
                self._writing.discard(key)
                if doc.delayed.find(key) is None:
                    self.counters.failed_spills += 1
                    log.info(
                        "a delayed spill did not apply (its jobs changed); deleting its object",
                        extra={"action": "delayed_spill", "key": key},
                    )
                    self._delete(key)
                else:
                    self.counters.spills += 1
                    self.counters.spilled_jobs += op.ref.count
        self._changed()

    # ------------------------------------------------------------------ spills

    async def _write(self, plans: list[DelayedSpillPlan]) -> None:
        uniques = [new_id() for _ in plans]

        def build() -> list[tuple[SpillDelayed, bytes]]:
            return [plan.build(unique) for plan, unique in zip(plans, uniques, strict=True)]

        keys: list[str] = []
        try:
            built = await build_objects(sum(len(plan.jobs) for plan in plans), build)
            keys = [op.ref.key for op, _ in built]
            self._writing.update(keys)
            await asyncio.gather(*(self._put(op.ref.key, data) for op, data in built))
        except BaseException as exc:
            # Cancelled (the broker stops), given up or a bug: an object that landed
            # after all is the orphan sweep's; the next commit plans the spill again.
            self._give_up(keys)
            if isinstance(exc, OsqueueError):
                log.warning(
                    "could not write a delayed object: %s", exc, extra={"action": "delayed_spill"}
                )
                return
            raise
        life = self._life
        if not life.serving or life.closing:
            self._give_up(keys)
            return
        ops = [op for op, _ in built]
        self._spill = ops
        self._written.set()
        for op in ops:
            self._intake.add_internal(op)

    def _give_up(self, keys: list[str]) -> None:
        self._writing.difference_update(keys)
        self._spill = False
        self._written.set()
        self._changed()

    async def _put(self, key: str, data: bytes) -> None:
        await put_object(self._storage, self._retry, key, data)

    # ------------------------------------------------------------------ loads

    def _plan_loads(self, doc: Document, now: float) -> None:
        """Read or load every object whose next job is due within the lead; arm the
        timer for the next one."""
        busy = self._loads.keys() | self._reading | self._asides.keys()
        mono = self._clock.monotonic()
        wake: float | None = None
        for ref in loads_due(doc, self._policy, now, busy):
            paused = self._failed.get(ref.key)
            if paused is not None:
                if paused > mono:
                    wake = min(wake or paused - mono, paused - mono)
                    continue
                del self._failed[ref.key]
            obj = self._cache.get(ref.key)
            if obj is None:
                self._reading.add(ref.key)
                self._tasks.spawn(self._read(ref), "osqueue-delayed-read")
            else:
                self._submit(ref, obj)
        at = load_at(doc, self._policy)
        if at is not None and at > now:
            wake = min(wake or at - now, at - now)
        if wake is not None:
            self._arm(wake)

    def _arm(self, delay_s: float) -> None:
        at = self._clock.monotonic() + delay_s
        if self._timer is not None and self._timer_at is not None and self._timer_at <= at:
            return  # an earlier timer replans anyway
        if self._timer is not None:
            self._timer.cancel()
        call_later = getattr(self._clock, "call_later", None)
        if call_later is not None:
            self._timer = call_later(delay_s, self._fired)
        else:  # a clock with sleep only (as the commit loop's timer falls back to)
            sleeper = asyncio.ensure_future(self._clock.sleep(delay_s))
            sleeper.add_done_callback(lambda f: None if f.cancelled() else self._fired())
            self._timer = sleeper
        self._timer_at = at

    def _fired(self) -> None:
        self._timer = self._timer_at = None
        doc = self._lease.doc
        life = self._life
        if doc is not None and doc.delayed and life.serving and not life.closing:
            self._plan_loads(doc, self._clock.now())
            self._changed()

    async def _read(self, ref: DelayedRef) -> None:
        try:
            await self._cache.fetch(ref, attempts=3)
        except NotFound:
            self._set_aside(ref.key, "the object is missing")
            return
        except CorruptDocument as exc:
            self._set_aside(ref.key, str(exc))
            return
        except StorageError as exc:
            self._load_failed(ref.key, str(exc))
            return
        finally:
            self._reading.discard(ref.key)
            self._changed()
        doc = self._lease.doc
        life = self._life
        current = doc.delayed.find(ref.key) if doc is not None else None
        obj = self._cache.get(ref.key)
        if (
            current is not None
            and obj is not None
            and life.serving
            and not life.closing
            and ref.key not in self._loads
        ):
            self._submit(current, obj)
            self._changed()

    def _submit(self, ref: DelayedRef, obj: SegmentLines) -> None:
        try:
            op = delayed_load_op(ref, obj, self._policy.delay_load_jobs)
        except CorruptDocument as exc:
            self._set_aside(ref.key, str(exc))
            return
        if op.next_run_at is None and ref.loaded + len(op.jobs) < ref.count:
            self._set_aside(ref.key, "the object is shorter than its reference says")
            return
        self._loads[ref.key] = op
        self._intake.add_internal(op)

    def _set_aside(self, key: str, why: str) -> None:
        """``key``'s object is missing or broken: its reference goes aside (next
        commit); the other objects load as usual.  ``osqueue segments readmit``
        puts it back once restored (:meth:`check_restored`)."""
        self._cache.evict(key)
        message = (
            "setting delayed object %s aside (its jobs wait until `osqueue segments readmit`): %s"
        )
        if self._asides.add(key, why, message):
            self.counters.set_aside += 1

    async def check_restored(self, key: str) -> int:
        """Before a ``Readmit`` of the delayed object ``key``: it must be back as its
        reference recorded it (size, SHA-256, header, every line); else
        ``InvalidInput`` naming ``key``.  Returns the jobs it would readmit."""
        doc = self._lease.doc
        entry = doc.delayed.aside.get(key) if doc is not None else None
        if entry is None:
            raise InvalidInput(f"delayed object {key} is not set aside", field="key")
        try:
            obj = SegmentLines.checked_delayed(entry.ref, await self._storage.get(key))
            obj.jobs(0, len(obj))
        except NotFound:
            raise InvalidInput(f"{key} is still missing; restore it first", field="key") from None
        except CorruptDocument as exc:
            raise InvalidInput(f"{key} still fails its check: {exc}", field="key") from exc
        self._cache.evict(key)
        self._failed.pop(key, None)
        return entry.ref.remaining

    def _load_failed(self, key: str, why: str) -> None:
        self.counters.failed_loads += 1
        self._cache.evict(key)
        self._failed[key] = self._clock.monotonic() + _FAILED_PAUSE_S
        self._arm(_FAILED_PAUSE_S)
        log.error(
            "cannot load delayed object %s (trying again in %gs): %s",
            key,
            _FAILED_PAUSE_S,
            why,
            extra={"action": "delayed_load", "key": key},
        )

    # ------------------------------------------------------------------ cancel

    async def locate(self, job_id: str) -> Cancel | None:
        """The ``Cancel`` of ``job_id`` in the delayed object that holds it live."""
        doc = self._lease.doc
        if doc is None or not doc.delayed:
            return None
        for ref in delayed_candidates(doc, job_id):
            try:
                obj = await self._cache.fetch(ref, attempts=3)
            except (NotFound, CorruptDocument):
                continue
            now = self._lease.doc
            current = now.delayed.find(ref.key) if now is not None else None
            if current is not None:
                op = delayed_cancel_op(current, obj, job_id)
                if op is not None:
                    return op
        return None

    def stop(self) -> None:
        if self._timer is not None:
            self._timer.cancel()
            self._timer = self._timer_at = None
