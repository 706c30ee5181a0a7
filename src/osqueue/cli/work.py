"""``osqueue work URL --handler module:function``: run a worker until stopped.

SIGTERM or Ctrl-C stops claiming and lets running handlers finish within the
grace period, then releases what is left; a second signal skips the grace
period.  With ``--burst`` the worker exits once nothing is left to claim.
With ``--metrics-listen`` it prints ``metrics at http://HOST:PORT/metrics``
once the endpoint listens.
"""

from __future__ import annotations

import asyncio
import importlib
import logging
import os
import sys
import time
from collections.abc import Mapping
from dataclasses import replace
from typing import Annotated, Any

import typer
from rich.live import Live
from rich.text import Text

from osqueue import runtime
from osqueue.cli import exits
from osqueue.cli.console import stderr
from osqueue.cli.options import (
    MetricsListen,
    Url,
    connecting,
)
from osqueue.client.worker import Handler, Worker, WorkerConfig, WorkerCounters
from osqueue.errors import BrokerUnavailable, InvalidInput, MissingExtra
from osqueue.inspect.options import ClientOptions, open_client

_SPARK = "Spark"

log = logging.getLogger(__name__)


@connecting
def work(
    url: Url,
    handler: Annotated[
        str,
        typer.Option(
            "--handler",
            "-H",
            envvar="OSQUEUE_HANDLER",
            help="module:function (or module:mapping of queue -> function) to run per job.",
        ),
    ],
    queues: Annotated[
        list[str] | None,
        typer.Option(
            "--queue",
            "-q",
            envvar="OSQUEUE_QUEUES",
            help="Queue to take jobs from (repeat it; the variable is space-separated). "
            "Default: the mapping's queues, or 'default'.",
        ),
    ] = None,
    concurrency: Annotated[
        int,
        typer.Option(
            "--concurrency",
            "-c",
            envvar="OSQUEUE_CONCURRENCY",
            min=1,
            help="Handlers running at once.",
        ),
    ] = 1,
    batch_size: Annotated[
        int,
        typer.Option(
            "--batch-size",
            envvar="OSQUEUE_BATCH_SIZE",
            min=1,
            help="Jobs per call of a batch handler.",
        ),
    ] = 1,
    burst: Annotated[
        bool, typer.Option("--burst", envvar="OSQUEUE_BURST", help="Exit when nothing is left.")
    ] = False,
    wait_s: Annotated[
        float,
        typer.Option(
            "--wait-s", envvar="OSQUEUE_WAIT_S", min=0.0, help="Long-poll wait per claim."
        ),
    ] = 5.0,
    shutdown_grace_period_s: Annotated[
        float,
        typer.Option(
            "--shutdown-grace-period-s",
            envvar="OSQUEUE_SHUTDOWN_GRACE_PERIOD_S",
            min=0.0,
            help="On SIGTERM, how long running handlers may finish before their jobs are released.",
        ),
    ] = 30.0,
    heartbeat_interval_s: Annotated[
        float | None,
        typer.Option(
            "--heartbeat-interval-s",
            envvar="OSQUEUE_HEARTBEAT_INTERVAL_S",
            min=0.001,
            help="Default: a third of the broker's heartbeat timeout.",
        ),
    ] = None,
    broker_heartbeat_timeout_s: Annotated[
        float | None,
        typer.Option(
            "--broker-heartbeat-timeout-s",
            envvar="OSQUEUE_HEARTBEAT_TIMEOUT_S",
            min=0.001,
            help="The broker's --heartbeat-timeout-s (same variable), when the client cannot "
            "tell it (gRPC); default 30.",
        ),
    ] = None,
    worker_id: Annotated[
        str | None,
        typer.Option("--worker-id", envvar="OSQUEUE_WORKER_ID", help="Default: host-pid-random."),
    ] = None,
    spark: Annotated[
        bool,
        typer.Option(
            "--spark",
            envvar="OSQUEUE_SPARK",
            help="Handlers take (job, spark): run them with a SparkSession.",
            rich_help_panel=_SPARK,
        ),
    ] = False,
    spark_master: Annotated[
        str | None,
        typer.Option(
            "--spark-master",
            envvar="OSQUEUE_SPARK_MASTER",
            help="Spark master URL (default local[*]).",
            rich_help_panel=_SPARK,
        ),
    ] = None,
    retry_for_s: Annotated[
        float,
        typer.Option(
            "--retry-for-s",
            envvar="OSQUEUE_RETRY_FOR_S",
            min=0.001,
            help="Keep retrying a call this long (broker failover) before giving up; with"
            " --burst the worker exits (code 8) when no broker answered for this long.",
        ),
    ] = 30.0,
    metrics_listen: MetricsListen = None,
    *,
    options: ClientOptions,
) -> None:
    """Run a worker: claim jobs, run the handler, heartbeat, complete or fail them."""
    config = WorkerConfig(
        queues=tuple(queues) if queues else None,
        concurrency=concurrency,
        batch_size=batch_size,
        worker_id=worker_id,
        heartbeat_interval_s=heartbeat_interval_s
        or (broker_heartbeat_timeout_s / 3.0 if broker_heartbeat_timeout_s else None),
        wait_s=wait_s,
        shutdown_grace_period_s=shutdown_grace_period_s,
        burst=burst,
        metrics_listen=metrics_listen,
    )
    if spark_master is not None and not spark:
        raise InvalidInput("--spark-master needs --spark", field="spark_master")
    handlers = load_handler(handler)
    if spark:
        handlers = _spark_handlers(handlers, spark_master)
    options = replace(options, timeout_s=retry_for_s)
    runtime.tune_gc()
    worker = runtime.run(_run(options, handlers, config))
    counters = worker.counters
    exits.info(
        f"worker {worker.worker_id} stopped: processed {counters.processed}, "
        f"failed {counters.failed}, retried {counters.retried}, lost {counters.lost}, "
        f"released {counters.released}"
    )
    if worker.busy_threads:
        # A sync handler that was lost or released is still running in a thread
        # that cannot be killed; its result will be dropped.  Do not wait for it.
        exits.warn(f"{worker.busy_threads} abandoned handler thread(s) still running; exiting")
        sys.stdout.flush()
        sys.stderr.flush()
        os._exit(0)


async def _run(
    options: ClientOptions, handlers: Mapping[str, Handler] | Handler, config: WorkerConfig
) -> Worker:
    async with open_client(options) as client:
        worker = Worker(client, handlers, config)
        worker.install_signal_handlers()
        exits.info(
            f"worker {worker.worker_id}: queues {', '.join(worker.queues)}, "
            f"concurrency {config.concurrency}"
        )
        watch = BrokerWatch(client, options.url, config.burst)
        with _Progress(worker, watch) as progress:
            runner = asyncio.create_task(worker.run(), name="osqueue-cli-worker")
            if config.metrics_listen is not None:
                await _announce_metrics(worker, runner)
            await progress.follow(runner)
        if watch.gave_up is not None:
            raise watch.gave_up
        return worker


async def _announce_metrics(worker: Worker, runner: asyncio.Task[None]) -> None:
    """Print where the metrics are once the endpoint listens (unless the run ends first)."""
    running = asyncio.ensure_future(worker.wait_running())
    await asyncio.wait({running, runner}, return_when=asyncio.FIRST_COMPLETED)
    running.cancel()
    if worker.metrics_address is not None:
        exits.info(f"metrics at http://{worker.metrics_address}/metrics")


class BrokerWatch:
    """Tells when no broker is serving: a WARNING once the client's calls have found
    none for ``FIRST_S`` (naming the URL and what was tried), again every
    ``EVERY_S`` while it lasts, and an INFO line once a broker answers again.  With
    ``--burst`` it stops the worker once no broker answered for a whole call's time
    (``--retry-for-s``): nobody to ask ends the run, with exit code 8."""

    FIRST_S = 3.0
    EVERY_S = 60.0

    def __init__(self, client: object, url: str, burst: bool) -> None:
        self.failover = getattr(client, "failover", None)  # a remote client's; embedded: none
        self.url = url
        self.burst = burst
        self.told_at: float | None = None
        #: with ``burst``: why the worker was stopped (nobody to ask)
        self.gave_up: BrokerUnavailable | None = None

    def check(self, worker: Worker) -> None:
        """Tell what is due; with ``burst``, stop ``worker`` once no broker answered
        for a whole call's time (``gave_up`` then says why)."""
        failover = self.failover
        if failover is None:
            return
        now = failover.clock.monotonic()
        since = failover.failing_since
        limit = failover.config.timeout_s
        if self.burst and since is not None and now - since >= limit and not self.gave_up:
            self.gave_up = BrokerUnavailable(
                f"no broker for {self.url} answered within {limit:g}s; last error: "
                f"{exits.one_line(str(failover.last_error))}"
            )
            worker.stop()
            return
        if since is None:
            if self.told_at is not None:
                log.info("a broker is serving %s again", self.url, extra={"action": "broker_back"})
                self.told_at = None
            return
        if now - since < self.FIRST_S or (
            self.told_at is not None and now - self.told_at < self.EVERY_S
        ):
            return
        self.told_at = now
        then = (
            f"the worker exits (code 8) if none answers within {limit:g} s"
            if self.burst
            else f"still trying; told again every {self.EVERY_S:g} s"
        )
        log.warning(
            "no broker is serving %s for %.0f s (tried: %s); %s",
            self.url,
            now - since,
            exits.one_line(str(failover.last_error)),
            then,
            extra={"action": "no_broker", "url": self.url},
        )


class _Progress:
    """A live line of counters on stderr while the worker runs (terminals only)."""

    def __init__(self, worker: Worker, watch: BrokerWatch) -> None:
        self.worker = worker
        self.watch = watch
        self.started = time.monotonic()
        console = stderr()
        self.live = Live(console=console, transient=True) if console.is_terminal else None

    def __enter__(self) -> _Progress:
        if self.live is not None:
            self.live.__enter__()
        return self

    def __exit__(self, *exc: object) -> None:
        if self.live is not None:
            self.live.__exit__(None, None, None)

    async def follow(self, runner: asyncio.Task[None]) -> None:
        while not runner.done():
            self.watch.check(self.worker)
            if self.live is not None:
                self.live.update(self.line(self.worker.counters))
            await asyncio.wait({runner}, timeout=0.5)
        await runner

    def line(self, c: WorkerCounters) -> Text:
        elapsed = max(1e-9, time.monotonic() - self.started)
        text = Text()
        text.append(f"running {self.worker.running}  ", style="cyan")
        text.append(f"processed {c.processed:,} ({c.processed / elapsed:,.1f}/s)  ")
        text.append(f"failed {c.failed:,}  ", style="red" if c.failed else "")
        text.append(f"retried {c.retried:,}  lost {c.lost:,}")
        if self.worker.stopping:
            text.append("  stopping…", style="yellow")
        return text


def load_handler(spec: str) -> Mapping[str, Handler] | Handler:
    """Import ``module:attr`` (attr may be dotted); the current directory is importable."""
    module_name, sep, attr = spec.partition(":")
    if not sep or not module_name or not attr:
        raise InvalidInput(f"{spec!r} is not module:function", field="handler")
    if "" not in sys.path and os.getcwd() not in sys.path:
        sys.path.insert(0, os.getcwd())
    try:
        target: Any = importlib.import_module(module_name)
    except ImportError as exc:
        missing = exc.name or ""
        if module_name != missing and not module_name.startswith(f"{missing}."):
            # the module exists and its own imports failed
            raise exits.UserCodeFailed(
                f"handler module {module_name!r} failed to import", exc
            ) from exc
        raise InvalidInput(f"cannot import {module_name!r}: {exc}", field="handler") from exc
    except Exception as exc:  # the user's module raised, or does not compile
        raise exits.UserCodeFailed(f"handler module {module_name!r} failed to import", exc) from exc
    for part in attr.split("."):
        try:
            target = getattr(target, part)
        except AttributeError:
            raise InvalidInput(
                f"{module_name!r} has no attribute {attr!r}", field="handler"
            ) from None
    if not callable(target) and not isinstance(target, Mapping):
        raise InvalidInput(f"{spec} is neither callable nor a mapping of handlers", field="handler")
    result: Mapping[str, Handler] | Handler = target
    return result


def _spark_handlers(
    handlers: Mapping[str, Handler] | Handler, master: str | None
) -> Mapping[str, Handler] | Handler:
    try:
        from osqueue.spark.worker import spark_handlers
    except ImportError as exc:
        raise MissingExtra("spark", exc.name or "pyspark") from exc
    wrapped: Mapping[str, Handler] | Handler = spark_handlers(handlers, master=master)  # type: ignore[arg-type]
    return wrapped
