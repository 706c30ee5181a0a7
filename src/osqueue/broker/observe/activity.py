"""The periodic INFO line that reports what the broker did (its counters, the
held document, the ops waiting)."""

from __future__ import annotations

import logging

from osqueue.broker.core.intake import Intake
from osqueue.broker.core.lifecycle import Lifecycle
from osqueue.broker.lease.hold import Lease
from osqueue.broker.observe.counters import BrokerCounters
from osqueue.clock import Clock

log = logging.getLogger(__name__)


class ActivityLog:
    """Logs what the broker did in each ``interval_s`` (INFO, with the numbers as
    structured fields), so an operator sees its pace and its trouble.  Owns
    nothing but the totals of the last line; it reads the counters, the held
    document and the ops waiting, and ends when the broker stops serving."""

    def __init__(
        self,
        counters: BrokerCounters,
        clock: Clock,
        interval_s: float,
        *,
        life: Lifecycle,
        lease: Lease,
        intake: Intake,
    ) -> None:
        self._counters = counters
        self._clock = clock
        self._interval_s = interval_s
        self._life = life
        self._lease = lease
        self._intake = intake

    async def run(self) -> None:
        interval_s = self._interval_s
        last = self._counters.totals()
        while True:
            await self._clock.sleep(interval_s)
            doc = self._lease.doc
            if not self._life.serving or doc is None:
                return
            now = self._counters.totals()
            commits, ops, conflicts, errors, archives, written = (
                a - b for a, b in zip(now, last, strict=True)
            )
            last = now
            log.info(
                "%d commits (%.1f/s), %d ops (%.1f per commit), %d conflicts, "
                "%d storage errors, %d archive objects; %d jobs, document ~%d bytes",
                commits,
                commits / interval_s,
                ops,
                ops / commits if commits else 0.0,
                conflicts,
                errors,
                archives,
                len(doc.jobs),
                doc.size_bytes(),
                extra={
                    "action": "stats",
                    "broker": self._lease.broker_id,
                    "interval_s": interval_s,
                    "commits": commits,
                    "ops": ops,
                    "conflicts": conflicts,
                    "storage_errors": errors,
                    "archives": archives,
                    "write_bytes": written,
                    "jobs": len(doc.jobs),
                    "pending_ops": len(self._intake.pending),
                },
            )
