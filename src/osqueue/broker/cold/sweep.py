"""Deleting segment objects: those a commit dropped or a failed spill left, and
orphans, by the payload sweep's rule.

An orphan is an object under ``segments/`` (or ``waiting/``, ``finished/``)
that no reference names and no spill of this broker is writing
(:attr:`SegmentManager.writing <osqueue.broker.cold.manager.SegmentManager.writing>`):
left by a broker that died
between a ``put`` and its commit, by a ``Spill`` whose commit never landed, or
by a delete that failed.  :meth:`SegmentDeletes.sweep` (run with the payload
sweep, every ``payload_sweep_interval_s``) lists ``segments/``; an object two
sweeps an interval apart both found orphaned is *doomed*, and deleted right
after the next commit (:meth:`SegmentDeletes.orphans_after`) if the document
that commit wrote, which is what is stored, still names it nowhere, with this
broker's lease just renewed (so no other broker can be committing).  A
referenced object is never deleted.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING

from osqueue.errors import NotFound, StorageError
from osqueue.state import SEGMENT_PREFIX, Document
from osqueue.state.cold_dead import DEAD_PREFIX
from osqueue.state.cold_delayed import DELAYED_PREFIX
from osqueue.state.finished_refs import FINISHED_PREFIX
from osqueue.state.waiting_refs import WAITING_PREFIX
from osqueue.storage.port import Storage

if TYPE_CHECKING:
    from osqueue.broker.core.lifecycle import Lifecycle
    from osqueue.broker.core.tasks import SideTasks
    from osqueue.broker.lease.hold import Lease

log = logging.getLogger(__name__)


@dataclass(slots=True)
class SegmentCounters:
    """What the broker did with segments (``Broker.segments.counters``)."""

    spills: int = 0
    spilled_jobs: int = 0
    loads: int = 0
    loaded_jobs: int = 0
    #: objects deleted after their last jobs were loaded, or a failed spill's
    deleted: int = 0
    #: orphans the sweep deleted
    swept: int = 0
    failed_spills: int = 0
    failed_loads: int = 0
    #: commits whose claims stopped at a barrier (and waited a commit for a load)
    starved: int = 0
    #: segments set aside (their object missing or failing its check)
    set_aside: int = 0
    #: commits that waited for a spill's objects (``spill_hold_bytes``)
    held_commits: int = 0
    #: compactions committed, and the segments they merged
    compactions: int = 0
    compacted_segments: int = 0
    failed_compactions: int = 0


class SegmentDeletes:
    """The deletes of segment objects in flight, and the orphans due for deletion."""

    def __init__(
        self,
        storage: Storage,
        *,
        tasks: SideTasks,
        lease: Lease,
        life: Lifecycle,
        counters: SegmentCounters,
        writing: set[str],
        done: Callable[[], None],
    ) -> None:
        self._storage = storage
        self._tasks = tasks
        self._lease = lease
        self._life = life
        self._counters = counters
        #: the keys spills are writing (the manager's set: never an orphan)
        self._writing = writing
        #: called after each delete ends
        self._done = done
        #: deletes in flight
        self.deleting = 0
        #: orphans two sweeps agreed on, deleted after the next commit
        self.doomed: set[str] = set()

    def delete(self, key: str) -> None:
        """Delete ``key`` in a side task (a failure is logged: the sweep takes it later)."""
        self.deleting += 1
        self._tasks.spawn(self._remove(key), "osqueue-segment-delete")

    async def _remove(self, key: str) -> None:
        try:
            await self._storage.delete(key)
        except NotFound:
            pass
        except StorageError as exc:
            log.warning("could not delete a segment object: %s", exc, extra={"key": key})
        finally:
            self.deleting -= 1
            self._done()

    def orphan(self, key: str, doc: Document | None) -> bool:
        """No reference of ``doc`` names ``key`` (listed or set aside: a set-aside
        object may be restored and readmitted), and no spill is writing it."""
        if doc is None or key in self._writing:
            return False
        held = doc.segments.holds(key) or doc.waiting_cold.holds(key)
        held = held or doc.dead.holds(key) or doc.delayed.holds(key)  # (cold_dead, cold_delayed)
        return not held and not doc.finished.sealed.holds(key)

    async def sweep(self, suspects: set[str]) -> set[str]:
        """One sweep over ``segments/``: the orphans now (checked against the held
        document); those the previous sweep found too (``suspects``) are doomed.
        Returns the orphans, the next sweep's suspects."""
        listed = await self._storage.list(SEGMENT_PREFIX)
        listed += await self._storage.list(DELAYED_PREFIX)
        listed += await self._storage.list(WAITING_PREFIX)  # waiting children's objects
        listed += await self._storage.list(FINISHED_PREFIX)  # the sealed record's
        listed += await self._storage.list(DEAD_PREFIX)
        orphans = {key for key in listed if self.orphan(key, self._lease.doc)}
        self.doomed |= orphans & suspects
        return orphans

    def orphans_after(self, doc: Document) -> list[str]:
        """After a commit (``doc`` is what is stored, the lease just renewed): delete
        the doomed orphans ``doc`` does not name; returns their keys."""
        if not self._life.serving or not self._lease.fresh():
            return []
        doomed, self.doomed = self.doomed, set()
        swept = [key for key in sorted(doomed) if self.orphan(key, doc)]
        for key in swept:
            self.delete(key)
        if swept:
            self._counters.swept += len(swept)
            log.info(
                "deleting %d segment objects no reference names",
                len(swept),
                extra={"action": "sweep"},
            )
        return swept
