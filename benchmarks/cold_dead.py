"""Dead letters in dead segments: the closed loop beside a million dead, and a retry of all.

    .venv/bin/python benchmarks/cold_dead.py [--dead 1000000] [--workers 200]
        [--seconds 20] [--url-template 'file://{dir}']

One process, an embedded broker on ``file://`` in a fresh directory (under
/dev/shm when it exists).  First the closed loop on an empty document
(``--workers`` in-process workers each claim one job of ``default`` and
complete it while pushing its replacement, for ``--seconds``), then
``--dead`` jobs are killed on another queue (``graveyard``: pushed with
``max_attempts=1`` by ``push_many``, claimed 10,000 at a time, failed), then
the same closed loop again: ``of_empty`` is its jobs/s over the empty run's.
Last, ``retry_dead(queue="graveyard")`` (what ``osqueue dead URL retry --all
--queue graveyard`` calls) is timed, and the graveyard is drained, claimed
and completed, counting each id: ``came_back`` must equal ``--dead`` with no
``duplicates``.  Prints one JSON line.  Public APIs only.

The armature a separate harness (``benchmarks/cold.py``, helper "compact")
may take over; this one measures dead letters alone.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import shutil
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

PAYLOAD = b"x" * 32
BATCH = 10_000


def log(message: str) -> None:
    print(message, file=sys.stderr, flush=True)


async def _worker(client: Any, name: str, deadline: float) -> int:
    done = 0
    while time.perf_counter() < deadline:
        jobs = await client.claim(name, ["default"], max_jobs=1, wait_s=0.5)
        if jobs:
            await asyncio.gather(client.complete(jobs[0]), client.push(PAYLOAD))
            done += 1
    return done


async def closed_loop(client: Any, workers: int, seconds: float) -> float:
    from osqueue import NewJob

    depth = (await client.stats()).queues.get("default")
    missing = workers - (depth.depth if depth else 0)
    if missing > 0:
        await client.push_many([NewJob(PAYLOAD) for _ in range(missing)])
    start = time.perf_counter()
    deadline = start + seconds
    counts = await asyncio.gather(*(_worker(client, f"w{i}", deadline) for i in range(workers)))
    return sum(counts) / (time.perf_counter() - start)


async def kill(client: Any, n: int) -> float:
    """``n`` jobs of ``graveyard`` dead at their first failure; the seconds it took."""
    from osqueue import NewJob

    start = time.perf_counter()
    pushed = 0
    while pushed < n:
        size = min(BATCH, n - pushed)
        await client.push_many(
            [NewJob(PAYLOAD, queue="graveyard", max_attempts=1) for _ in range(size)]
        )
        pushed += size
    log(f"pushed {n} in {time.perf_counter() - start:.1f}s")
    failed = 0
    while failed < n:
        jobs = await client.claim("killer", ["graveyard"], max_jobs=BATCH, wait_s=30.0)
        await asyncio.gather(*(client.fail(job, error="downstream outage") for job in jobs))
        failed += len(jobs)
    return time.perf_counter() - start


async def drain(client: Any, n: int) -> tuple[int, int]:
    """Claim and complete ``graveyard`` until ``n`` claims came back or it is empty:
    (distinct ids, claims)."""
    seen: set[str] = set()
    claims = 0
    while claims < n:
        jobs = await client.claim("drain", ["graveyard"], max_jobs=BATCH, wait_s=5.0)
        if not jobs:
            break
        claims += len(jobs)
        seen.update(job.id for job in jobs)
        await client.complete_many(jobs)
    return len(seen), claims


async def run(url: str, args: argparse.Namespace) -> dict[str, Any]:
    import osqueue

    async with osqueue.Broker(url) as broker:
        client = broker.client()
        empty = await closed_loop(client, args.workers, args.seconds)
        log(f"empty: {empty:.0f} jobs/s")
        kill_s = await kill(client, args.dead)
        await broker.segments.settled()
        stats = await client.stats()
        log(f"killed {stats.queues['graveyard'].dead} in {kill_s:.1f}s")
        loaded = await closed_loop(client, args.workers, args.seconds)
        log(f"beside {args.dead} dead: {loaded:.0f} jobs/s")
        loop_stats = await client.stats()
        start = time.perf_counter()
        last = [0.0]

        def progress(jobs: int, left: int) -> None:
            if time.perf_counter() - last[0] > 2:
                last[0] = time.perf_counter()
                log(f"retried {jobs}, {left} dead segments left")

        retried = await client.retry_dead(queue="graveyard", progress=progress)
        retry_s = time.perf_counter() - start
        distinct, claims = await drain(client, args.dead)
        end = await client.stats()
        return {
            "dead": args.dead,
            "workers": args.workers,
            "empty_jobs_per_s": round(empty, 1),
            "dead_jobs_per_s": round(loaded, 1),
            "of_empty": round(loaded / empty, 3),
            "kill_s": round(kill_s, 1),
            "document_bytes_beside_dead": loop_stats.document_bytes,
            "dead_counted": stats.queues["graveyard"].dead,
            "retried": retried,
            "retry_all_s": round(retry_s, 1),
            "came_back": distinct,
            "duplicates": claims - distinct,
            "dead_left": end.queues["graveyard"].dead,
        }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--dead", type=int, default=1_000_000)
    parser.add_argument("--workers", type=int, default=200)
    parser.add_argument("--seconds", type=float, default=20.0)
    parser.add_argument("--url-template", default="file://{dir}")
    args = parser.parse_args()
    shm = Path("/dev/shm")
    directory = tempfile.mkdtemp(prefix="osqueue-dead-", dir=shm if shm.is_dir() else None)
    try:
        result = asyncio.run(run(args.url_template.format(dir=directory), args))
    finally:
        shutil.rmtree(directory, ignore_errors=True)
    print(json.dumps(result), flush=True)


if __name__ == "__main__":
    main()
