"""The broker's I/O for waiting children in objects (``waiting/``).

:mod:`osqueue.state.cold_waiting` decides; this writes and reads between
commits, never on the path of the ops waiting for one.  The segment manager
hands it every committed :class:`~osqueue.state.Transition`
(:meth:`WaitingObjects.committed`, synchronous and cheap):

* **Spill.**  When the plan finds groups of waiting jobs to move, a side task
  builds their objects from the document's cached job encodings, stores each
  whole under a key of its own, and only then adds their ``SpillWaiting`` ops
  to the next commit.  The keys stay in the segment manager's ``writing`` set
  until that commit, so the orphan sweep leaves them alone; a spill that did
  not apply (its jobs changed) leaves an object nothing names, deleted at once.
  A plan that found nothing is not made again until enough waiting jobs came
  for its largest group to reach ``waiting_spill_above_jobs`` (or that many
  new parents), so a document of small groups does not pay a scan per commit.
* **Load.**  A reference is due once its parents all ended (or one failed).
  One object is read at a time (checked against its size and SHA-256), and
  its ``LoadWaiting`` goes to the next commit; the commit drops the reference
  and the segment manager deletes the object after it.  An object that is
  missing or fails its check is set aside (a ``SetAside`` op, as for ready
  segments: logged, counted, its jobs neither lost nor loaded, its parents
  still struck as they end) and the other objects keep loading;
  ``osqueue segments readmit`` puts it back once restored
  (:meth:`WaitingObjects.check_restored`, then ``Readmit``).
* **Cancel.**  :meth:`WaitingObjects.locate` finds a cold child by reading the
  objects whose id bounds hold it.

A takeover reads no object: the new broker's first commit plans what is due.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING

from osqueue.broker.cold.asides import PendingAsides
from osqueue.broker.cold.build import build_objects, put_object
from osqueue.broker.core.retry import StorageRetry
from osqueue.clock import Clock
from osqueue.errors import CorruptDocument, InvalidInput, NotFound, OsqueueError, StorageError
from osqueue.ids import new_id
from osqueue.state import Cancel, Document, Policy, Transition
from osqueue.state.cold_waiting import (
    build,
    hot_waiting,
    largest_group,
    plan_loads,
    plan_spills,
    read,
)
from osqueue.state.model import StoredJob
from osqueue.state.ops import LoadWaiting, SpillWaiting
from osqueue.state.waiting_refs import WaitingRef
from osqueue.storage.port import Storage

if TYPE_CHECKING:
    from osqueue.broker.core.intake import Intake
    from osqueue.broker.core.lifecycle import Lifecycle
    from osqueue.broker.core.tasks import SideTasks
    from osqueue.broker.lease.hold import Lease

log = logging.getLogger(__name__)

#: an object whose load the commit refused is not tried again for this long
_REFUSED_PAUSE_S = 1.0


@dataclass(slots=True)
class WaitingCounters:
    """What the broker did with objects of waiting children."""

    spills: int = 0
    spilled_jobs: int = 0
    loads: int = 0
    loaded_jobs: int = 0
    failed_spills: int = 0
    #: objects missing or failing their check (set aside, reported)
    set_aside: int = 0


class WaitingObjects:
    """Spills and loads of waiting children between the broker's commits."""

    def __init__(
        self,
        storage: Storage,
        policy: Policy,
        clock: Clock,
        *,
        retry: StorageRetry,
        tasks: SideTasks,
        intake: Intake,
        lease: Lease,
        life: Lifecycle,
        writing: set[str],
        delete: Callable[[str], None],
        changed: Callable[[], None],
    ) -> None:
        self._storage = storage
        self._policy = policy
        self._clock = clock
        self._retry = retry
        self._tasks = tasks
        self._intake = intake
        self._lease = lease
        self._life = life
        #: the segment manager's keys being written (never an orphan)
        self._writing = writing
        self._delete = delete
        #: called when something in flight ends (the manager's quiet check)
        self._changed = changed
        self.counters = WaitingCounters()
        #: the spill in flight: None while its objects are written, then its ops
        self._spill: list[SpillWaiting] | None = None
        self._spilling = False
        #: when the last plan found nothing to move: the hot waiting jobs, the
        #: largest group, the parents with hot children
        self._fruitless: tuple[int, int, int] | None = None
        #: the load in flight (read, or submitted and not committed yet)
        self._load: LoadWaiting | None = None
        self._reading: str | None = None
        #: key -> monotonic time before which it is not read again
        self._paused: dict[str, float] = {}
        #: key -> its SetAside op until it settles
        self._asides = PendingAsides(intake.add_internal, intake.holds, log)
        #: set while no spill's objects are being written (the commit loop's hold)
        self._written = asyncio.Event()
        self._written.set()

    @property
    def busy(self) -> bool:
        busy = self._spilling or self._load is not None or self._reading is not None
        return busy or bool(self._asides)

    @property
    def writing(self) -> bool:
        """A spill's objects are being written (its ops are not submitted yet)."""
        return not self._written.is_set()

    async def written(self) -> None:
        """Return once no spill's objects are being written."""
        await self._written.wait()

    # ------------------------------------------------------------------ after a commit

    def committed(self, t: Transition) -> None:
        doc = t.doc
        if self._spill is not None and not any(self._intake.holds(op) for op in self._spill):
            self._settle_spill(doc, self._spill)
        if self._asides.settle():
            self._changed()
        load = self._load
        if load is not None and not self._intake.holds(load):
            self._load = None
            if doc.waiting_cold.holds(load.key):  # refused: a bug, or a race; not at once
                self._pause(load.key, "the load did not apply", _REFUSED_PAUSE_S)
            else:
                self.counters.loads += 1
                self.counters.loaded_jobs += len(load.jobs)
            self._changed()
        life = self._life
        if not life.serving or life.closing:
            return
        if not self._spilling and doc.index.children:
            self._plan_spill(doc)
        if doc.waiting_cold.due and self._load is None and self._reading is None:
            self._plan_load(doc)

    def _settle_spill(self, doc: Document, ops: list[SpillWaiting]) -> None:
        self._spill, self._spilling = None, False
        for op in ops:
            key = op.ref.key
            self._writing.discard(key)
            if doc.waiting_cold.holds(key):
                self.counters.spills += 1
                self.counters.spilled_jobs += op.ref.count
            else:  # it failed alone: nothing names the object
                self.counters.failed_spills += 1
                self._delete(key)
        self._changed()

    # ------------------------------------------------------------------ spills

    def _plan_spill(self, doc: Document) -> None:
        policy = self._policy
        above = policy.waiting_spill_above_jobs
        if above is None:
            return
        hot, parents = hot_waiting(doc), len(doc.index.children)
        memo = self._fruitless
        if memo is not None:
            hot0, largest, parents0 = memo
            # no group can have reached the threshold since: skip the scan
            if hot0 <= hot < hot0 + above - largest and parents < parents0 + above:
                return
        runs = plan_spills(doc, policy)
        if not runs:
            self._fruitless = (hot, largest_group(doc), parents)
            return
        self._fruitless = None
        lines = [[doc.encoded_job(job.id) for job in run] for run in runs]
        self._spilling = True
        self._written.clear()
        self._tasks.spawn(self._write(runs, lines), "osqueue-waiting-spill")

    async def _write(self, runs: list[list[StoredJob]], lines: list[list[bytes]]) -> None:
        uniques = [new_id() for _ in runs]

        def build_all() -> list[tuple[SpillWaiting, bytes]]:
            return [build(r, u, ls) for r, u, ls in zip(runs, uniques, lines, strict=True)]

        keys: list[str] = []
        try:
            built = await build_objects(sum(map(len, runs)), build_all)
            keys = [op.ref.key for op, _ in built]
            self._writing.update(keys)
            for op, data in built:
                await self._put(op.ref.key, data)
        except (StorageError, OsqueueError) as exc:
            log.warning("could not write waiting children: %s", exc, extra={"action": "spill"})
            self._give_up(keys)
            return
        except BaseException:  # cancelled: the broker stops (an object landed is an orphan)
            self._give_up(keys)
            raise
        life = self._life
        if not life.serving or life.closing:
            self._give_up(keys)
            return
        self._spill = [op for op, _ in built]
        for op in self._spill:
            self._intake.add_internal(op)
        self._written.set()

    def _give_up(self, keys: list[str]) -> None:
        self._writing.difference_update(keys)
        self._spilling = False
        self._written.set()
        self._changed()

    async def _put(self, key: str, data: bytes) -> None:
        await put_object(self._storage, self._retry, key, data)

    # ------------------------------------------------------------------ loads

    def _plan_load(self, doc: Document) -> None:
        now = self._clock.monotonic()
        paused = {k for k, until in self._paused.items() if until > now}
        for ref in plan_loads(doc, self._policy, paused):
            self._reading = ref.key
            self._tasks.spawn(self._read(ref), "osqueue-waiting-load")

    async def _get(self, key: str) -> bytes:
        """``key``'s bytes; a storage error is retried with backoff (as segment reads)."""
        attempt = 0
        while True:
            try:
                return await self._storage.get(key)
            except StorageError as exc:
                attempt += 1
                await self._retry.wait(attempt - 1, exc)

    async def read(self, ref: WaitingRef) -> list[StoredJob]:
        """``ref``'s jobs, read and checked (a storage error is raised)."""
        return read(ref, await self._storage.get(ref.key))

    async def _read(self, ref: WaitingRef) -> None:
        try:
            jobs = read(ref, await self._get(ref.key))
        except NotFound:
            self._broken(ref.key, "the object is missing")
            return
        except CorruptDocument as exc:
            self._broken(ref.key, str(exc))
            return
        finally:
            self._reading = None
            self._changed()
        life = self._life
        doc = self._lease.doc
        if not life.serving or life.closing or doc is None:
            return
        current = doc.waiting_cold.refs.get(ref.key)
        if current is None or not current.due:
            return
        self._load = LoadWaiting(ref.key, tuple(jobs))
        self._intake.add_internal(self._load)
        self._changed()

    def _broken(self, key: str, why: str) -> None:
        """``key``'s object is missing or broken: its reference goes aside (next
        commit); the other objects load as usual."""
        doc = self._lease.doc
        if doc is None or key not in doc.waiting_cold.refs:
            return
        message = (
            "setting object of waiting children %s aside (its jobs wait until "
            "`osqueue segments readmit`): %s"
        )
        if self._asides.add(key, why, message):
            self.counters.set_aside += 1

    async def check_restored(self, key: str) -> int:
        """Before a ``Readmit`` of the object ``key``: it must be back as its reference
        recorded it (size, SHA-256, header, every line); else ``InvalidInput``
        naming ``key``.  Returns the live jobs it would readmit."""
        doc = self._lease.doc
        entry = doc.waiting_cold.aside.get(key) if doc is not None else None
        if entry is None:
            raise InvalidInput(f"object of waiting children {key} is not set aside", field="key")
        try:
            read(entry.ref, await self._get(key))
        except NotFound:
            raise InvalidInput(f"{key} is still missing; restore it first", field="key") from None
        except CorruptDocument as exc:
            raise InvalidInput(f"{key} still fails its check: {exc}", field="key") from exc
        self._paused.pop(key, None)
        return entry.ref.live

    def _pause(self, key: str, why: str, pause_s: float) -> None:
        self._paused[key] = self._clock.monotonic() + pause_s
        log.info("waiting children %s: %s", key, why, extra={"action": "load", "key": key})

    # ------------------------------------------------------------------ cancel

    async def locate(self, job_id: str) -> Cancel | None:
        """The ``Cancel`` of ``job_id`` in the object of waiting children holding it."""
        doc = self._lease.doc
        if doc is None:
            return None
        for ref in list(doc.waiting_cold):
            if not ref.min_id <= job_id <= ref.max_id or job_id in ref.cancelled:
                continue
            try:
                jobs = read(ref, await self._get(ref.key))
            except NotFound:  # loaded and deleted meanwhile, or missing: set aside
                self._broken(ref.key, "the object is missing")
                continue
            except CorruptDocument as exc:
                self._broken(ref.key, str(exc))
                continue
            if any(job.id == job_id for job in jobs):
                return Cancel(job_id, segment=ref.key)
        return None
