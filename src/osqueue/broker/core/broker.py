"""The broker: the queue document's one writer.

It holds the current document and its ETag in memory and folds every pending
op into one compare-and-set write per cycle (group commit).  No op is answered
before the write that holds it is durable; one bad op fails alone.

Lifecycle: ``start`` reads (or creates) the document, archives any ``done``
jobs it inherits, and takes ownership with ``epoch + 1`` and a fresh lease,
restarting every claimed job's heartbeat clock.  While serving, every commit
renews the lease; an idle broker writes only to renew it.  A conflicting write
is resolved by re-reading: our own landed write (a client library's retry
echo) counts as committed, another broker's ownership makes this one step
down with ``NotBroker``, otherwise the batch is re-applied.  ``stop`` stops
taking ops, flushes, clears the address and returns within the drain timeout.

:class:`Broker` is the facade that wires one class per concern:

* :mod:`~osqueue.broker.core.intake`: the ops waiting for the next commit
  (backpressure, batches, the commit loop's wake-up);
* :mod:`~osqueue.broker.core.waiters`: long-poll claims parked until a commit
  makes a job claimable;
* :mod:`~osqueue.broker.lease.hold`: the held document, reads, standby, takeover,
  and what a failed write means;
* :mod:`~osqueue.broker.core.commit`: the group-commit loop;
* :mod:`~osqueue.broker.archive.writer`: archive objects written after the commits
  that completed jobs;
* :mod:`~osqueue.broker.objects.payload_sweep`: deletes payload objects no job
  references (:mod:`~osqueue.broker.objects.payloads` holds the objects themselves),
  and :mod:`~osqueue.broker.objects.result_sweep` the result objects no record of a
  finished job references (:mod:`~osqueue.broker.objects.results`), and
  :mod:`~osqueue.broker.cold.sweep` the segment objects no document names;
* :mod:`~osqueue.broker.cold.manager`: deep backlogs' segment objects written,
  read ahead, loaded and deleted between commits;
* :mod:`~osqueue.broker.observe.counters`: the counters, and
  :mod:`~osqueue.broker.observe.activity` their periodic log line;
* :mod:`~osqueue.broker.observe.metrics`: the Prometheus collector over all of these
  (served at ``/metrics`` with ``BrokerConfig.metrics_listen``);
* :mod:`~osqueue.broker.core.lifecycle` and :mod:`~osqueue.broker.core.tasks`: the
  broker's state, and its supervised side tasks.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import signal
from collections.abc import Sequence
from typing import TYPE_CHECKING

from osqueue.broker.archive.writer import Archiver
from osqueue.broker.cold.manager import SegmentManager
from osqueue.broker.config import BrokerConfig
from osqueue.broker.core.commit import CommitLoop
from osqueue.broker.core.intake import Intake
from osqueue.broker.core.lifecycle import Lifecycle, State
from osqueue.broker.core.retry import StorageRetry
from osqueue.broker.core.tasks import SideTasks
from osqueue.broker.core.waiters import Waiters
from osqueue.broker.inproc.client import LocalClient
from osqueue.broker.lease.hold import Lease
from osqueue.broker.objects.payload_sweep import PayloadSweeper
from osqueue.broker.objects.payloads import Payloads
from osqueue.broker.objects.result_sweep import ResultSweeper
from osqueue.broker.objects.results import ResultObjects
from osqueue.broker.observe.activity import ActivityLog
from osqueue.broker.observe.counters import BrokerCounters
from osqueue.clock import Clock, SystemClock
from osqueue.errors import MaybeCommitted, OsqueueError, ShuttingDown
from osqueue.ids import new_id
from osqueue.state import ClaimOp, Document, Op, Result
from osqueue.state.results import Answer
from osqueue.storage.port import Storage

if TYPE_CHECKING:
    from osqueue.broker.observe.metrics import BrokerCollector
    from osqueue.metrics.exposition import MetricsEndpoint

__all__ = ["Broker", "BrokerCounters", "State"]

log = logging.getLogger(__name__)


class Broker:
    """One queue's broker.  ``async with Broker(url) as broker: q = broker.client()``."""

    def __init__(
        self,
        storage: Storage | str,
        config: BrokerConfig | None = None,
        *,
        clock: Clock | None = None,
        standby: bool = False,
    ) -> None:
        if isinstance(storage, str):
            from osqueue.storage import from_url

            storage = from_url(storage)
        self.storage: Storage = storage
        self.config = config = config or BrokerConfig()
        self.clock: Clock = clock or SystemClock()
        self.standby = standby
        self.id = config.broker_id or f"b-{new_id().lower()}"
        self.counters = BrokerCounters()
        #: the payload objects under payloads/ (uploads, reads, deletes, the sweep)
        self.payloads = Payloads(storage)
        #: the result objects under results/ (uploads, reads, the sweep)
        self.results = ResultObjects(storage, config.policy(), lambda: self._lease.doc)
        retry = StorageRetry(config, self.clock)
        self._tasks = SideTasks()
        self._lease = Lease(
            storage, config, self.clock, broker_id=self.id, counters=self.counters, retry=retry
        )
        self._life = Lifecycle(self._lease)
        self._intake = Intake(config, self._life, self.counters)
        self._waiters = Waiters(self.clock, self._intake, self._life)
        self._archiver = Archiver(
            storage,
            config.archive_concurrency,
            tasks=self._tasks,
            retry=retry,
            counters=self.counters,
            written=self._intake.mark_archived,
        )
        #: deep backlogs: the segment objects (spills, loads, the cache, the orphan sweep)
        self.segments = SegmentManager(
            storage,
            config,
            self.clock,
            retry=retry,
            tasks=self._tasks,
            intake=self._intake,
            lease=self._lease,
            life=self._life,
        )
        self._commit = CommitLoop(
            storage,
            config,
            self.clock,
            counters=self.counters,
            retry=retry,
            life=self._life,
            lease=self._lease,
            intake=self._intake,
            waiters=self._waiters,
            archiver=self._archiver,
            payloads=self.payloads,
            tasks=self._tasks,
            segments=self.segments,
        )
        self._commit_task: asyncio.Task[None] | None = None
        self._metrics: MetricsEndpoint | None = None
        if config.metrics_listen is not None:
            from osqueue.metrics.exposition import MetricsEndpoint, registry_of

            registry = registry_of(self.metrics_collector())
            self._metrics = MetricsEndpoint(
                registry, config.metrics_listen, max_connections=config.metrics_max_connections
            )

    # ------------------------------------------------------------------ properties

    @property
    def state(self) -> State:
        return self._life.state

    @property
    def failure(self) -> OsqueueError | None:
        """The error that stopped the broker (its state is then ``FAILED``)."""
        return self._life.failure

    @property
    def commits(self) -> int:
        return self.counters.commits

    @property
    def epoch(self) -> int:
        return self._lease.epoch

    @property
    def document(self) -> Document:
        """The last committed document (do not modify it)."""
        doc = self._lease.doc
        if doc is None:
            raise ShuttingDown("the broker has not started")
        return doc

    @property
    def serving(self) -> bool:
        return self._life.serving

    @property
    def metrics_address(self) -> str | None:
        """``host:port`` of the ``/metrics`` endpoint while it listens (from ``start``
        until ``stop``), else None."""
        return self._metrics.address if self._metrics is not None else None

    def metrics_collector(self) -> BrokerCollector:
        """This broker's Prometheus collector, for a registry of your own
        (``BrokerConfig.metrics_listen`` serves one by itself); from the first one
        made, every commit is recorded for it.  Needs ``osqueue[metrics]``."""
        from osqueue.broker.observe.metrics import BrokerCollector, ColdCounters

        cold = self.segments
        return BrokerCollector(
            broker_id=self.id,
            address=self.config.address,
            counters=self.counters,
            clock=self.clock,
            life=self._life,
            lease=self._lease,
            intake=self._intake,
            waiters=self._waiters,
            archiver=self._archiver,
            cold=ColdCounters(
                cold.counters,
                cold.delayed.counters,
                cold.dead.counters,
                cold.waiting.counters,
                cold.finished.counters,
            ),
        )

    def client(self) -> LocalClient:
        return LocalClient(self)

    def tasks(self) -> list[asyncio.Task[None]]:
        """The broker's tasks: the commit loop's first (once started), then the side
        tasks that have not ended (archive writers, the payload sweep, the activity
        log, payload deletes).  For a harness that kills a broker where it stands
        (cancel them all: nothing is flushed) or looks at one of them."""
        loop = [] if self._commit_task is None else [self._commit_task]
        return [*loop, *self._tasks]

    # ------------------------------------------------------------------ lifecycle

    async def __aenter__(self) -> Broker:
        await self.start()
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.stop()

    async def start(self) -> None:
        """Take ownership of the document (waiting for the lease if standby) and serve."""
        life = self._life
        if life.state is not State.NEW:
            raise ShuttingDown(f"broker already {life.state.value}")
        if self._metrics is not None:
            await self._metrics.start()  # a standby reports that it stands by
        try:
            if self.standby:
                life.state = State.STANDBY
                await self._lease.await_vacancy()
            takeover = await self._lease.acquire(self._archiver, patient=self.standby)
        except BaseException:  # cancelled while standing by, or the document is gone
            await self._close_metrics()
            raise
        self._commit.discard_payloads(takeover)
        life.state = State.SERVING
        self.segments.committed(takeover)
        self._commit_task = asyncio.create_task(
            self._commit.run(), name=f"osqueue-broker-{self.id}"
        )
        config, tasks = self.config, self._tasks
        if config.payload_sweep_interval_s is not None:
            sweeper = PayloadSweeper(
                self.payloads,
                self.clock,
                config.payload_sweep_interval_s,
                counters=self.counters,
                life=life,
                lease=self._lease,
                segments=self.segments,
            )
            tasks.spawn(sweeper.run(), "osqueue-payload-sweep")
        if config.result_sweep_interval_s is not None:
            results = ResultSweeper(
                self.results,
                self.clock,
                config.result_sweep_interval_s,
                counters=self.counters,
                life=life,
                lease=self._lease,
            )
            tasks.spawn(results.run(), "osqueue-result-sweep")
        if config.stats_log_interval_s is not None:
            activity = ActivityLog(
                self.counters,
                self.clock,
                config.stats_log_interval_s,
                life=life,
                lease=self._lease,
                intake=self._intake,
            )
            tasks.spawn(activity.run(), "osqueue-stats-log")
        log.info(
            "broker serving",
            extra={"action": "serve", "broker": self.id, "epoch": self._lease.epoch},
        )

    async def wait_closed(self) -> None:
        """Return when the broker stops for any reason (stop, step-down, failure)."""
        await self._life.closed.wait()

    def install_signal_handlers(self) -> None:
        """SIGTERM/SIGINT start a graceful stop."""
        loop = asyncio.get_running_loop()
        for sig in (signal.SIGTERM, signal.SIGINT):
            loop.add_signal_handler(sig, lambda: self._tasks.spawn(self.stop(), "osqueue-stop"))

    async def stop(self) -> None:
        """Stop taking ops, flush what is pending, release the lease, and return.

        The commit loop writes what is pending, waits (at most half the drain
        timeout) for due archive objects, and writes a last version with the
        address cleared and the lease ended.  Past ``drain_timeout_s`` the loop
        is cancelled and the ops still waiting are answered ``MaybeCommitted``."""
        life = self._life
        if life.state is not State.SERVING:
            await self._end_tasks()
            return
        life.state = State.STOPPING
        life.closing = True
        self._waiters.release()
        self._intake.wake()
        task = self._commit_task
        try:
            if task is not None:
                await asyncio.wait_for(asyncio.shield(task), self.config.drain_timeout_s)
        except TimeoutError:
            log.warning("drain timeout; stopping hard", extra={"action": "stop"})
            if task is not None:
                task.cancel()
                with contextlib.suppress(asyncio.CancelledError):
                    await task
            self._intake.fail_pending(
                MaybeCommitted("the broker stopped before confirming this op")
            )
        await self._end_tasks()
        if life.state is State.STOPPING:
            life.state = State.STOPPED
        life.closed.set()

    async def _end_tasks(self) -> None:
        await self._tasks.cancel()
        await self._close_metrics()
        self._life.closed.set()

    async def _close_metrics(self) -> None:
        if self._metrics is not None:
            await self._metrics.close()

    # ------------------------------------------------------------------ ops in

    def add_op(self, op: Op) -> asyncio.Future[Result]:
        """Add an op to the next commit; the future resolves once it is durable."""
        return self._intake.add_op(op)

    async def submit(self, op: Op) -> Result:
        return await self._intake.add_op(op)

    async def submit_many(self, ops: Sequence[Op]) -> list[Result]:
        """Submit a batch: all of it or (raising before anything is queued) none of it."""
        return await self._intake.submit_many(ops)

    def heard(self, worker: str, queues: tuple[str, ...]) -> None:
        """``worker`` asked for jobs of ``queues``: the record of recent workers."""
        self.counters.workers.claimed(worker, queues, self.clock.now())

    async def claim(self, op: ClaimOp, wait_s: float) -> Result:
        """A claim that, if empty, parks until a commit makes a job claimable.

        (The in-process client sends a claim that does not wait straight to
        :meth:`add_op`.)"""
        return await self._waiters.claim(op, wait_s)

    async def finished(self, job_id: str, wait_s: float) -> Answer | None:
        """How job ``job_id`` finished, as the last commit says, waiting up to
        ``wait_s`` for the commit that finishes it; None for an unknown id."""
        found = await self._waiters.finished(job_id, wait_s, lambda: self._lease.doc)
        doc = self._lease.doc
        status = found.result.status if found is not None else None
        # "queued" for a job not in the document: a cold object's id bounds may hold it
        bounds = status == "queued" and doc is not None and job_id not in doc.jobs
        if found is None or (found.data is None and (status == "done" or bounds)):
            # its entry may be sealed in an object (broker/cold/finished.py)
            sealed = await self.segments.finished.lookup(job_id, doc, found)
            return sealed if sealed is not None else found
        return found
