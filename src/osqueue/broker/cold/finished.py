"""The broker's I/O for the sealed record of finished jobs (``finished/``).

:mod:`osqueue.state.finished_objects` decides; this writes and reads between
commits.  After each commit (:meth:`FinishedObjects.committed`): once
``finished_seal_above_entries`` ``done`` entries sit in the document (all
kept only for children, or none: ``held``), a side task writes them whole to a new object and
then submits the ``SealFinished`` that references it (its key is in the
segment manager's ``writing`` set until then, so the orphan sweep leaves it;
a seal that did not apply leaves an object nothing names, deleted at once).

``result(job_id)`` for an id the document does not know asks
:meth:`FinishedObjects.lookup`: the unexpired objects whose id bounds hold it
are read (newest first) through a small cache of decoded objects, so a burst
of lookups reads each object once.  A missing or broken object is reported
and skipped (its entries answer as unknown).

A push naming a parent that sealed objects may hold comes back from the
transition as ``ReadToConfirm`` naming the parents and the objects;
:meth:`FinishedObjects.read_parents` reads them through the same cache and
returns the push with what it found (``Push.sealed_parents``), to submit
again.  An object that cannot be read holds nothing: the parent is not
found (``JobNotFound``), never taken for done.
"""

from __future__ import annotations

import logging
from collections import OrderedDict
from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING

import msgspec

from osqueue.api import FinishedStatus
from osqueue.errors import CorruptDocument, NotFound, StorageError
from osqueue.ids import new_id
from osqueue.state import Document, Policy, Transition
from osqueue.state.dedupe_filter import ReadToConfirm
from osqueue.state.finished_jobs import FinishedJob
from osqueue.state.finished_objects import build, plan_seal, read
from osqueue.state.finished_refs import FinishedRef
from osqueue.state.ops import ParentRead, Push, SealFinished
from osqueue.state.results import Answer, from_entry
from osqueue.storage.port import Storage

if TYPE_CHECKING:
    from osqueue.broker.core.intake import Intake
    from osqueue.broker.core.lifecycle import Lifecycle
    from osqueue.broker.core.tasks import SideTasks
    from osqueue.clock import Clock

log = logging.getLogger(__name__)

#: decoded sealed objects kept for lookups
_CACHED_OBJECTS = 8


@dataclass(slots=True)
class FinishedCounters:
    """What the broker did with sealed objects of the record."""

    seals: int = 0
    sealed_entries: int = 0
    failed_seals: int = 0
    reads: int = 0
    #: objects missing or failing their check when read
    broken: int = 0
    #: pushes whose parents were looked up in sealed objects
    parent_reads: int = 0


class FinishedObjects:
    """Seals of the record of finished jobs, and lookups in the sealed objects."""

    def __init__(
        self,
        storage: Storage,
        policy: Policy,
        clock: Clock,
        *,
        tasks: SideTasks,
        intake: Intake,
        life: Lifecycle,
        writing: set[str],
        delete: Callable[[str], None],
        changed: Callable[[], None],
    ) -> None:
        self._storage = storage
        self._policy = policy
        self._clock = clock
        self._tasks = tasks
        self._intake = intake
        self._life = life
        self._writing = writing
        self._delete = delete
        self._changed = changed
        self.counters = FinishedCounters()
        #: the seal in flight: True while written, then its op until a commit took it
        self._seal: SealFinished | None = None
        self._sealing = False
        self._cache: OrderedDict[str, dict[str, FinishedJob]] = OrderedDict()

    @property
    def busy(self) -> bool:
        return self._sealing

    def committed(self, t: Transition) -> None:
        doc = t.doc
        op = self._seal
        if op is not None and not self._intake.holds(op):
            self._seal, self._sealing = None, False
            self._writing.discard(op.ref.key)
            if doc.finished.sealed.holds(op.ref.key):
                self.counters.seals += 1
                self.counters.sealed_entries += op.ref.count
            else:  # it failed alone: nothing names the object
                self.counters.failed_seals += 1
                self._delete(op.ref.key)
            self._changed()
        life = self._life
        if self._sealing or not life.serving or life.closing:
            return
        above = self._policy.finished_seal_above_entries
        if above is None or len(doc.finished.entries) < above:  # one check while few
            return
        entries = plan_seal(doc, self._clock.now(), self._policy)
        if entries:
            self._sealing = True
            lines = [doc.finished.encoded(e.id) for e in entries]
            self._tasks.spawn(self._write(entries, lines), "osqueue-finished-seal")

    async def _write(self, entries: list[FinishedJob], lines: list[bytes]) -> None:
        op, data = build(entries, new_id(), lines)
        key = op.ref.key
        self._writing.add(key)
        try:
            await self._storage.put(key, data)
        except StorageError as exc:
            log.warning("could not seal finished jobs: %s", exc, extra={"action": "seal"})
            self._give_up(key)
            return
        except BaseException:
            self._give_up(key)
            raise
        life = self._life
        if not life.serving or life.closing:
            self._give_up(key)
            return
        self._seal = op
        self._intake.add_internal(op)

    def _give_up(self, key: str) -> None:
        self._writing.discard(key)
        self._sealing = False
        self._changed()

    # ------------------------------------------------------------------ lookups

    async def lookup(
        self, job_id: str, doc: Document | None, hot: Answer | None = None
    ) -> Answer | None:
        """``result(job_id)``'s answer from the sealed objects of ``doc`` (None: none
        holds an unexpired entry of it).  ``hot``: what the document answered (a
        done job still in it); an entry of another finish of the same id (pushed
        again after its dedupe window) is not its answer."""
        if doc is None or not doc.finished.sealed:
            return None
        now = self._clock.now()
        for ref in doc.finished.sealed.candidates(job_id, now):
            entries = await self._entries(ref)
            entry = entries.get(job_id) if entries is not None else None
            if entry is not None:
                finished_at = hot.result.finished_at if hot is not None else None
                if finished_at is not None and finished_at != entry.finished_at.timestamp():
                    return None
                return from_entry(entry) if now <= entry.expires_at else None
        return None

    async def read_parents(self, op: Push, asked: ReadToConfirm, doc: Document) -> Push:
        """``op`` with the parents ``asked`` names as the objects ``asked.keys`` hold
        them (newest first; a parent none holds is recorded as read there)."""
        self.counters.parent_reads += 1
        refs = [r for r in reversed(doc.finished.sealed.refs.values()) if r.key in asked.keys]
        found: dict[str, ParentRead] = {p.id: p for p in op.sealed_parents}
        for parent in asked.parents:
            status: FinishedStatus | None = None
            read: list[str] = []
            for ref in refs:
                if not ref.min_id <= parent <= ref.max_id:
                    continue
                read.append(ref.key)
                entries = await self._entries(ref)
                entry = entries.get(parent) if entries is not None else None
                if entry is not None:
                    status = entry.status
                    break
            before = found.get(parent)
            keys = (*before.keys, *read) if before is not None else tuple(read)
            # the keys asked about but not read (a reference gone since): read as empty
            keys += tuple(k for k in asked.keys if k not in keys)
            found[parent] = ParentRead(parent, status, keys)
        return msgspec.structs.replace(op, sealed_parents=tuple(found.values()))

    async def _entries(self, ref: FinishedRef) -> dict[str, FinishedJob] | None:
        cached = self._cache.get(ref.key)
        if cached is not None:
            self._cache.move_to_end(ref.key)
            return cached
        self.counters.reads += 1
        try:
            entries = read(ref, await self._storage.get(ref.key))
        except (NotFound, CorruptDocument) as exc:
            self.counters.broken += 1
            log.error(
                "sealed record %s cannot be read (its entries answer as unknown): %s",
                ref.key,
                exc,
                extra={"action": "lookup", "key": ref.key},
            )
            return None
        self._cache[ref.key] = entries
        while len(self._cache) > _CACHED_OBJECTS:
            self._cache.popitem(last=False)
        return entries
