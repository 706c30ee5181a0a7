"""Remote mode end to end: a broker, producers and workers in separate processes over gRPC.

    .venv/bin/python benchmarks/remote_e2e.py [--url file:///tmp/q] [--jobs 30000]
        [--producers 1] [--workers 1] [--runtime loop|worker] [--unbatched-s 5] [--runs 3]

Each run starts a fresh queue: the broker process (``run_broker``), then the
worker and producer processes, which connect by the storage URL only.  Once
all are connected they start together; producers push ``--jobs`` jobs from
many concurrent tasks (the client coalesces them into batch RPCs), workers
claim in batches with long polls and complete each job (completions coalesce
too).  ``--runtime worker`` runs each worker as ``osqueue.Worker`` (what
``osqueue work`` runs) with ``--batch`` x ``--claimers`` slots and a handler
that returns at once, instead of the hand-written claim loop.
``jobs_per_s`` is jobs / (last completion - start).  Before that, on
the fresh queue, one process makes single calls, one at a time, for
``--unbatched-s``: ``push_rpc_per_s`` (each waits for its own commit) and
``stats_rpc_per_s`` (no commit: the gRPC round trip alone).

Prints one JSON line (the median run by jobs/s) on stdout; each run on stderr.
``latency+file:///dir?write_ms=200`` injects write latency.  Every process runs
on the runtime of ``osqueue broker`` and ``osqueue work`` (``osqueue.runtime``:
uvloop when installed, ``OSQUEUE_EVENT_LOOP`` chooses, and raised GC thresholds).
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from typing import Any

import osqueue
from osqueue.client.remote import RemoteConfig, connect
from osqueue.runtime import run, tune_gc
from osqueue.server import ServerConfig, run_broker

PY = sys.executable
HERE = os.path.abspath(__file__)
CLIENT = RemoteConfig(timeout_s=60.0, rpc_timeout_s=30.0)


# ---------------------------------------------------------------------- roles (child processes)


async def role_broker(url: str) -> None:
    serving = asyncio.Event()
    task = asyncio.create_task(
        run_broker(url, ServerConfig(listen="127.0.0.1:0"), on_serving=serving)
    )
    await serving.wait()
    print("serving", flush=True)
    await task


def _wait_go() -> float:
    print("ready", flush=True)
    line = sys.stdin.readline().split()
    return float(line[1])


async def role_producer(url: str, jobs: int, tasks: int) -> None:
    async with connect(url, config=CLIENT) as q:
        await q.stats()  # connected
        _wait_go()
        counter = iter(range(jobs))
        payload = b"x" * 64

        async def pusher() -> None:
            for _ in counter:
                await q.push(payload)

        await asyncio.gather(*(pusher() for _ in range(tasks)))
        print(f"done {time.time()}", flush=True)


async def role_worker(url: str, total: int, batch: int, claimers: int) -> None:
    async with connect(url, config=CLIENT) as q:
        await q.stats()
        _wait_go()
        done = 0
        finished = asyncio.Event()

        async def claimer() -> None:
            nonlocal done
            pending: set[asyncio.Future[Any]] = set()
            while not finished.is_set():
                jobs = await q.claim("bench-worker", max_jobs=batch, wait_s=0.5)
                if jobs:  # complete them while the next claim is on its way
                    task = asyncio.ensure_future(asyncio.gather(*(q.complete(j) for j in jobs)))
                    pending.add(task)
                    task.add_done_callback(pending.discard)
                    done += len(jobs)
                    continue
                if pending:
                    await asyncio.wait(pending)
                if (await q.stats()).completed >= total:
                    finished.set()

        await asyncio.gather(*(claimer() for _ in range(claimers)))
        print(f"done {time.time()} {done}", flush=True)


async def role_worker_runtime(url: str, total: int, concurrency: int) -> None:
    """A worker as users run it: ``osqueue.Worker``; stops once ``total`` jobs are done."""
    async with connect(url, config=CLIENT) as q:
        await q.stats()
        _wait_go()
        done = 0

        async def handler(job: osqueue.Job) -> None:
            nonlocal done
            done += 1

        worker = osqueue.Worker(q, handler, concurrency=concurrency, wait_s=0.5)

        async def watch() -> None:  # other workers may do some of the jobs
            while not worker.stopping:
                await asyncio.sleep(0.05)
                if (await q.stats()).completed >= total:
                    worker.stop()

        watcher = asyncio.create_task(watch())
        await worker.run()
        watcher.cancel()
        print(f"done {time.time()} {done}", flush=True)


async def role_unbatched(url: str, seconds: float) -> None:
    async with connect(url, config=CLIENT) as q:
        figures = {}
        for name, call in (("stats_rpc_per_s", q.stats), ("push_rpc_per_s", lambda: q.push(b"u"))):
            n, start = 0, time.perf_counter()
            while time.perf_counter() - start < seconds:
                await call()  # one call at a time: one RPC each
                n += 1
            figures[name] = round(n / (time.perf_counter() - start), 1)
        print(json.dumps(figures), flush=True)


# ---------------------------------------------------------------------- the driver


def _spawn(*args: str) -> subprocess.Popen[str]:
    return subprocess.Popen(
        [PY, HERE, *args],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        text=True,
    )


def _expect(proc: subprocess.Popen[str], word: str) -> list[str]:
    assert proc.stdout is not None
    line = proc.stdout.readline().split()
    if not line or line[0] != word:
        raise RuntimeError(f"child said {line!r}, expected {word!r}")
    return line


def fresh_url(template: str | None) -> tuple[str, str]:
    directory = tempfile.mkdtemp(prefix="osqueue-remote-bench-")
    if template is None:
        return f"file://{directory}", directory
    return template.replace("{dir}", directory), directory


def one_run(args: argparse.Namespace) -> dict[str, Any]:
    url, directory = fresh_url(args.url)
    broker = _spawn("--role", "broker", "--url", url)
    children: list[subprocess.Popen[str]] = []
    try:
        _expect(broker, "serving")
        # Single calls first, on the fresh queue (a document holding nothing yet).
        unbatched = _spawn("--role", "unbatched", "--url", url, "--seconds", str(args.unbatched_s))
        assert unbatched.stdout is not None
        single = json.loads(unbatched.stdout.readline())
        unbatched.wait(30)
        per_producer = args.jobs // args.producers
        total = per_producer * args.producers
        workers = [
            _spawn(
                "--role",
                "worker",
                "--url",
                url,
                "--jobs",
                str(total),
                "--batch",
                str(args.batch),
                "--claimers",
                str(args.claimers),
                "--runtime",
                args.runtime,
            )
            for _ in range(args.workers)
        ]
        producers = [
            _spawn(
                "--role",
                "producer",
                "--url",
                url,
                "--jobs",
                str(per_producer),
                "--tasks",
                str(args.tasks),
            )
            for _ in range(args.producers)
        ]
        children = workers + producers
        for child in children:
            _expect(child, "ready")
        start = time.time()
        for child in children:
            assert child.stdin is not None
            child.stdin.write(f"go {start}\n")
            child.stdin.flush()
        pushed_at = max(float(_expect(p, "done")[1]) for p in producers)
        finished = [_expect(w, "done") for w in workers]
        ended = max(float(line[1]) for line in finished)
        for child in children:
            child.wait(30)
        result = {
            "url": url.replace(directory, "{dir}"),
            "jobs": total,
            "producers": args.producers,
            "workers": args.workers,
            "push_tasks": args.tasks,
            "claim_batch": args.batch,
            "claimers": args.claimers,
            "runtime": args.runtime,
            "jobs_per_s": round(total / (ended - start), 1),
            "push_jobs_per_s": round(total / (pushed_at - start), 1),
            "seconds": round(ended - start, 2),
            **single,
        }
        print(json.dumps(result), file=sys.stderr, flush=True)
        return result
    finally:
        for child in children:
            if child.poll() is None:
                child.kill()
        broker.terminate()
        try:
            broker.wait(30)
        except subprocess.TimeoutExpired:
            broker.kill()
        shutil.rmtree(directory, ignore_errors=True)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--role", choices=["broker", "producer", "worker", "unbatched"])
    parser.add_argument(
        "--url", help="storage URL; {dir} is replaced by a fresh temp directory (default file://)"
    )
    parser.add_argument("--jobs", type=int, default=30_000)
    parser.add_argument("--producers", type=int, default=1)
    parser.add_argument("--workers", type=int, default=1)
    parser.add_argument(
        "--tasks", type=int, default=2000, help="concurrent push tasks per producer"
    )
    parser.add_argument("--batch", type=int, default=1000, help="jobs per claim")
    parser.add_argument("--claimers", type=int, default=2, help="claim loops per worker")
    parser.add_argument(
        "--runtime",
        choices=["loop", "worker"],
        default="loop",
        help="workers: the hand-written claim loop, or osqueue.Worker (batch x claimers slots)",
    )
    parser.add_argument("--unbatched-s", type=float, default=5.0)
    parser.add_argument("--seconds", type=float, default=5.0)
    parser.add_argument("--runs", type=int, default=3)
    args = parser.parse_args()
    if args.role:  # a child: the runtime `osqueue broker` and `osqueue work` use
        tune_gc()
    if args.role == "broker":
        run(role_broker(args.url))
    elif args.role == "producer":
        run(role_producer(args.url, args.jobs, args.tasks))
    elif args.role == "worker" and args.runtime == "worker":
        run(role_worker_runtime(args.url, args.jobs, args.batch * args.claimers))
    elif args.role == "worker":
        run(role_worker(args.url, args.jobs, args.batch, args.claimers))
    elif args.role == "unbatched":
        run(role_unbatched(args.url, args.seconds))
    else:
        runs = [one_run(args) for _ in range(args.runs)]
        runs.sort(key=lambda r: r["jobs_per_s"])
        median = dict(runs[len(runs) // 2])
        median["runs_jobs_per_s"] = [r["jobs_per_s"] for r in runs]
        median["median_of"] = len(runs)
        median["jobs_per_s_spread"] = round(statistics.pstdev(median["runs_jobs_per_s"]), 1)
        print(json.dumps(median), flush=True)


if __name__ == "__main__":
    main()
