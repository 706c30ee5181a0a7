"""Heartbeats: every held job whose handler still runs is heartbeated on one timer.

A heartbeat answered :class:`~osqueue.errors.LeaseLost` (or ``JobNotFound``)
means the job belongs to someone else: it is counted lost and, once every job
of its unit is, the handler is cancelled (:meth:`Unit.lose`).  A transient
error is logged once per round and the next beat tries again.
"""

from __future__ import annotations

import asyncio
import logging

from osqueue.api import Job, QueueClient
from osqueue.client.worker.config import WorkerCounters
from osqueue.client.worker.handlers import error_line
from osqueue.client.worker.settle import GONE_ERRORS, note_lost
from osqueue.client.worker.units import Unit, Units
from osqueue.clock import Clock
from osqueue.errors import OsqueueError, Retryable

log = logging.getLogger(__name__)


class Heartbeats:
    """The heartbeat side task of a worker: :meth:`run` beats until cancelled."""

    def __init__(
        self,
        client: QueueClient,
        units: Units,
        counters: WorkerCounters,
        *,
        interval_s: float,
        clock: Clock,
    ) -> None:
        self._client = client
        self._units = units
        self._counters = counters
        self._interval_s = interval_s
        self._clock = clock

    async def run(self) -> None:
        while True:
            await self._clock.sleep(self._interval_s)
            beats = [
                (unit, job) for unit in self._units if not unit.settling for job in unit.live_jobs()
            ]
            if not beats:
                continue
            failures = [
                e
                for e in await asyncio.gather(*(self._beat(unit, job) for unit, job in beats))
                if e is not None
            ]
            if failures:
                log.warning(
                    "%d of %d heartbeats failed (%s); retrying on the next beat",
                    len(failures),
                    len(beats),
                    error_line(failures[0]),
                    extra={"action": "heartbeat", "failed": len(failures), "sent": len(beats)},
                )

    async def _beat(self, unit: Unit, job: Job) -> OsqueueError | None:
        """Heartbeat one job; a transient error is returned (the caller logs it once)."""
        try:
            await self._client.heartbeat(job)
        except GONE_ERRORS as exc:
            if unit.settling or unit not in self._units:
                return None
            note_lost(self._counters, job, exc)
            unit.lose(job)
        except Retryable as exc:
            return exc
        return None
