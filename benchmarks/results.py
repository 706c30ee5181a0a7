"""How soon ``client.result(id, wait_s=...)`` answers after a completion is acknowledged.

    .venv/bin/python benchmarks/results.py [--jobs 200] [--workers 20] [--write-ms 200]
                                           [--mode local|remote] [--result-bytes 64]

A broker on ``latency+memory://`` (every write takes ``--write-ms``) holds
``--jobs`` jobs, each watched by a ``result(id, wait_s=...)`` long poll parked
before its job is claimed.  ``--workers`` closed-loop workers claim one job
each and complete it with a result (``--result-bytes`` of text: above the
broker's inline limit of 1 KiB it goes to a result object).  For every job
the program takes the time its completion was acknowledged (``complete()``
returned) and the time its long poll answered.  The long poll is woken by the
commit that finishes the job, so the gap is far below one write: that commit
answers the completion and the poll at once.

``--mode remote`` runs the broker's gRPC server in this process and the
workers and polls through a remote client (what ``osqueue.connect`` gives).

Prints one JSON line: ``answer_after_ack_ms`` (median, p99, max, min; the
answer minus the acknowledgement, negative when the poll heard first),
``commit_ms`` (median and p99 of the completion's own round trip: about one
write), ``within_one_commit`` (the share of answers less than one write after
their acknowledgement: a later commit would come at least a write later),
and the settings.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import statistics
import sys
import time
import uuid
from collections.abc import AsyncIterator, Sequence
from contextlib import asynccontextmanager
from typing import Any

from osqueue.api import NewJob, QueueClient
from osqueue.broker import Broker, BrokerConfig
from osqueue.storage import from_url


def parse(argv: Sequence[str] | None = None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    p.add_argument("--jobs", type=int, default=200)
    p.add_argument("--workers", type=int, default=20)
    p.add_argument("--write-ms", type=float, default=200.0)
    p.add_argument("--mode", choices=("local", "remote"), default="local")
    p.add_argument("--result-bytes", type=int, default=64)
    return p.parse_args(argv)


class _Parked(dict[str, list["asyncio.Future[None]"]]):
    """The broker's parked ``result()`` calls by job id; sets ``event`` once ``n``
    jobs have one."""

    def __init__(self, n: int, event: asyncio.Event) -> None:
        super().__init__()
        self._n = n
        self._event = event

    def setdefault(
        self, key: str, default: list[asyncio.Future[None]] | None = None
    ) -> list[asyncio.Future[None]]:
        out = super().setdefault(key, [] if default is None else default)
        if len(self) >= self._n:
            self._event.set()
        return out


def pct(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, round(q * (len(ordered) - 1)))]


@asynccontextmanager
async def serving(args: argparse.Namespace) -> AsyncIterator[tuple[Broker, QueueClient]]:
    url = f"latency+memory://results-{uuid.uuid4().hex[:8]}?write_ms={args.write_ms:g}"
    config = BrokerConfig(lease_s=30.0, stats_log_interval_s=None)
    if args.mode == "local":
        async with Broker(from_url(url), config) as broker:
            yield broker, broker.client()
        return
    from osqueue.client.remote import RemoteClient, RemoteConfig
    from osqueue.server.runner import BrokerServer
    from osqueue.server.server import ServerConfig

    async with BrokerServer(url, ServerConfig(listen="127.0.0.1:0"), config) as server:
        assert server.broker is not None
        remote = RemoteClient(server.broker.storage, RemoteConfig(timeout_s=120.0))
        try:
            yield server.broker, remote
        finally:
            await remote.close()


async def run(args: argparse.Namespace) -> dict[str, Any]:
    async with serving(args) as (broker, client):
        ids = await client.push_many([NewJob(b"%d" % i) for i in range(args.jobs)])
        answered: dict[str, float] = {}
        acked: dict[str, float] = {}
        commit_ms: list[float] = []

        async def watch(job_id: str) -> None:
            answer = await client.result(job_id, wait_s=300.0)
            answered[job_id] = time.perf_counter()
            assert answer.status == "done", answer

        all_parked = asyncio.Event()
        broker._waiters.results = _Parked(len(ids), all_parked)
        polls = [asyncio.ensure_future(watch(i)) for i in ids]
        await all_parked.wait()  # every poll is parked at the broker
        value = "r" * args.result_bytes

        async def work() -> None:
            while jobs := await client.claim("bench", max_jobs=1):
                (job,) = jobs
                start = time.perf_counter()
                await client.complete(job, result=value)
                now = time.perf_counter()
                acked[job.id] = now
                commit_ms.append((now - start) * 1000)

        await asyncio.gather(*(work() for _ in range(args.workers)))
        await asyncio.gather(*polls)
    gaps = [(answered[i] - acked[i]) * 1000 for i in ids]
    return {
        "benchmark": "results",
        "mode": args.mode,
        "write_ms": args.write_ms,
        "jobs": args.jobs,
        "workers": args.workers,
        "result_bytes": args.result_bytes,
        "answer_after_ack_ms": {
            "median": round(statistics.median(gaps), 3),
            "p99": round(pct(gaps, 0.99), 3),
            "max": round(max(gaps), 3),
            "min": round(min(gaps), 3),
        },
        "commit_ms": {
            "median": round(statistics.median(commit_ms), 1),
            "p99": round(pct(commit_ms, 0.99), 1),
        },
        "within_one_commit": round(sum(g < args.write_ms for g in gaps) / len(gaps), 4),
    }


def main(argv: Sequence[str] | None = None) -> None:
    args = parse(argv)
    print(json.dumps(asyncio.run(run(args))), flush=True)
    sys.stdout.flush()


if __name__ == "__main__":
    main()
