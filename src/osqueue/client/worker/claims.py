"""The claim loop: claim as many jobs as there are free slots, and carry completions.

One side task claims in batches (``max_jobs`` = free slots, at most one
claim's limit).  With nothing to carry it long-polls (``wait_s``; the
:class:`~osqueue.client.worker.relay.CompletionRelay` is parked meanwhile, so
completions go out on their own).  With completions queued on the relay it
sends them with a claim that does not wait (``complete_and_claim``: one call,
one commit).  With no free slot it waits for a change (a slot freed, a unit
gone, a completion queued, the stop).  A transient error backs off
(:class:`~osqueue.backoff.Backoff`) and gives the queued completions back to
their tasks; the stop interrupts a long poll and a backoff, and jobs claimed
while stopping are released at once.  With ``burst`` it stops the worker once
a claim comes back empty and nothing is held.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable, Sequence

from osqueue.api import Job, QueueClient
from osqueue.backoff import Backoff
from osqueue.client.worker.config import ClaimCall, WorkerConfig, WorkerCounters
from osqueue.client.worker.handlers import error_line
from osqueue.client.worker.relay import (
    SEND_ALONE,
    CompletionRelay,
    Failed,
    Ride,
    answer_all,
    answer_each,
)
from osqueue.client.worker.settle import Settler
from osqueue.client.worker.units import Units
from osqueue.client.worker.wait import first_of
from osqueue.clock import Clock
from osqueue.errors import OsqueueError, Retryable

log = logging.getLogger(__name__)

#: The wait after the ``n``-th failed claim in a row.
CLAIM_BACKOFF = Backoff(base_s=0.05, cap_s=5.0)


class ClaimLoop:
    """The claim side task of a worker; see the module docstring."""

    def __init__(
        self,
        client: QueueClient,
        config: WorkerConfig,
        *,
        worker_id: str,
        queues: Sequence[str],
        units: Units,
        relay: CompletionRelay,
        settler: Settler,
        counters: WorkerCounters,
        stop: asyncio.Event,
        clock: Clock,
        on_burst_done: Callable[[], None],
    ) -> None:
        self._client = client
        self._config = config
        self._worker_id = worker_id
        self._queues = queues
        self._units = units
        self._relay = relay
        self._settler = settler
        self._counters = counters
        self._stop = stop
        self._clock = clock
        self._on_burst_done = on_burst_done

    async def run(self) -> None:
        """Claim until the worker stops (or, with ``burst``, nothing is left)."""
        failures = 0
        try:
            while not self._stop.is_set():
                free = self._units.free_slots()
                rides = self._relay.take()
                if free <= 0:
                    answer_all(rides, SEND_ALONE)
                    await self._wait_change()
                    continue
                try:
                    jobs = await self._claim_carrying(rides, free)
                except Retryable as exc:
                    if self._counters.records is not None:
                        self._counters.records.claim_failures += 1
                    await self._back_off(exc, failures)
                    failures += 1
                    continue
                failures = 0
                if jobs is None or not await self._take(jobs, carried=bool(rides)):
                    return
        finally:
            self._relay.send_all_alone()

    async def _claim_carrying(self, rides: list[Ride], free: int) -> list[Job] | None:
        """Claim up to ``free`` jobs, carrying ``rides`` if any; None when stopping."""
        try:
            if rides:
                return await self._complete_and_claim(rides, free)
            wait_s = 0.0 if self._config.burst else self._config.wait_s
            self._relay.parked = wait_s > 0
            return await self._claim(free, wait_s)
        finally:
            self._relay.parked = False

    async def _take(self, jobs: list[Job], *, carried: bool) -> bool:
        """Run what a claim brought; False when the loop is done (burst, nothing left)."""
        if jobs:
            self._counters.took(jobs)
            self._units.dispatch(jobs)
            return True
        if carried or not self._config.burst:
            return True  # the next claim may wait (long poll)
        if not self._units:
            log.info("burst: nothing left", extra={"action": "burst_done"})
            self._on_burst_done()
            return False
        await self._wait_change()
        return True

    async def _back_off(self, exc: OsqueueError, failures: int) -> None:
        """Wait out a failed claim (interrupted by the stop); completions go out alone."""
        delay_s = CLAIM_BACKOFF.delay_s(failures)
        log.warning(
            "claim failed; backing off",
            extra={"action": "claim", "error": error_line(exc), "backoff_s": delay_s},
        )
        self._relay.parked = True  # completions do not wait out the backoff
        try:
            self._relay.send_all_alone()
            await first_of(self._clock.sleep(delay_s), self._stop.wait())
        finally:
            self._relay.parked = False

    async def _wait_change(self) -> None:
        self._units.changed.clear()
        if not self._relay.pending:  # a completion queued before the clear is a change
            await self._units.changed.wait()

    async def _complete_and_claim(self, rides: list[Ride], free: int) -> list[Job] | None:
        """Complete the carried jobs and claim up to ``free`` in one call (not
        interrupted by stop: it does not wait); None when stopping (jobs it got are
        released)."""
        done = [ride.job for ride in rides]
        results = [ride.result for ride in rides]
        sent = self._clock.monotonic()
        try:
            errors, jobs = await self._client.complete_and_claim(
                done, self._worker_id, self._queues, max_jobs=free, results=results
            )
        except BaseException as exc:
            answer_all(rides, Failed(exc) if isinstance(exc, OsqueueError) else SEND_ALONE)
            raise
        self._round_trip("complete_and_claim", sent)
        answer_each(rides, errors)
        return await self._unless_stopping(jobs)

    async def _claim(self, max_jobs: int, wait_s: float) -> list[Job] | None:
        """One claim, interrupted by the stop; None when stopping (jobs it got are released)."""
        sent = self._clock.monotonic()
        call = asyncio.ensure_future(
            self._client.claim(self._worker_id, self._queues, max_jobs=max_jobs, wait_s=wait_s)
        )
        await first_of(call, self._stop.wait())
        if not call.done():
            call.cancel()
            await asyncio.wait({call})
        if call.cancelled():
            return None
        jobs = call.result()
        self._round_trip("claim", sent)
        return await self._unless_stopping(jobs)

    def _round_trip(self, call: ClaimCall, sent: float) -> None:
        """Record an answered claim call sent at ``sent`` (metrics on)."""
        records = self._counters.records
        if records is not None:
            records.claim_seconds[call].observe(self._clock.monotonic() - sent)

    async def _unless_stopping(self, jobs: list[Job]) -> list[Job] | None:
        """``jobs``, or None once the worker stops (then they are released)."""
        if self._stop.is_set():
            self._counters.took(jobs)
            await self._settler.release(jobs)
            return None
        return jobs
