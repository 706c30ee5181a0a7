"""Deep backlog: claim + complete throughput with N jobs already waiting.

    .venv/bin/python benchmarks/backlog.py [--depths 0,100000,1000000] [--workers 200]
        [--seconds 20] [--runs 1] [--url-template 'file://{dir}']
        [--config '{"head_jobs": 1000}'] [--takeover]

With ``--runs N`` the depths take turns (run 1 of each depth, then run 2 of
each, ...), so a shared machine's drift over a long run shifts them alike;
each depth's line is its median run.  For each run, in a fresh process and a
fresh queue: an embedded broker on
``file://`` (or ``--url-template``), ``depth`` jobs with 32-byte payloads loaded
with ``push_many`` in batches of 10,000 (timed: ``load_jobs_per_s``), then
``--workers`` closed-loop in-process workers that each claim one job and
complete it, again and again, for ``--seconds``.  Prints one JSON line per
depth: ``jobs_per_s``, ``p50_ms``/``p99_ms`` (claim + complete, per job),
``cpu_us_per_job`` (the process's CPU time per job: steadier than jobs/s on a
shared machine), ``of_empty`` (the median jobs/s over the depth-0 runs'
median, when they ran; ``of_empty_by_round``: each run over the depth-0 run
of its round), ``queue_json_bytes`` (the size of queue.json after the load
and at the end, and ``queue_json_max_bytes``, the largest seen by a sampler
reading its size every 50 ms), ``document_bytes`` (what the broker counts
against its cap), ``rss_mib`` (the process's peak resident memory) and ``rss_end_mib``
(its resident memory at the end), ``spilled`` (jobs in segments after the
load), and ``refused`` (the error that stopped the load, if any:
``QueueFull`` before segments).

Each worker completes its job and pushes one to replace it, in the same
commit, so the depth stays where it was loaded for the whole run (and at
depth 0 there is always a job per worker, never more: the queue is empty but
for the jobs in flight).  A job costs a worker two commits: its claim, and its
completion with the replacement push.

``--config`` passes ``BrokerConfig`` fields (a JSON object) to every run, to
compare settings.  ``--takeover`` adds a failover to each depth after the
timed run: a standby broker watches the queue, the serving broker dies where
it stands (its tasks cancelled: no last write), and ``takeover_s`` is the time
until the standby serves, ``takeover_claim_s`` until a worker's claim on it
returns a job (with segments, that needs a load); ``lease_s`` is the lease
both are measured against.

Only public APIs are used, so the same program measures any version
(``PYTHONPATH=/path/to/other/src``) for before/after tables (``--config``
and the ``spilled`` figure need a version with segments).
"""

from __future__ import annotations

import argparse
import asyncio
import json
import shutil
import sys
import tempfile
import time
from typing import Any

from _backlog_common import (
    child_run,
    document_figures,
    load,
    log,
    median_line,
    percentile_ms,
    queue_json_bytes,
    sample_size,
    time_takeover,
    worker,
)


async def one_depth(
    url: str,
    directory: str,
    depth: int,
    workers: int,
    seconds: float,
    settings: dict[str, Any],
    takeover: bool,
) -> dict[str, Any]:
    import osqueue

    config = osqueue.BrokerConfig(**settings) if settings else None
    sizes: list[int] = []
    sampler = asyncio.ensure_future(sample_size(directory, sizes))
    broker = osqueue.Broker(url, config)
    await broker.start()
    client = broker.client()
    load_rate, refused = await load(client, depth)
    await load(client, workers)  # one job per worker on top: the depth it keeps
    loaded_json = queue_json_bytes(directory)
    stats = await client.stats()
    lat: list[float] = []
    deadline = time.perf_counter() + seconds
    start = time.perf_counter()
    cpu_start = time.process_time()
    # A load that was refused leaves no room for the workers' replacement pushes
    # either (the code before segments, at a million jobs): no timed run then.
    counts = (
        [0]
        if refused
        else await asyncio.gather(*(worker(client, f"w{i}", deadline, lat) for i in range(workers)))
    )
    elapsed = time.perf_counter() - start
    cpu_s = time.process_time() - cpu_start
    end_stats = await client.stats()
    figures = document_figures(directory, loaded_json, stats, end_stats)  # (before a takeover)
    failover = await time_takeover(broker, url, config) if takeover else {}
    await broker.stop()
    sampler.cancel()
    lat.sort()
    jobs = sum(counts)

    return {
        "depth": depth,
        "workers": workers,
        "jobs_per_s": round(jobs / elapsed, 1),
        "cpu_us_per_job": round(cpu_s / jobs * 1e6, 1) if jobs else None,
        "p50_ms": percentile_ms(lat, 0.50),
        "p99_ms": percentile_ms(lat, 0.99),
        "load_jobs_per_s": round(load_rate, 1) if depth else None,
        "refused": refused,
        "queue_json_max_bytes": max(sizes, default=0),
        **figures,
        **failover,
        **({"config": settings} if settings else {}),
    }


def child(args: argparse.Namespace) -> None:
    directory = tempfile.mkdtemp(prefix="osqueue-backlog-")
    try:
        url = args.url_template.replace("{dir}", directory)
        from osqueue import runtime

        runtime.tune_gc()
        settings = json.loads(args.config) if args.config else {}
        result = runtime.run(
            one_depth(
                url, directory, args.depth, args.workers, args.seconds, settings, args.takeover
            )
        )
        print(json.dumps(result), flush=True)
    finally:
        shutil.rmtree(directory, ignore_errors=True)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--depths", default="0,100000,400000,1000000")
    parser.add_argument("--workers", type=int, default=200)
    parser.add_argument("--seconds", type=float, default=20.0)
    parser.add_argument("--runs", type=int, default=1)
    parser.add_argument("--url-template", default="file://{dir}")
    parser.add_argument("--config", default="", help="BrokerConfig fields as a JSON object")
    parser.add_argument("--takeover", action="store_true", help="time a standby's takeover")
    parser.add_argument("--depth", type=int, help=argparse.SUPPRESS)  # child process
    args = parser.parse_args()
    if args.depth is not None:
        child(args)
        return
    depths = [int(d) for d in args.depths.split(",")]
    # Round-robin: run k of every depth, then run k + 1, so a machine that drifts
    # over the minutes a deep load takes shifts every depth alike.
    runs: dict[int, list[dict[str, Any]]] = {depth: [] for depth in depths}
    for run in range(args.runs):
        for depth in depths:
            log(f"depth {depth}: run {run + 1}/{args.runs}")
            runs[depth].append(_child_run(args, depth))
    for depth in depths:
        print(json.dumps(median_line(runs[depth], runs.get(0))), flush=True)


def _child_run(args: argparse.Namespace, depth: int) -> dict[str, Any]:
    """One run of ``depth`` in a fresh process: its JSON line."""
    cmd = [
        sys.executable,
        __file__,
        "--depth",
        str(depth),
        "--workers",
        str(args.workers),
        "--seconds",
        str(args.seconds),
        "--url-template",
        args.url_template,
        "--config",
        args.config,
        *(["--takeover"] if args.takeover else []),
    ]
    return child_run(cmd, f"depth {depth}")


if __name__ == "__main__":
    main()
