"""The :class:`Worker`: a small facade that wires the worker's parts and runs them.

It builds the parts (:mod:`.units` runs handlers within the slots,
:mod:`.settle` completes, fails and releases jobs, :mod:`.relay` carries
completions to the next claim, :mod:`.claims` claims, :mod:`.heartbeats`
heartbeats), runs the two side tasks and the units in one TaskGroup, and
stops in three stages: stop claiming; let running handlers finish within
``shutdown_grace_period_s`` (heartbeats continue meanwhile); then cancel what
is left and release its jobs so another worker takes them at once.
Cancelling :meth:`Worker.run` from outside is a graceful stop; a second
cancellation skips the grace period.
"""

from __future__ import annotations

import asyncio
import logging
import signal
from collections.abc import Mapping
from typing import TYPE_CHECKING, Unpack

from osqueue.api import QueueClient
from osqueue.client.worker.claims import ClaimLoop
from osqueue.client.worker.config import (
    WorkerConfig,
    WorkerCounters,
    WorkerOptions,
    broker_heartbeat_timeout_s,
    check_client,
    default_worker_id,
    worker_config,
)
from osqueue.client.worker.handlers import Handler, HandlerTable
from osqueue.client.worker.heartbeats import Heartbeats
from osqueue.client.worker.relay import CompletionRelay
from osqueue.client.worker.settle import Settler
from osqueue.client.worker.units import Units
from osqueue.client.worker.wait import first_of
from osqueue.clock import Clock, SystemClock
from osqueue.errors import OsqueueError

if TYPE_CHECKING:
    from osqueue.client.worker.metrics import WorkerCollector
    from osqueue.metrics.exposition import MetricsEndpoint

log = logging.getLogger(__name__)


class Worker:
    """Run handlers for jobs claimed through ``client``; see the package docstring.

    ``handlers`` is one handler for every queue, or a mapping queue -> handler
    (then ``queues`` defaults to its keys).  ``config`` says how it runs
    (default ``WorkerConfig()``); keyword arguments (the fields of
    :class:`WorkerConfig`) take the place of its fields.
    ``heartbeat_interval_s`` defaults to a third of the client's
    ``heartbeat_timeout_s`` (30 s if it has none).
    """

    def __init__(
        self,
        client: QueueClient,
        handlers: Mapping[str, Handler] | Handler,
        config: WorkerConfig | None = None,
        *,
        clock: Clock | None = None,
        **options: Unpack[WorkerOptions],
    ) -> None:
        config = worker_config(config, options)
        check_client(client)
        self.client = client
        self.config = config
        self._clock: Clock = clock or SystemClock()
        table = HandlerTable(handlers, config.queues)
        self.queues = table.queues
        self.worker_id = config.worker_id or default_worker_id()
        self.heartbeat_interval_s = (
            config.heartbeat_interval_s or broker_heartbeat_timeout_s(client) / 3.0
        )
        self.counters = WorkerCounters()
        self._stop = asyncio.Event()
        self._hard_stop = asyncio.Event()
        self._started = False
        self._relay = CompletionRelay()
        self._settler = Settler(client, self._relay, self.counters, self.worker_id)
        self._units = Units(
            table,
            concurrency=config.concurrency,
            batch_size=config.batch_size,
            worker_id=self.worker_id,
            settle=self._settler.settle,
            counters=self.counters,
            clock=self._clock,
        )
        self._heartbeats = Heartbeats(
            client,
            self._units,
            self.counters,
            interval_s=self.heartbeat_interval_s,
            clock=self._clock,
        )
        self._claims = ClaimLoop(
            client,
            config,
            worker_id=self.worker_id,
            queues=self.queues,
            units=self._units,
            relay=self._relay,
            settler=self._settler,
            counters=self.counters,
            stop=self._stop,
            clock=self._clock,
            on_burst_done=self.stop,
        )
        self._running = asyncio.Event()
        self._metrics: MetricsEndpoint | None = None
        if config.metrics_listen is not None:
            from osqueue.metrics.exposition import MetricsEndpoint, registry_of

            registry = registry_of(self.metrics_collector())
            self._metrics = MetricsEndpoint(registry, config.metrics_listen)

    @classmethod
    def from_config(
        cls,
        client: QueueClient,
        handlers: Mapping[str, Handler] | Handler,
        config: WorkerConfig,
        *,
        clock: Clock | None = None,
    ) -> Worker:
        """The same as ``Worker(client, handlers, config, clock=clock)``."""
        return cls(client, handlers, config, clock=clock)

    # -- public control

    @property
    def running(self) -> int:
        """Jobs held right now (running, settling, or lost but still in a thread)."""
        return self._units.jobs_held

    @property
    def busy_threads(self) -> int:
        """Sync handlers still running in a thread; after :meth:`run` these are
        abandoned (lost or released) handlers that could not be killed."""
        return self._units.threads.busy

    @property
    def stopping(self) -> bool:
        return self._stop.is_set()

    @property
    def metrics_address(self) -> str | None:
        """``host:port`` of the ``/metrics`` endpoint while :meth:`run` runs, else None."""
        return self._metrics.address if self._metrics is not None else None

    def metrics_collector(self) -> WorkerCollector:
        """This worker's Prometheus collector, for a registry of your own
        (``metrics_listen`` serves one by itself); from the first one made, every
        job is recorded for it.  Needs ``osqueue[metrics]``."""
        from osqueue.client.worker.metrics import WorkerCollector

        return WorkerCollector(
            worker_id=self.worker_id,
            queues=self.queues,
            counters=self.counters,
            units=self._units,
            stopping=self._stop.is_set,
        )

    async def wait_running(self) -> None:
        """Return once :meth:`run` has started (its metrics endpoint listens)."""
        await self._running.wait()

    def stop(self, *, hard: bool = False) -> None:
        """Stop claiming and shut down (call from the event loop's thread).

        Graceful: running handlers get ``shutdown_grace_period_s`` to finish.
        ``hard=True`` skips the grace period: cancel now and release.
        """
        if not self._stop.is_set():
            log.info(
                "worker stopping",
                extra={"action": "worker_stop", "worker": self.worker_id, "hard": hard},
            )
        self._stop.set()
        self._relay.close()
        self._units.changed.set()
        if hard:
            self._hard_stop.set()

    def install_signal_handlers(self) -> None:
        """SIGTERM/SIGINT stop gracefully; a second signal stops hard."""
        loop = asyncio.get_running_loop()

        def on_signal(signum: int) -> None:
            hard = self._stop.is_set()  # a second signal: the grace period is skipped
            log.log(
                logging.WARNING if hard else logging.INFO,
                "%s received: stopping%s",
                signal.Signals(signum).name,
                " now (a second signal)" if hard else " gracefully",
                extra={"action": "signal", "signal": signal.Signals(signum).name},
            )
            self.stop(hard=hard)

        for sig in (signal.SIGTERM, signal.SIGINT):
            loop.add_signal_handler(sig, on_signal, sig)

    async def run(self) -> None:
        """Run until :meth:`stop` (or, with ``burst``, until nothing is left).

        Cancellation from outside becomes a graceful stop (a second one a hard
        stop); ``CancelledError`` is re-raised once the worker has shut down.
        If a side task dies, the worker shuts down and raises its error.
        """
        if self._started:
            raise OsqueueError("this Worker already ran; create a new one")
        self._started = True
        main = asyncio.create_task(self._main(), name=f"osqueue-worker-{self.worker_id}")
        cancelled = 0
        while True:
            try:
                await asyncio.shield(main)
                break
            except asyncio.CancelledError:
                if main.done():
                    raise
                cancelled += 1
                self.stop(hard=cancelled > 1)
        if cancelled:
            raise asyncio.CancelledError()

    # -- the main task

    async def _main(self) -> None:
        if self._metrics is not None:
            await self._metrics.start()
        self._running.set()
        log.info(
            "worker started",
            extra={
                "action": "worker_start",
                "worker": self.worker_id,
                "queues": list(self.queues),
                "concurrency": self.config.concurrency,
            },
        )
        try:
            async with asyncio.TaskGroup() as tg:
                self._units.open(tg)
                heartbeat = tg.create_task(self._heartbeats.run(), name="osqueue-worker-heartbeat")
                tg.create_task(self._claims.run(), name="osqueue-worker-claim")
                await self._stop.wait()  # stage one: stop() stops the claim loop
                await self._drain()
                await self._settler.release(self._units.abandon_all())
                heartbeat.cancel()
        except BaseExceptionGroup as group:
            raise _unwrap(group) from None
        finally:
            # A side task died (or the loop is closing): give back what we still hold.
            await asyncio.shield(self._settler.release(self._units.abandon_all()))
            self._units.close()
            if self._metrics is not None:
                await asyncio.shield(self._metrics.close())
            log.info(
                "worker stopped",
                extra={
                    "action": "worker_exit",
                    "worker": self.worker_id,
                    **self.counters.as_dict(),
                },
            )

    async def _drain(self) -> None:
        """Stage two: wait for running handlers, at most the grace period."""
        if not self._units:
            return
        await first_of(
            self._units.wait_idle(),
            self._clock.sleep(self.config.shutdown_grace_period_s),
            self._hard_stop.wait(),
        )


def _unwrap(group: BaseExceptionGroup[BaseException]) -> BaseException:
    """The first real error of a TaskGroup failure (nested groups flattened)."""
    for exc in group.exceptions:
        if isinstance(exc, BaseExceptionGroup):
            return _unwrap(exc)
        if not isinstance(exc, asyncio.CancelledError):
            return exc
    return group
