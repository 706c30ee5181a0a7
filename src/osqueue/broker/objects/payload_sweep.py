"""The payload sweep: every interval, delete the payload objects no job references
(and, by the same rule, the segment objects no reference names)."""

from __future__ import annotations

import logging

from osqueue.broker.cold.manager import SegmentManager
from osqueue.broker.core.lifecycle import Lifecycle
from osqueue.broker.lease.hold import Lease
from osqueue.broker.objects.payloads import Payloads
from osqueue.broker.observe.counters import BrokerCounters
from osqueue.clock import Clock
from osqueue.errors import StorageError

log = logging.getLogger(__name__)


class PayloadSweeper:
    """Runs :meth:`Payloads.sweep <osqueue.broker.objects.payloads.Payloads.sweep>` every
    ``interval_s`` while the broker serves.

    The objects it deletes are left behind by a push whose broker died between
    the upload and the commit (or whose outcome stayed unknown), and by a delete
    that failed after the job left.  An object is deleted only if two sweeps
    ``interval_s`` apart both found it unreferenced, no push of this broker is
    using it, and this broker's lease has more than half its length left (so no
    other broker can be committing).  Every upload has a key of its own, so a
    push retried elsewhere never writes an object a sweep deletes.  Owns the
    suspects one sweep hands to the next; a failed sweep is logged and tried
    again an interval later.  With ``segments``, each sweep also runs the
    segments' orphan sweep (:meth:`SegmentManager.sweep
    <osqueue.broker.cold.manager.SegmentManager.sweep>`), with suspects of its own.
    """

    def __init__(
        self,
        payloads: Payloads,
        clock: Clock,
        interval_s: float,
        *,
        counters: BrokerCounters,
        life: Lifecycle,
        lease: Lease,
        segments: SegmentManager | None = None,
    ) -> None:
        self._payloads = payloads
        self._clock = clock
        self._interval_s = interval_s
        self._counters = counters
        self._life = life
        self._lease = lease
        self._segments = segments

    def _may_delete(self) -> bool:
        return self._life.serving and self._lease.fresh()

    async def run(self) -> None:
        interval_s = self._interval_s
        suspects: set[str] = set()
        segment_suspects: set[str] = set()
        while True:
            await self._clock.sleep(interval_s)
            if not self._life.serving:
                return
            try:
                suspects, deleted = await self._payloads.sweep(
                    suspects, lambda: self._lease.doc, self._may_delete
                )
                self._counters.payloads_swept += deleted
            except StorageError as exc:
                self._counters.storage_error("payload_sweep")
                log.warning(
                    "payload sweep failed; trying again in %gs: %s",
                    interval_s,
                    exc,
                    extra={"action": "sweep"},
                )
            if self._segments is not None:
                try:
                    segment_suspects = await self._segments.sweep(segment_suspects)
                except StorageError as exc:
                    self._counters.storage_error("payload_sweep")
                    log.warning(
                        "segment orphan sweep failed; trying again in %gs: %s",
                        interval_s,
                        exc,
                        extra={"action": "sweep"},
                    )
