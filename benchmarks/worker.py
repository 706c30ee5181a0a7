"""The worker runtime (``osqueue.Worker``, what ``osqueue work`` runs) under write latency.

    .venv/bin/python benchmarks/worker.py [--cases embedded-c10,...] [--runs 3] [--quick]

Each run queues ``jobs`` jobs, then one ``Worker`` with ``concurrency`` slots
and a handler that returns at once takes them all; ``jobs_per_s`` is jobs /
(last completion - start).  Storage is memory with 100 ms injected write
latency, so the figure is set by how many writes a slot waits for per job:
``ideal_jobs_per_s`` is ``concurrency / 0.1 s`` (one write per job: the claim
of the next job riding in the commit of the last one's completion).
``embedded`` cases use the in-process client; ``remote`` cases run the broker's
gRPC server in this process and the worker through ``osqueue.connect`` over
loopback.

Prints one JSON line per case on stdout (the median run by jobs/s):
``{"case", "jobs_per_s", "ideal_jobs_per_s", "of_ideal", "commits_per_job",
"concurrency", "remote"}``; every run goes to stderr.
"""

from __future__ import annotations

import asyncio
import json
import statistics
import sys
import time
import uuid
from dataclasses import dataclass

from _cases import parse_cases

import osqueue
from osqueue.api import QueueClient
from osqueue.runtime import run, tune_gc
from osqueue.server import ServerConfig, run_broker

WRITE_MS = 100.0


@dataclass(frozen=True, slots=True)
class Case:
    name: str
    concurrency: int
    jobs: int
    quick_jobs: int
    remote: bool = False


CASES = {
    case.name: case
    for case in (
        Case("embedded-c1", concurrency=1, jobs=100, quick_jobs=30),
        Case("embedded-c10", concurrency=10, jobs=1_000, quick_jobs=200),
        Case("embedded-c100", concurrency=100, jobs=6_000, quick_jobs=1_000),
        Case("remote-c10", concurrency=10, jobs=1_000, quick_jobs=200, remote=True),
        Case("remote-c100", concurrency=100, jobs=6_000, quick_jobs=1_000, remote=True),
    )
}


def log(message: str) -> None:
    print(message, file=sys.stderr, flush=True)


async def drain(client: QueueClient, jobs: int, concurrency: int) -> float:
    """Queue ``jobs`` jobs, run one worker until it has completed them all; seconds taken."""
    for start in range(0, jobs, 1_000):
        await client.push_many([osqueue.NewJob(b"x") for _ in range(min(1_000, jobs - start))])
    finished = 0
    worker: osqueue.Worker | None = None

    async def handler(job: osqueue.Job) -> None:
        nonlocal finished
        finished += 1
        if finished == jobs and worker is not None:
            worker.stop()  # graceful: the last completions still go out

    worker = osqueue.Worker(client, handler, concurrency=concurrency, wait_s=0.5)
    started = time.perf_counter()
    await worker.run()
    elapsed = time.perf_counter() - started
    if worker.counters.processed != jobs:
        raise SystemExit(f"completed {worker.counters.processed} of {jobs} jobs")
    return elapsed


async def run_once(case: Case, jobs: int) -> dict[str, float]:
    url = f"latency+memory://worker-bench-{uuid.uuid4().hex[:8]}?write_ms={WRITE_MS:g}"
    if not case.remote:
        async with osqueue.Broker(url) as broker:
            before = broker.commits
            elapsed = await drain(broker.client(), jobs, case.concurrency)
            commits = broker.commits - before
    else:
        serving = asyncio.Event()
        server = asyncio.create_task(
            run_broker(url, ServerConfig(listen="127.0.0.1:0"), on_serving=serving)
        )
        await serving.wait()
        try:
            async with osqueue.connect(url) as client:
                before = (await client.stats()).version
                elapsed = await drain(client, jobs, case.concurrency)
                commits = (await client.stats()).version - before
        finally:
            server.cancel()
            await asyncio.gather(server, return_exceptions=True)
    return {"jobs_per_s": jobs / elapsed, "commits_per_job": commits / jobs}


def run_case(case: Case, runs: int, quick: bool) -> dict[str, object]:
    jobs = case.quick_jobs if quick else case.jobs
    results = []
    for i in range(runs):
        result = run(run_once(case, jobs))
        log(f"{case.name}: run {i + 1}/{runs}: {json.dumps(result)}")
        results.append(result)
    median = statistics.median_low(r["jobs_per_s"] for r in results)
    chosen = next(r for r in results if r["jobs_per_s"] == median)
    ideal = case.concurrency / (WRITE_MS / 1000.0)
    return {
        "case": case.name,
        "jobs_per_s": round(median, 1),
        "ideal_jobs_per_s": ideal,
        "of_ideal": round(median / ideal, 3),
        "commits_per_job": round(chosen["commits_per_job"], 3),
        "concurrency": case.concurrency,
        "remote": case.remote,
    }


def main(argv: list[str]) -> int:
    args = parse_cases(__doc__, CASES, argv)
    tune_gc()
    for name in args.names:
        print(json.dumps(run_case(CASES[name], args.runs, args.quick)), flush=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
