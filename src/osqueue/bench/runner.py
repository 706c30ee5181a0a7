"""Run the benchmark against a broker on a storage URL: in this process, or (remote) in another."""

from __future__ import annotations

import asyncio
import contextlib
import json
import sys
from collections.abc import AsyncIterator
from typing import TextIO

from osqueue import runtime
from osqueue.bench.config import BenchConfig, BenchResult
from osqueue.bench.remote import check_shareable, run_remote_bench
from osqueue.bench.scrape import Scraper
from osqueue.bench.workload import preload, result_of, run_workload
from osqueue.broker import Broker, BrokerConfig
from osqueue.errors import InvalidInput, OsqueueError
from osqueue.storage import from_url


async def run_bench(config: BenchConfig) -> BenchResult:
    """Start a broker on ``config.storage``, preload, run the closed loop, report.

    Only the closed loop is timed; ``commits`` and ``avg_batch`` count the
    broker's writes during it (``avg_batch`` is ops per commit).  With
    ``config.metrics`` the broker serves ``/metrics`` and a :class:`Scraper`
    reads it every second meanwhile.
    """
    storage = from_url(config.storage)
    payload = b"x" * config.payload_bytes
    broker_config = BrokerConfig(metrics_listen="127.0.0.1:0") if config.metrics else None
    scraper: Scraper | None = None
    try:
        async with Broker(storage, broker_config) as broker:
            client = broker.client()
            await preload(client, config.preload, payload, config.queue)
            commits_before = broker.commits
            if broker.metrics_address is not None:
                scraper = Scraper(broker.metrics_address)
            async with _running(scraper):
                figures = await run_workload(
                    client,
                    clients=config.clients,
                    jobs=config.jobs,
                    batch=config.batch,
                    duration_s=config.duration_s,
                    payload=payload,
                    queue=config.queue,
                )
            commits = broker.commits - commits_before
    finally:
        await storage.close()
    return result_of(
        figures,
        commits=commits,
        storage=storage.url,
        clients=config.clients,
        metrics_scrapes=scraper.scrapes if scraper is not None else None,
    )


@contextlib.asynccontextmanager
async def _running(scraper: Scraper | None) -> AsyncIterator[None]:
    """Scrape while the body runs (nothing without a scraper)."""
    if scraper is None:
        yield
        return
    task = asyncio.ensure_future(scraper.run())
    try:
        yield
    finally:
        task.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await task


def _osqueue_error(caught: BaseException) -> OsqueueError | None:
    """The error to report: ``caught``, or the first one of a group made only of ours.

    The clients run in a task group, so a failing call arrives wrapped in one.
    """
    while isinstance(caught, BaseExceptionGroup):
        ours, rest = caught.split(OsqueueError)
        if ours is None or rest is not None:
            return None
        caught = ours.exceptions[0]
    return caught if isinstance(caught, OsqueueError) else None


def format_result(result: BenchResult) -> str:
    """A short human-readable summary of one run."""
    where = "  (broker in another process, over gRPC)" if result.remote else ""
    return (
        f"storage   {result.storage}{where}\n"
        f"clients   {result.clients}\n"
        f"jobs      {result.jobs} in {result.elapsed_s:.2f} s\n"
        f"jobs/s    {result.jobs_per_s:,.1f}\n"
        f"ops/s     {result.ops_per_s:,.1f}  (push, claim and complete calls)\n"
        f"latency   p50 {result.p50_ms:.2f} ms, p99 {result.p99_ms:.2f} ms\n"
        f"commits   {result.commits} ({result.avg_batch:.1f} ops per commit)"
    )


def bench_command(
    storage: str,
    clients: int,
    jobs: int,
    preload: int,
    batch: int = 1,
    as_json: bool = False,
    duration_s: float = 60.0,
    out: TextIO | None = None,
    remote: bool = False,
    metrics: bool = False,
) -> int:
    """What ``osqueue bench`` does: run once, print the figures, return the exit code.

    Prints one JSON line with ``as_json`` (the keys of
    :data:`~osqueue.bench.config.RESULT_KEYS`), a short summary otherwise.  Bad
    flags (a storage URL that does not parse included) exit with code 2, storage
    and broker errors with 1; the message goes to stderr.  With ``remote`` the
    broker runs in a child process and the clients talk to it over gRPC (the
    JSON line gains ``"remote": true``); memory:// storage is refused then.
    With ``metrics`` the broker serves Prometheus metrics, scraped every second
    (the JSON line gains ``"metrics_scrapes"``); not with ``remote``.
    """
    stream = out if out is not None else sys.stdout
    try:
        config = BenchConfig(
            storage=storage,
            clients=clients,
            jobs=jobs,
            preload=preload,
            batch=batch,
            duration_s=duration_s,
            metrics=metrics,
        )
        if metrics and remote:
            raise InvalidInput("is not measured with --remote", field="metrics")
        runtime.loop_name()  # a bad OSQUEUE_EVENT_LOOP is a bad flag too
        if remote:
            check_shareable(storage)
    except OsqueueError as exc:
        print(f"osqueue bench: {exc}", file=sys.stderr)
        return 2
    try:
        runtime.tune_gc()
        result = runtime.run(run_remote_bench(config) if remote else run_bench(config))
    except (OsqueueError, BaseExceptionGroup) as caught:
        error = _osqueue_error(caught)
        if error is None:  # not (only) our errors: a bug, let it show
            raise
        if isinstance(error, InvalidInput):  # a storage URL that does not parse
            print(f"osqueue bench: {error}", file=sys.stderr)
            return 2
        print(f"osqueue bench: {type(error).__name__}: {error}", file=sys.stderr)
        return 1
    if as_json:
        print(json.dumps(result.to_dict()), file=stream, flush=True)
    else:
        print(format_result(result), file=stream, flush=True)
    return 0
