"""The result sweep: every interval, delete the result objects nothing references.

It follows the payload sweep's rule (:mod:`osqueue.broker.objects.orphans`, the same
function), on its own interval (``result_sweep_interval_s``): result objects
expire with their entries, so they are swept more often than payload objects.
"""

from __future__ import annotations

import logging

from osqueue.broker.core.lifecycle import Lifecycle
from osqueue.broker.lease.hold import Lease
from osqueue.broker.objects.results import ResultObjects
from osqueue.broker.observe.counters import BrokerCounters
from osqueue.clock import Clock
from osqueue.errors import StorageError

log = logging.getLogger(__name__)


class ResultSweeper:
    """Runs :meth:`ResultObjects.sweep <osqueue.broker.objects.results.ResultObjects.sweep>`
    every ``interval_s`` while the broker serves.

    The objects it deletes belong to entries of the record of finished jobs
    that expired or were evicted, and to uploads whose completion never
    committed.  An object goes only if two sweeps ``interval_s`` apart both
    found it unreferenced, no completion of this broker is using it, and this
    broker's lease has more than half its length left.  Owns the suspects one
    sweep hands to the next; a failed sweep is logged and tried again an
    interval later.
    """

    def __init__(
        self,
        results: ResultObjects,
        clock: Clock,
        interval_s: float,
        *,
        counters: BrokerCounters,
        life: Lifecycle,
        lease: Lease,
    ) -> None:
        self._results = results
        self._clock = clock
        self._interval_s = interval_s
        self._counters = counters
        self._life = life
        self._lease = lease

    def _may_delete(self) -> bool:
        return self._life.serving and self._lease.fresh()

    async def run(self) -> None:
        suspects: set[str] = set()
        while True:
            await self._clock.sleep(self._interval_s)
            if not self._life.serving:
                return
            try:
                suspects, deleted = await self._results.sweep(
                    suspects, lambda: self._lease.doc, self._may_delete
                )
                self._counters.results_swept += deleted
            except StorageError as exc:
                self._counters.storage_error("result_sweep")
                log.warning(
                    "result sweep failed; trying again in %gs: %s",
                    self._interval_s,
                    exc,
                    extra={"action": "sweep"},
                )
