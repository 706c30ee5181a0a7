"""jqueue side of ``benchmarks/vs_jqueue.py``; runs under jqueue's own Python 3.12 venv.

It mirrors ``osqueue.bench`` exactly: N closed-loop clients, each doing
push -> claim -> complete (jqueue: ``enqueue`` -> ``dequeue`` -> ``ack``) against one
``jqueue.BrokerQueue``, with the same injected read and write latency, the same
payload, the same preload and the same stop rule (a total job count or a time
limit, whichever comes first).  It prints one JSON line with the figures.

Not imported by osqueue: ``vs_jqueue.py`` runs it as a script with the 3.12 interpreter.
"""

from __future__ import annotations

import argparse
import asyncio
import gc
import json
import os
import sys
import time
from dataclasses import dataclass, field
from typing import Any

from jqueue import BrokerQueue, InMemoryStorage
from jqueue.core import codec
from jqueue.domain.models import Job

QUEUE = "default"


class DelayedStorage:
    """jqueue storage port wrapper that sleeps before every read and write.

    The same shape as osqueue's ``latency+`` storage wrapper: the delay is paid
    before the call reaches the store, reads and writes each pay their own.
    It also counts successful writes (jqueue's commits).
    """

    def __init__(self, inner: Any, read_s: float, write_s: float) -> None:
        self._inner = inner
        self._read_s = read_s
        self._write_s = write_s
        self.writes = 0

    async def read(self) -> tuple[bytes, str | None]:
        if self._read_s > 0:
            await asyncio.sleep(self._read_s)
        return await self._inner.read()

    async def write(self, content: bytes, if_match: str | None = None) -> str:
        if self._write_s > 0:
            await asyncio.sleep(self._write_s)
        etag = await self._inner.write(content, if_match=if_match)
        self.writes += 1
        return str(etag)


@dataclass
class Tally:
    """Shared counters of one run; clients take jobs from ``remaining``."""

    remaining: int
    deadline: float
    latencies: list[float] = field(default_factory=list)
    jobs: int = 0
    empty_claims: int = 0


def make_storage(args: argparse.Namespace) -> Any:
    if args.storage == "memory":
        return InMemoryStorage()
    if args.storage == "s3":
        from jqueue.adapters.storage.s3 import S3Storage

        return S3Storage(
            bucket=args.s3_bucket,
            key=args.s3_key,
            endpoint_url=args.s3_endpoint,
            region_name=args.s3_region,
        )
    raise SystemExit(f"--storage: unknown storage {args.storage!r} (memory or s3)")


async def preload(storage: DelayedStorage, count: int, payload: bytes) -> None:
    """Queue ``count`` jobs in one write (jqueue has no batch enqueue)."""
    if count <= 0:
        return
    content, etag = await storage.read()
    state = codec.decode(content)
    jobs = state.jobs + tuple(Job.new(QUEUE, payload) for _ in range(count))
    state = state.model_copy(update={"jobs": jobs, "version": state.version + 1})
    await storage.write(codec.encode(state), if_match=etag)


async def client(q: BrokerQueue, tally: Tally, payload: bytes) -> None:
    clock = time.perf_counter
    lat = tally.latencies
    while tally.remaining > 0 and clock() < tally.deadline:
        tally.remaining -= 1
        t0 = clock()
        await q.enqueue(QUEUE, payload)
        t1 = clock()
        lat.append(t1 - t0)
        claimed: list[Job] = []
        while not claimed:
            t0 = clock()
            claimed = await q.dequeue(QUEUE, batch_size=1)
            t1 = clock()
            lat.append(t1 - t0)
            if not claimed:
                tally.empty_claims += 1
        for job in claimed:
            t0 = clock()
            await q.ack(job.id)
            t1 = clock()
            lat.append(t1 - t0)
            tally.jobs += 1


def percentile_ms(sorted_s: list[float], fraction: float) -> float:
    if not sorted_s:
        return 0.0
    index = min(len(sorted_s) - 1, int(fraction * len(sorted_s)))
    return sorted_s[index] * 1000.0


async def run(args: argparse.Namespace) -> dict[str, object]:
    delay_s = args.latency_ms / 1000.0
    storage = DelayedStorage(make_storage(args), read_s=delay_s, write_s=delay_s)
    payload = b"x" * args.payload_bytes
    await preload(storage, args.preload, payload)
    writes_before = storage.writes
    async with BrokerQueue(storage) as q:
        start = time.perf_counter()
        tally = Tally(remaining=args.jobs, deadline=start + args.duration_s)
        tasks = [asyncio.create_task(client(q, tally, payload)) for _ in range(args.clients)]
        await asyncio.gather(*tasks)
        elapsed = time.perf_counter() - start
    lat = sorted(tally.latencies)
    commits = storage.writes - writes_before
    ops = len(lat)
    return {
        "system": "jqueue",
        "jobs_per_s": tally.jobs / elapsed,
        "ops_per_s": ops / elapsed,
        "p50_ms": percentile_ms(lat, 0.50),
        "p99_ms": percentile_ms(lat, 0.99),
        "commits": commits,
        "avg_batch": ops / commits if commits else 0.0,
        "jobs": tally.jobs,
        "ops": ops,
        "elapsed_s": elapsed,
        "empty_claims": tally.empty_claims,
        "clients": args.clients,
        "python": sys.version.split()[0],
    }


def parse(argv: list[str]) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__)
    p.add_argument("--storage", default="memory", choices=["memory", "s3"])
    p.add_argument("--clients", type=int, default=1)
    p.add_argument("--jobs", type=int, default=1000)
    p.add_argument("--preload", type=int, default=0)
    p.add_argument("--latency-ms", type=float, default=0.0)
    p.add_argument("--duration-s", type=float, default=30.0)
    p.add_argument("--payload-bytes", type=int, default=32)
    p.add_argument("--s3-endpoint", default=None)
    p.add_argument("--s3-bucket", default="bench")
    p.add_argument("--s3-key", default="jqueue/state.json")
    p.add_argument("--s3-region", default="us-east-1")
    args = p.parse_args(argv)
    if args.clients < 1:
        p.error("--clients must be at least 1")
    if args.jobs < 1:
        p.error("--jobs must be at least 1")
    return args


def run_on_loop(main: Any) -> dict[str, Any]:
    """The same runtime as osqueue's benchmark process (``osqueue.runtime``): the same
    GC thresholds, and uvloop when installed unless ``OSQUEUE_EVENT_LOOP=asyncio``."""
    gc.collect()
    gc.freeze()
    gc.set_threshold(20_000, 50, 100)
    if os.environ.get("OSQUEUE_EVENT_LOOP", "auto") != "asyncio":
        try:
            import uvloop
        except ImportError:
            pass
        else:
            return uvloop.run(main)  # type: ignore[no-any-return]
    return asyncio.run(main)  # type: ignore[no-any-return]


def main(argv: list[str]) -> int:
    result = run_on_loop(run(parse(argv)))
    print(json.dumps(result), flush=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
