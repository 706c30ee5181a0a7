"""The closed-loop workload: N clients each doing push -> claim -> complete.

Written against :class:`~osqueue.api.QueueClient` only, so the same
harness drives the in-process client and a remote one.  The harness keeps its
own cost per op to two clock reads and one list append.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Sequence
from dataclasses import dataclass, field

from osqueue.api import Job, NewJob, QueueClient
from osqueue.bench.config import BenchResult

#: Jobs per ``push_many`` call when preloading.
PRELOAD_CHUNK = 5_000
#: preload chunks in flight at once
PRELOAD_WINDOW = 8
#: How long a claim that found nothing waits for a job on its retry.
RETRY_CLAIM_WAIT_S = 1.0


@dataclass(slots=True)
class Tally:
    """Counters shared by the clients of one run.

    Clients take jobs from ``remaining`` before each cycle and stop starting
    cycles once it is empty or ``deadline`` (a ``time.perf_counter`` value) has
    passed.
    """

    remaining: int
    deadline: float
    latencies_s: list[float] = field(default_factory=list)
    jobs: int = 0


@dataclass(frozen=True, slots=True)
class WorkloadFigures:
    jobs: int
    ops: int
    elapsed_s: float
    latencies_s: Sequence[float]


async def preload(client: QueueClient, count: int, payload: bytes, queue: str) -> None:
    """Queue ``count`` jobs with large concurrent ``push_many`` calls (the broker folds them)."""
    if count <= 0:
        return
    starts = range(0, count, PRELOAD_CHUNK)
    # A few chunks at once: enough to fill each commit, never past max_pending_ops.
    for window in range(0, len(starts), PRELOAD_WINDOW):
        chunks = [
            [NewJob(payload, queue=queue) for _ in range(min(PRELOAD_CHUNK, count - start))]
            for start in starts[window : window + PRELOAD_WINDOW]
        ]
        await asyncio.gather(*(client.push_many(chunk) for chunk in chunks))


async def _complete_timed(client: QueueClient, job: Job, latencies_s: list[float]) -> None:
    clock = time.perf_counter
    t0 = clock()
    await client.complete(job)
    latencies_s.append(clock() - t0)


async def _client_loop(
    client: QueueClient, worker: str, tally: Tally, batch: int, payload: bytes, queue: str
) -> None:
    clock = time.perf_counter
    lat = tally.latencies_s
    queues = (queue,)
    new_jobs = [NewJob(payload, queue=queue)] * batch if batch > 1 else []
    while tally.remaining > 0 and clock() < tally.deadline:
        n = min(batch, tally.remaining)
        tally.remaining -= n
        t0 = clock()
        if n == 1:
            await client.push(payload, queue=queue)
        else:
            await client.push_many(new_jobs[:n])
        lat.append(clock() - t0)
        claimed: list[Job] = []
        wait_s = 0.0
        while len(claimed) < n:
            t0 = clock()
            got = await client.claim(worker, queues, max_jobs=n - len(claimed), wait_s=wait_s)
            lat.append(clock() - t0)
            claimed.extend(got)
            wait_s = 0.0 if got else RETRY_CLAIM_WAIT_S
        if n == 1:
            t0 = clock()
            await client.complete(claimed[0])
            lat.append(clock() - t0)
        else:
            await asyncio.gather(*(_complete_timed(client, job, lat) for job in claimed))
        tally.jobs += n


async def run_workload(
    client: QueueClient,
    *,
    clients: int,
    jobs: int,
    batch: int,
    duration_s: float,
    payload: bytes,
    queue: str,
) -> WorkloadFigures:
    """Run the closed loop and return what it did; the clock starts with the clients."""
    start = time.perf_counter()
    tally = Tally(remaining=jobs, deadline=start + duration_s)
    async with asyncio.TaskGroup() as group:
        for i in range(clients):
            group.create_task(
                _client_loop(client, f"bench-{i}", tally, batch, payload, queue),
                name=f"bench-client-{i}",
            )
    elapsed_s = time.perf_counter() - start
    return WorkloadFigures(
        jobs=tally.jobs,
        ops=len(tally.latencies_s),
        elapsed_s=elapsed_s,
        latencies_s=tally.latencies_s,
    )


def percentile_ms(sorted_s: Sequence[float], fraction: float) -> float:
    """The ``fraction`` quantile (nearest rank, rounding down) of sorted seconds, in ms."""
    if not sorted_s:
        return 0.0
    index = min(len(sorted_s) - 1, int(fraction * len(sorted_s)))
    return sorted_s[index] * 1000.0


def result_of(
    figures: WorkloadFigures,
    *,
    commits: int,
    storage: str,
    clients: int,
    remote: bool = False,
    metrics_scrapes: int | None = None,
) -> BenchResult:
    """The report of one run from its figures and the broker's writes during it."""
    latencies = sorted(figures.latencies_s)
    elapsed_s = figures.elapsed_s
    return BenchResult(
        ops_per_s=figures.ops / elapsed_s,
        jobs_per_s=figures.jobs / elapsed_s,
        p50_ms=percentile_ms(latencies, 0.50),
        p99_ms=percentile_ms(latencies, 0.99),
        commits=commits,
        avg_batch=figures.ops / commits if commits else 0.0,
        storage=storage,
        clients=clients,
        jobs=figures.jobs,
        ops=figures.ops,
        elapsed_s=elapsed_s,
        remote=remote,
        metrics_scrapes=metrics_scrapes,
    )
