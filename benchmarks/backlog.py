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
import os
import resource
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

LOAD_BATCH = 10_000
PAYLOAD = b"x" * 32


def log(message: str) -> None:
    print(message, file=sys.stderr, flush=True)


def _queue_json_bytes(directory: str) -> int:
    path = Path(directory) / "queue.json"
    return path.stat().st_size if path.exists() else 0


async def _load(client: Any, depth: int) -> tuple[float, str | None]:
    """Push ``depth`` jobs in batches of LOAD_BATCH (two batches in flight)."""
    from osqueue import NewJob, OsqueueError

    start = time.perf_counter()
    pushed = 0
    try:
        while pushed < depth:
            sizes = [min(LOAD_BATCH, depth - pushed - i * LOAD_BATCH) for i in range(2)]
            sizes = [n for n in sizes if n > 0]
            await asyncio.gather(
                *(client.push_many([NewJob(PAYLOAD) for _ in range(n)]) for n in sizes)
            )
            pushed += sum(sizes)
    except OsqueueError as exc:
        return pushed / (time.perf_counter() - start), f"{type(exc).__name__} after {pushed}"
    elapsed = time.perf_counter() - start
    return (depth / elapsed if elapsed > 0 else 0.0), None


async def _worker(client: Any, name: str, deadline: float, lat: list[float]) -> int:
    done = 0
    clock = time.perf_counter
    while clock() < deadline:
        t0 = clock()
        jobs = await client.claim(name, ["default"], max_jobs=1, wait_s=0.5)
        if not jobs:
            continue
        await asyncio.gather(client.complete(jobs[0]), client.push(PAYLOAD))
        lat.append(clock() - t0)
        done += 1
    return done


def _rss_mib() -> float:
    """The process's resident memory now (Linux; 0 elsewhere)."""
    try:
        with open("/proc/self/statm") as f:
            pages = int(f.read().split()[1])
    except OSError:
        return 0.0
    return round(pages * os.sysconf("SC_PAGE_SIZE") / 2**20, 1)


async def _sample_size(directory: str, sizes: list[int]) -> None:
    """Record queue.json's size every 50 ms (the largest goes in the report)."""
    while True:
        sizes.append(_queue_json_bytes(directory))
        await asyncio.sleep(0.05)


async def _takeover(broker: Any, url: str, config: Any) -> dict[str, Any]:
    """Kill ``broker`` where it stands; time a standby's takeover and first claim."""
    import osqueue

    standby = osqueue.Broker(url, config, standby=True)
    starting = asyncio.ensure_future(standby.start())
    await asyncio.sleep(0.5)  # the standby has read the document once
    for task in broker.tasks():  # a crash: no last write, the lease runs out
        task.cancel()
    killed = time.perf_counter()
    await starting
    serving = time.perf_counter() - killed
    jobs = await standby.client().claim("after-takeover", ["default"], wait_s=30.0)
    claimed = time.perf_counter() - killed
    await standby.stop()
    return {
        "takeover_s": round(serving, 3),
        "takeover_claim_s": round(claimed, 3) if jobs else None,
        "lease_s": standby.config.lease_s,
    }


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
    sampler = asyncio.ensure_future(_sample_size(directory, sizes))
    broker = osqueue.Broker(url, config)
    await broker.start()
    client = broker.client()
    load_rate, refused = await _load(client, depth)
    await _load(client, workers)  # one job per worker on top: the depth it keeps
    loaded_json = _queue_json_bytes(directory)
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
        else await asyncio.gather(
            *(_worker(client, f"w{i}", deadline, lat) for i in range(workers))
        )
    )
    elapsed = time.perf_counter() - start
    cpu_s = time.process_time() - cpu_start
    end_stats = await client.stats()
    rss_end = _rss_mib()
    failover = await _takeover(broker, url, config) if takeover else {}
    await broker.stop()
    sampler.cancel()
    lat.sort()
    jobs = sum(counts)

    def pct(q: float) -> float:
        return round(lat[min(len(lat) - 1, int(q * len(lat)))] * 1000, 2) if lat else 0.0

    return {
        "depth": depth,
        "workers": workers,
        "jobs_per_s": round(jobs / elapsed, 1),
        "cpu_us_per_job": round(cpu_s / jobs * 1e6, 1) if jobs else None,
        "p50_ms": pct(0.50),
        "p99_ms": pct(0.99),
        "load_jobs_per_s": round(load_rate, 1) if depth else None,
        "refused": refused,
        "queue_json_bytes": loaded_json,
        "queue_json_bytes_end": _queue_json_bytes(directory),
        "queue_json_max_bytes": max(sizes, default=0),
        "document_bytes": stats.document_bytes,
        "document_bytes_end": end_stats.document_bytes,
        "spilled": sum(getattr(q, "spilled", 0) for q in stats.queues.values()),
        "rss_mib": round(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024, 1),
        "rss_end_mib": rss_end,
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
    empty: float | None = None
    for depth in depths:
        done = runs[depth]
        best = sorted(done, key=lambda r: r["jobs_per_s"])[len(done) // 2]  # the median run
        best["runs_jobs_per_s"] = [r["jobs_per_s"] for r in done]
        best["median_of"] = len(done)
        if depth == 0:
            empty = best["jobs_per_s"]
        if empty:
            best["of_empty"] = round(best["jobs_per_s"] / empty, 3)
            # each run against the empty run of its own round
            if depth != 0 and 0 in runs:
                pairs = zip(done, runs[0], strict=True)
                best["of_empty_by_round"] = [
                    round(r["jobs_per_s"] / e["jobs_per_s"], 3) for r, e in pairs
                ]
        print(json.dumps(best), flush=True)


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
    out = subprocess.run(cmd, capture_output=True, text=True, env=os.environ, check=False)
    lines = [line for line in out.stdout.splitlines() if line.startswith("{")]
    if out.returncode != 0 or not lines:
        log(out.stderr[-3000:])
        raise SystemExit(f"depth {depth}: the run failed")
    log("  " + lines[-1])
    result: dict[str, Any] = json.loads(lines[-1])
    return result


if __name__ == "__main__":
    main()
