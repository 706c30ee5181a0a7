"""Pushes sent again after they were acknowledged: the dedupe of jobs that left.

A client whose answer was lost after the commit sends the same push again, and
it must be applied once (I2).  The producers do that for answers lost on the
way (``answer_lost``), but they send again at once, while the job is still in
the document.  In the families that set ``resends`` ("waiting-cold",
"dead-segments") the :class:`Resender` also sends again, a few times during
the faults, acknowledged pushes whose jobs the last version no longer holds:
moved to an object of waiting children or a dead segment (whose reference's
id filter must answer: the broker reads the object to confirm), or finished
and gone (a tombstone answers).  Each must be answered with its id and never
make a second job (NOT_RECREATED); any other answer is unexpected.  Only
pushes first sent well within the dedupe window are sent again (as the
producers give up: see ``Producer._abandon_stale``).

Its timing and choices come from a side RNG of its own.
"""

from __future__ import annotations

import asyncio
import random
from functools import partial
from typing import TYPE_CHECKING

from osqueue.api import NewJob
from osqueue.broker.inproc.client import LocalClient
from osqueue.errors import Retryable
from osqueue.state import decode
from sim.actors import Client
from sim.history import Kind

if TYPE_CHECKING:
    from sim.run import Sim

#: pushes sent again per round at most
_BATCH = 6


class Resender(Client):
    """Sends acknowledged pushes of jobs that left the document again."""

    def __init__(self, sim: Sim, name: str) -> None:
        super().__init__(sim, name)
        self.rng = random.Random(f"osqueue-sim-resend/{sim.cfg.seed}")

    def _candidates(self) -> list[NewJob]:
        """Acknowledged pushes, first sent within the bound, whose jobs the last
        version holds no more: those an object's id bounds admit (cold) if any."""
        sim = self.sim
        landed = sim.store.landed
        if not landed:
            return []
        doc = decode(landed[-1].data)
        acked = sim.history.ids(Kind.PUSH_ACK)
        bound = sim.now() - 0.3 * sim.cfg.dedupe_window_s
        left = [
            job
            for p in sim.producers
            for job in p.jobs
            if job.id in acked and job.id not in doc.jobs and p.first_sent.get(job.id, 0.0) > bound
        ]
        refs = [*doc.dead, *doc.waiting_cold]
        cold = [j for j in left if any(r.min_id <= str(j.id) <= r.max_id for r in refs)]
        return cold or left

    async def run(self) -> None:
        cfg = self.sim.cfg
        for _ in range(cfg.resends):
            await asyncio.sleep(self.rng.uniform(0.5, 1.0) * cfg.fault_phase_s / cfg.resends)
            found = self._candidates()
            if found:
                await self._send(self.rng.sample(found, min(_BATCH, len(found))))

    async def _send(self, jobs: list[NewJob]) -> None:
        sim = self.sim
        try:
            results, _ = await self.call(partial(LocalClient.push_results, jobs=jobs))
        except Retryable:
            return  # maybe applied: as good a re-send as any
        for job, result in zip(jobs, results, strict=True):
            sim.faults["push_resent"] += 1
            if isinstance(result, Retryable):
                continue
            if result != job.id:
                error = result if isinstance(result, BaseException) else None
                sim.unexpected(f"push of {job.id} sent again answered {result!r}", error)
