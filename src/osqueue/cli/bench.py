"""``osqueue bench``: the throughput benchmark (see :mod:`osqueue.bench`)."""

from __future__ import annotations

from typing import Annotated

import typer

from osqueue.cli.options import AsJson


def bench(
    storage: Annotated[
        str,
        typer.Option(
            "--storage",
            envvar="OSQUEUE_BENCH_STORAGE",
            help="Storage URL to run on (latency+file:///tmp/q?write_ms=200 adds latency).",
        ),
    ] = "memory://bench",
    clients: Annotated[
        int,
        typer.Option(
            "--clients", envvar="OSQUEUE_BENCH_CLIENTS", min=1, help="Closed-loop clients."
        ),
    ] = 1,
    jobs: Annotated[
        int, typer.Option("--jobs", envvar="OSQUEUE_BENCH_JOBS", min=1, help="Jobs in total.")
    ] = 10_000,
    preload: Annotated[
        int,
        typer.Option("--preload", envvar="OSQUEUE_BENCH_PRELOAD", min=0, help="Jobs queued first."),
    ] = 0,
    batch: Annotated[
        int,
        typer.Option(
            "--batch", envvar="OSQUEUE_BENCH_BATCH", min=1, help="Jobs per push and claim."
        ),
    ] = 1,
    duration_s: Annotated[
        float,
        typer.Option(
            "--duration-s",
            envvar="OSQUEUE_BENCH_DURATION_S",
            min=0.1,
            help="Stop starting cycles after.",
        ),
    ] = 60.0,
    remote: Annotated[
        bool,
        typer.Option(
            "--remote",
            envvar="OSQUEUE_BENCH_REMOTE",
            help="Broker in a child process (osqueue broker), clients here over gRPC; "
            "not with memory:// storage.",
        ),
    ] = False,
    metrics: Annotated[
        bool,
        typer.Option(
            "--metrics",
            envvar="OSQUEUE_BENCH_METRICS",
            help="The broker serves Prometheus metrics, scraped every second during the run"
            " (their cost; needs osqueue\\[metrics]).",
        ),
    ] = False,
    as_json: AsJson = False,
) -> None:
    """Measure push -> claim -> complete throughput; prints one line (JSON with --json)."""
    from osqueue.bench import bench_command

    code = bench_command(
        storage=storage,
        clients=clients,
        jobs=jobs,
        preload=preload,
        batch=batch,
        as_json=as_json,
        duration_s=duration_s,
        remote=remote,
        metrics=metrics,
    )
    if code:
        raise typer.Exit(code)
