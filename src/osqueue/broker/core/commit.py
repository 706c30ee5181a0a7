"""The group commit: the broker's one writer.

Every cycle takes the ops waiting (at most ``max_batch_ops``), applies them
to the held document with the pure :func:`osqueue.state.transition`, and
writes the new version with one compare-and-set (:meth:`CommitLoop.write_batch`).
No op is answered before that write is durable; one bad op fails alone.  A
failed write is resolved by reading back (:meth:`osqueue.broker.lease.hold.Lease.resolve`):
our own landed write counts as committed, another broker's ownership makes
this broker step down, otherwise the batch is re-applied on what is stored.
"""

from __future__ import annotations

import asyncio
import logging
import types
from collections.abc import Awaitable, Callable, Generator

from osqueue.broker.archive.writer import Archiver
from osqueue.broker.cold.manager import SegmentManager
from osqueue.broker.config import BrokerConfig
from osqueue.broker.core.intake import Futures, Intake, answer_all
from osqueue.broker.core.lifecycle import Lifecycle, State
from osqueue.broker.core.retry import StorageRetry
from osqueue.broker.core.tasks import SideTasks
from osqueue.broker.core.waiters import Waiters
from osqueue.broker.core.wakeups import commit_due, idle_timeout_s
from osqueue.broker.lease.hold import Lease, Reapply, StepDown
from osqueue.broker.objects.payloads import Payloads
from osqueue.broker.observe.counters import BrokerCounters, CommitRecords
from osqueue.clock import Clock, Timer
from osqueue.errors import (
    BrokerUnavailable,
    Conflict,
    DocumentGone,
    MaybeCommitted,
    OsqueueError,
    StorageError,
)
from osqueue.state import DOCUMENT_KEY, Document, Load, Op, Transition, encode, transition
from osqueue.state.document import HEAD_SLACK_BYTES
from osqueue.storage.port import Blob, Storage

log = logging.getLogger(__name__)

_ENDED = (State.STEPPED_DOWN, State.FAILED)
#: turns of the event loop an urgent commit of the broker's own ops waits for
#: callers' ops to join it
_URGENT_YIELDS = 3


class CommitLoop:
    """The loop that folds every pending op into one compare-and-set write per cycle.

    Owns the cycle: wait (parked on the intake, with one timer for the lease
    renewal or a delayed job a parked claim waits for), take a batch, write it
    (:meth:`write_batch`), answer its ops, and pass on what the commit leaves to
    do: archive objects to write, payload objects to delete, parked claims to
    wake, segments to spill, load or delete.  When a write shows the broker must
    end (another broker owns the document, or it is gone), it ends it: every
    waiting op is answered.  A graceful stop ends with one last write that
    clears the address.
    """

    def __init__(
        self,
        storage: Storage,
        config: BrokerConfig,
        clock: Clock,
        *,
        counters: BrokerCounters,
        retry: StorageRetry,
        life: Lifecycle,
        lease: Lease,
        intake: Intake,
        waiters: Waiters,
        archiver: Archiver,
        payloads: Payloads,
        tasks: SideTasks,
        segments: SegmentManager,
    ) -> None:
        self._storage = storage
        self._clock = clock
        self._policy = config.policy()
        self._renew_s = config.renew_interval_s
        self._hold_bytes = config.spill_hold_bytes
        #: the document this loop last wrote, and that write's size: while the lease
        #: holds it, the hold's look at the size is an int compare
        self._sized: tuple[Document | None, int] = (None, 0)
        self._drain_timeout_s = config.drain_timeout_s
        self._counters = counters
        self._retry = retry
        self._life = life
        self._lease = lease
        self._intake = intake
        self._waiters = waiters
        self._archiver = archiver
        self._payloads = payloads
        self._tasks = tasks
        self._segments = segments
        self._ahead = segments.cache.ahead
        #: one renewal/wake-up timer, kept while it would fire no later than needed
        self._timer: Timer | None = None
        self._timer_at = 0.0

    async def run(self) -> None:
        """Commit until the broker stops, steps down or fails."""
        life = self._life
        try:
            await self._cycles()
        except asyncio.CancelledError:
            raise
        except OsqueueError as exc:
            self._fail(exc)
        except Exception as exc:  # a bug: stop loudly, and leave no op waiting forever
            log.exception("broker commit loop crashed", extra={"action": "fail"})
            self._fail(BrokerUnavailable(f"the broker stopped on an internal error: {exc!r}"))
        finally:
            if self._timer is not None:
                self._timer.cancel()
                self._timer = None
            if life.state is State.SERVING:
                life.state = State.STOPPED
            life.closed.set()

    async def _cycles(self) -> None:
        """Wait, take a batch, write it; until the last write of a graceful stop, or
        a write that ends the broker."""
        intake, life = self._intake, self._life
        while True:
            if not intake.pending:
                if life.closing:
                    await self._final_commit()
                    return
                await self._idle_wait()
                if not intake.pending and not self._due_for_commit():
                    continue
            if self._may_hold():
                await self._hold_for_spill()
            batch, futures = intake.take_batch()
            try:
                await self.write_batch(batch, futures)
            except (asyncio.CancelledError, Exception):  # a hard stop mid-write, or a bug
                unknown = MaybeCommitted("the broker stopped before confirming this op")
                answer_all(futures, unknown)
                raise
            if not life.serving and life.state in _ENDED:
                return

    # ------------------------------------------------------------------ waiting

    def _due_for_commit(self) -> bool:
        """A commit is due: ops wait, or (an idle commit) the lease renewal, a segment
        load or spill, a schedule tick, or a sweep a parked claim waits on
        (:mod:`osqueue.broker.core.wakeups`)."""
        if self._intake.pending or self._intake.urgent:
            return True
        if self._clock.monotonic() - self._lease.written_at >= self._renew_s:
            return True
        doc = self._lease.doc
        if doc is None:
            return False
        return commit_due(doc, self._policy, self._clock.now(), bool(self._waiters.parked))

    def _timer_fired(self) -> None:
        self._timer = None
        self._intake.wake()

    def _arm_timer(self, timeout: float, mono: float) -> None:
        """Make sure the loop wakes within ``timeout`` of ``mono`` (the clock's
        monotonic time now).  An earlier timer is kept: it wakes the loop early
        once, and the loop arms again."""
        at = mono + timeout
        if self._timer is not None:
            if self._timer_at <= at:
                return
            self._timer.cancel()
        self._timer = None
        call_later = getattr(self._clock, "call_later", None)
        if call_later is not None:
            self._timer = call_later(timeout, self._timer_fired)
        else:  # a clock with sleep only
            sleeper = asyncio.ensure_future(self._clock.sleep(timeout))
            sleeper.add_done_callback(lambda f: None if f.cancelled() else self._timer_fired())
            self._timer = sleeper
        self._timer_at = at

    async def _idle_wait(self) -> None:
        waiters, lease = self._waiters, self._lease
        if self._intake.urgent and not self._intake.pending:
            # The broker's own load or spill is ready, and the callers the last commit
            # answered have not run yet: let them send their next ops first, so those
            # ride in this commit instead of waiting a whole write behind it.
            for _ in range(_URGENT_YIELDS):
                await asyncio.sleep(0)
                if self._intake.pending:
                    break
            return
        if self._intake.pending or self._life.closing:
            return
        # The callers the last commit answered run first: their next ops arrive
        # with no park and no wake-up (a closed loop's common case).  What came
        # meanwhile called no wake-up either, so all of it is looked at again.
        await _one_turn()
        if self._intake.pending or self._intake.urgent or self._life.closing:
            return
        # Parked claims, once before idling: one parked during the yield missed the
        # last commit's wake-up (each early return above leads to a commit's own).
        if waiters.parked:
            waiters.wake(lease.doc)
        mono = self._clock.monotonic()
        timeout = self._renew_s - (mono - lease.written_at)
        doc = lease.doc
        if doc is not None and (waiters.parked or doc.schedules.by_name):
            parked = bool(waiters.parked)
            wake_in = idle_timeout_s(doc, self._policy, self._clock.now(), parked)
            if wake_in is not None:
                timeout = min(timeout, wake_in)
        if timeout <= 0:
            return
        self._arm_timer(timeout, mono)
        await self._intake.idle()
        if waiters.parked:
            waiters.wake(lease.doc)

    def _may_hold(self) -> bool:
        """The next commit may have to wait for a spill (:meth:`_hold_for_spill`): not
        while the document this loop last wrote is held and its size is well below
        ``spill_hold_bytes`` (an int compare; no coroutine to start)."""
        doc, hold_bytes = self._lease.doc, self._hold_bytes
        if doc is None or hold_bytes is None:
            return False
        sized, size = self._sized
        return sized is not doc or size + HEAD_SLACK_BYTES > hold_bytes  # (size_upper's bound)

    async def _hold_for_spill(self) -> None:
        """A flood of pushes while a spill's objects are written: once the document
        is above ``spill_hold_bytes``, the next commit waits for them, so it drops the
        spilled tail as it adds the pushes waiting (at most until the lease
        renewal is due: a slow write never costs the lease).  Called once
        :meth:`_may_hold` says it may."""
        doc, hold_bytes = self._lease.doc, self._hold_bytes
        assert doc is not None  # (_may_hold)
        assert hold_bytes is not None
        written = _writing(self._segments)
        if written is None or doc.size_upper() <= hold_bytes:
            return
        mono = self._clock.monotonic()
        budget = self._renew_s - (mono - self._lease.written_at)
        if budget <= 0:
            return
        self._segments.counters.held_commits += 1
        await _first_of(written(), self._clock.sleep(budget))

    # ------------------------------------------------------------------ writing

    async def write_batch(self, batch: list[Op], futures: Futures) -> None:
        """Write ``batch`` (and the broker's own ops) as the next version, and answer
        ``futures`` once it is durable, or with why it did not commit."""
        intake, lease, clock = self._intake, self._lease, self._clock
        ops, lead = _with_internal(intake, batch) if intake.internal else (batch, 0)
        maybe = False
        attempt = 0
        sent: list[tuple[bytes, Transition]] = []  # every attempt; a late one may land
        # (a write is sent after this, so it stands for the first attempt's sending)
        started = sent_at = clock.monotonic()
        while True:
            doc = lease.doc
            assert doc is not None
            base_version = doc.version
            now = clock.now()
            owner = lease.owner(now, self._life.closing, mono=sent_at)
            t = transition(doc, ops, now, self._policy, owner=owner, in_place=True)
            data = encode(t.doc)
            sent.append((data, t))
            if self._ahead.pending:  # a deep queue's next load: decoded while this write flies
                asyncio.get_running_loop().call_soon(self._ahead.run)
            try:
                etag = await self._storage.write(DOCUMENT_KEY, data, if_match=lease.etag)
            except Conflict:
                self._counters.conflicts += 1
            except StorageError as exc:
                self._counters.storage_error("document_write")
                maybe = True
                await self._retry.wait(attempt, exc)
                attempt += 1
            else:
                done_at = clock.monotonic()
                seconds = done_at - started
                self._lease.wrote(t.doc, etag, sent_at, at=done_at)
                self._committed(t, futures, len(data), lead)
                records = self._counters.records
                if records is not None:  # the metrics are on
                    _record(records, batch, t, seconds, lead)  # once its ops are answered
                self._counters.window.add(done_at, seconds, len(batch))
                return
            verdict = await lease.resolve(t.doc.version, base_version)
            if not isinstance(verdict, Reapply):
                seconds = self._clock.monotonic() - started
                outcome = self._settle(verdict, sent, futures, maybe, lead, started)
                records = self._counters.records
                if records is not None:
                    _record(records, batch, outcome, seconds, lead)
                return
            lease.doc, lease.etag = verdict  # re-apply the batch on what is stored
            sent_at = clock.monotonic()

    def _settle(
        self,
        verdict: Blob | StepDown | OsqueueError,
        sent: list[tuple[bytes, Transition]],
        futures: Futures,
        maybe: bool,
        lead: int,
        started: float,
    ) -> Transition | OsqueueError:
        """A failed write that is not re-applied: one of our attempts landed after
        all (which one? returned), or the broker ends and the batch is answered
        (with the error returned).  ``started``: when the first attempt was sent
        (monotonic; the one that landed was sent no earlier)."""
        if isinstance(verdict, Blob):
            landed = next((tx for data, tx in sent if data == verdict.data), None)
            if landed is not None:
                size = len(verdict.data)
                self._lease.wrote(landed.doc, verdict.etag, started)
                self._committed(landed, futures, size, lead)
                return landed
            verdict = DocumentGone("our version was replaced from outside; stopping")
        if isinstance(verdict, StepDown):
            self._step_down(verdict.stored, maybe)
        else:
            self._fail(verdict)
        error = self._life.stop_error(maybe)
        answer_all(futures, error)
        return error

    def _committed(self, t: Transition, futures: Futures, size: int, lead: int) -> None:
        """``t`` is durable (the lease holds it): answer its ops, pass on what it leaves."""
        self._sized = (t.doc, size)
        c = self._counters
        c.commits += 1
        c.ops += len(futures)
        c.write_bytes += size
        if len(c.batch_sizes) < 100_000:
            c.batch_sizes.append(len(futures))
        for fut, result in zip(futures, t.results[lead:] if lead else t.results, strict=False):
            if not fut.done():
                fut.set_result(result)
        if t.completed:
            queue_id = t.doc.queue_id
            assert queue_id is not None  # drawn by the takeover, before any commit
            self._archiver.add(t.completed, queue_id)
        if t.removed:
            self.discard_payloads(t)
        if self._waiters.parked:
            self._waiters.wake(t.doc)
        if t.finished and self._waiters.results:
            self._waiters.wake_finished(t.finished)
        self._segments.committed(t)

    def discard_payloads(self, t: Transition) -> None:
        """Delete the payload objects of the jobs that left the document in ``t``."""
        refs = self._payloads.refs_of(t.removed)
        if refs:
            self._tasks.spawn(self._payloads.discard(refs), "osqueue-payload-delete")

    async def _final_commit(self) -> None:
        """Graceful stop: wait for archive writes, then release the lease in one write."""
        await self._archiver.drain(self._drain_timeout_s / 2)
        self._intake.merge_marks()
        # Shielded: a drain timeout cancels the loop, and only then this write
        # (with the side tasks), so nothing of the broker outlives stop().
        final = self._tasks.spawn(self.write_batch([], []), "osqueue-final-commit")
        await asyncio.shield(final)

    # ------------------------------------------------------------------ endings

    def _step_down(self, stored: Document, maybe: bool) -> None:
        self._lease.doc = stored
        self._life.state = State.STEPPED_DOWN
        log.warning(
            "another broker owns the document; stepping down",
            extra={"action": "step-down", "broker": self._lease.broker_id, "owner": stored.broker},
        )
        err = self._life.stop_error(maybe)
        self._intake.fail_pending(err)
        self._waiters.release()

    def _fail(self, exc: OsqueueError) -> None:
        self._life.failure = exc
        self._life.state = State.FAILED
        log.error(
            "broker stopped: %s", exc, extra={"action": "fail", "broker": self._lease.broker_id}
        )
        self._intake.fail_pending(exc)
        self._waiters.release()


def _with_internal(intake: Intake, batch: list[Op]) -> tuple[list[Op], int]:
    """``batch`` with the broker's own ops waiting, and how many of them lead it: its
    loads go first (this batch's claims may take their jobs), the others after."""
    internal = intake.take_internal()
    loads = [op for op in internal if type(op) is Load]
    if not loads:  # (archive marks, mostly)
        return [*batch, *internal], 0
    return [*loads, *batch, *(op for op in internal if type(op) is not Load)], len(loads)


def _record(
    records: CommitRecords,
    batch: list[Op],
    outcome: Transition | OsqueueError,
    seconds: float,
    lead: int,
) -> None:
    """Record for the metrics a batch's commit that took ``seconds`` (or the error
    its ops got, when it did not commit; ``lead``: the broker's own ops applied
    before the batch)."""
    if isinstance(outcome, OsqueueError):
        records.answered(batch, type(outcome))
    else:
        records.commit(batch, outcome.results[lead:], seconds)


@types.coroutine
def _one_turn() -> Generator[None, None, None]:
    """Let every other ready task run once (``asyncio.sleep(0)`` without its two
    frames: the loop pays this once a commit)."""
    yield


async def _first_of(*waits: Awaitable[None]) -> None:
    """Return once the first of ``waits`` is done (the others are cancelled)."""
    futures = {asyncio.ensure_future(w) for w in waits}
    try:
        await asyncio.wait(futures, return_when=asyncio.FIRST_COMPLETED)
    finally:
        for waiting in futures:
            waiting.cancel()


def _writing(segments: SegmentManager) -> Callable[[], Awaitable[None]] | None:
    """What a held commit waits for: the objects being written of the first of the
    spills of ready jobs, of waiting children (broker/cold/waiting.py), of dead
    letters (broker/cold/dead.py) and of delayed jobs (broker/cold/delayed.py)
    that has any (None: none has)."""
    if segments.spills.writing:
        return segments.spills.written
    if segments.waiting.writing:
        return segments.waiting.written
    if segments.dead.writing:
        return segments.dead.written
    return segments.delayed.written if segments.delayed.writing else None
