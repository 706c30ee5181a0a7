"""Long polls: claims parked until a commit makes a job claimable, and ``result()``
calls parked until a commit finishes their job."""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from osqueue.clock import Clock
from osqueue.state import Claimed, ClaimOp, Document, Result, claimable
from osqueue.state.limits import capacity_now
from osqueue.state.results import Answer, answer

if TYPE_CHECKING:
    from osqueue.broker.core.intake import Intake
    from osqueue.broker.core.lifecycle import Lifecycle


@dataclass(slots=True)
class _Waiter:
    queues: tuple[str, ...]
    future: asyncio.Future[None]
    max_jobs: int = 1
    #: room of limited queues promised to this claim when it was woken
    spent: dict[str, float] = field(default_factory=dict)


class Waiters:
    """The claims parked until a commit makes a job of their queues claimable.

    Owns the parked claims.  :meth:`claim` submits a claim and, while it comes
    back empty, parks it until a commit (or the clock, for a delayed job: the
    commit loop arms a timer while claims are parked) makes a job claimable, or
    its wait runs out.  The commit loop wakes the claims a commit serves
    (:meth:`wake`); a stop or a step-down releases them all (:meth:`release`).

    Owns the parked ``result()`` calls too (:meth:`finished`): by job id, each
    woken by the commit that finishes its job (:meth:`wake_finished`, with the
    ids of :attr:`Transition.finished <osqueue.state.Transition.finished>`).
    """

    def __init__(self, clock: Clock, intake: Intake, life: Lifecycle) -> None:
        self._clock = clock
        self._intake = intake
        self._life = life
        #: the parked claims (the commit loop looks at this list on every commit)
        self.parked: list[_Waiter] = []
        #: limited queue -> room promised to woken claims whose own claim has not
        #: committed yet (a later wake does not hand it out again)
        self._promised: dict[str, float] = {}
        #: job id -> the parked ``result()`` calls waiting for it to finish
        self.results: dict[str, list[asyncio.Future[None]]] = {}

    async def claim(self, op: ClaimOp, wait_s: float) -> Result:
        """A claim that, if empty, parks until a commit makes a job claimable."""
        clock = self._clock
        deadline = clock.monotonic() + max(0.0, wait_s)
        promised: _Waiter | None = None  # woken with room promised: released once it claimed
        try:
            while True:
                result = await self._intake.add_op(op)
                if promised is not None:
                    self._unpromise(promised)
                    promised = None
                if not isinstance(result, Claimed) or result.jobs:
                    return result
                remaining = deadline - clock.monotonic()
                if remaining <= 0 or self._life.closing:
                    return result
                waiter = _Waiter(op.queues, asyncio.get_running_loop().create_future(), op.max_jobs)
                self.parked.append(waiter)
                self._intake.wake()  # let the loop arm a timer for delayed jobs
                try:
                    await self._race(waiter.future, remaining)
                finally:
                    if waiter in self.parked:
                        self.parked.remove(waiter)
                    if waiter.spent:
                        promised = waiter
                self._life.check_open()
        finally:
            if promised is not None:
                self._unpromise(promised)

    def _unpromise(self, waiter: _Waiter) -> None:
        for q, spent in waiter.spent.items():
            left = self._promised.get(q, 0.0) - spent
            if left > 1e-9:
                self._promised[q] = left
            else:
                self._promised.pop(q, None)
        waiter.spent.clear()

    async def finished(
        self, job_id: str, wait_s: float, document: Callable[[], Document | None]
    ) -> Answer | None:
        """How ``job_id`` finished (:func:`osqueue.state.results.answer` on the
        committed ``document()``), parking until a commit finishes it or
        ``wait_s`` runs out (then its live status); None for an unknown id."""
        clock = self._clock
        deadline = clock.monotonic() + max(0.0, wait_s)
        while True:
            self._life.check_open()
            doc = document()
            found = None if doc is None else answer(doc, job_id, clock.now())
            if found is None or found.result.finished:
                return found
            remaining = deadline - clock.monotonic()
            if remaining <= 0 or self._life.closing:
                return found
            future = asyncio.get_running_loop().create_future()
            parked = self.results.setdefault(job_id, [])
            parked.append(future)
            try:
                await self._race(future, remaining)
            finally:
                if future in parked:
                    parked.remove(future)
                if not parked and self.results.get(job_id) is parked:
                    del self.results[job_id]

    def wake_finished(self, ids: Iterable[str]) -> None:
        """Wake the ``result()`` calls parked on these jobs (a commit finished them)."""
        results = self.results
        for job_id in ids:
            for future in results.pop(job_id, ()):
                if not future.done():
                    future.set_result(None)

    async def _race(self, fut: asyncio.Future[None], timeout_s: float) -> None:
        sleeper = asyncio.ensure_future(self._clock.sleep(timeout_s))
        try:
            await asyncio.wait({fut, sleeper}, return_when=asyncio.FIRST_COMPLETED)
        finally:
            sleeper.cancel()

    def wake(self, doc: Document | None) -> None:
        """Wake the parked claims that ``doc`` has a claimable job for now.  A queue
        whose settings limit its claims (a rate, ``max_claimed``) wakes only as
        many as it has room for, not every claim parked on it."""
        if not self.parked or doc is None:
            return
        now = self._clock.now()
        room: dict[str, float] = {}  # limited queues: jobs left to hand out in this wake
        for w in list(self.parked):
            if w.future.done() or not claimable(doc, w.queues, now):
                continue
            if doc.queue_settings and not self._take_room(doc, w, now, room):
                continue
            w.future.set_result(None)

    def _take_room(self, doc: Document, w: _Waiter, now: float, room: dict[str, float]) -> bool:
        """Promise ``w`` its share of its queues' room (what the limits allow now, less
        what earlier woken claims were promised); False when every queue it asks
        for is limited and has none left."""
        want = float(w.max_jobs)
        found = False
        for q in w.queues:
            if q not in room:
                cap = capacity_now(doc, q, now)
                if cap is None:
                    return True  # a queue without a limit on claims: no need to ration
                room[q] = cap - self._promised.get(q, 0.0)
            if room[q] > 0:
                found = True
                spent = min(room[q], want)
                room[q] -= spent
                want -= spent
                w.spent[q] = w.spent.get(q, 0.0) + spent
                self._promised[q] = self._promised.get(q, 0.0) + spent
                if want <= 0:
                    break
        return found

    def release(self) -> None:
        """Wake every parked claim and ``result()`` (the broker stops or steps down)."""
        for w in self.parked:
            if not w.future.done():
                w.future.set_result(None)
        self.wake_finished(list(self.results))
