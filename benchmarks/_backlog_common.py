"""The pieces the backlog benchmarks share (benchmarks/backlog.py, benchmarks/cold.py).

Each run is a fresh process with a fresh queue on an embedded broker; these
are its tools: the load in batches of ``push_many``, the closed-loop worker,
the samplers (queue.json's size, resident memory), the failover timed by a
standby, and the parent's side (one run per child process, the median line).
Only public APIs of osqueue are used (and the storage port, to watch what a
standby reads), so the same programs measure any version of it.
"""

from __future__ import annotations

import asyncio
import json
import os
import resource
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

LOAD_BATCH = 10_000
PAYLOAD = b"x" * 32
#: the key prefixes of cold objects (jobs out of the document): a takeover reads none
COLD_PREFIXES = ("segments/", "delayed/", "dead/", "waiting/", "finished/")


def log(message: str) -> None:
    print(message, file=sys.stderr, flush=True)


def run_directory(prefix: str) -> str:
    """A fresh directory for one run's queue: on tmpfs (/dev/shm) when there is one."""
    shm = Path("/dev/shm")
    base = str(shm) if shm.is_dir() and os.access(shm, os.W_OK) else None
    return tempfile.mkdtemp(prefix=prefix, dir=base)


def queue_json_bytes(directory: str) -> int:
    path = Path(directory) / "queue.json"
    try:
        return path.stat().st_size
    except OSError:  # absent, or replaced between the check and the stat
        return 0


async def load(
    client: Any, count: int, make: Callable[[int], Any] | None = None
) -> tuple[float, str | None]:
    """Push ``count`` jobs (``make(i)`` gives the i-th ``NewJob``; by default a
    32-byte payload on the default queue) in batches of LOAD_BATCH, two batches
    in flight.  Returns jobs/s and the error that stopped the load, if one did."""
    from osqueue import NewJob, OsqueueError

    build = make or (lambda _i: NewJob(PAYLOAD))
    start = time.perf_counter()
    pushed = 0
    try:
        while pushed < count:
            firsts = [pushed + i * LOAD_BATCH for i in range(2) if pushed + i * LOAD_BATCH < count]
            batches = [
                [build(j) for j in range(first, min(first + LOAD_BATCH, count))] for first in firsts
            ]
            await asyncio.gather(*(client.push_many(batch) for batch in batches))
            pushed += sum(len(batch) for batch in batches)
    except OsqueueError as exc:
        return pushed / (time.perf_counter() - start), f"{type(exc).__name__} after {pushed}"
    elapsed = time.perf_counter() - start
    return (count / elapsed if elapsed > 0 else 0.0), None


async def worker(
    client: Any, name: str, deadline: float, lat: list[float], queue: str = "default"
) -> int:
    """Claim one job of ``queue``, complete it and push one to replace it (in the
    same commit), again and again until ``deadline``; ``lat`` gets each job's time."""
    done = 0
    clock = time.perf_counter
    queues = (queue,)
    while clock() < deadline:
        t0 = clock()
        jobs = await client.claim(name, queues, max_jobs=1, wait_s=0.5)
        if not jobs:
            continue
        await asyncio.gather(client.complete(jobs[0]), client.push(PAYLOAD, queue=queue))
        lat.append(clock() - t0)
        done += 1
    return done


def percentile_ms(sorted_s: Sequence[float], q: float) -> float:
    """The ``q`` quantile of sorted seconds, in milliseconds (0 for none)."""
    if not sorted_s:
        return 0.0
    return round(sorted_s[min(len(sorted_s) - 1, int(q * len(sorted_s)))] * 1000, 2)


def rss_mib() -> float:
    """The process's resident memory now (Linux; 0 elsewhere)."""
    try:
        with open("/proc/self/statm") as f:
            pages = int(f.read().split()[1])
    except OSError:
        return 0.0
    return round(pages * os.sysconf("SC_PAGE_SIZE") / 2**20, 1)


def peak_rss_mib() -> float:
    """The process's peak resident memory."""
    return round(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024, 1)


def document_figures(
    directory: str, loaded_json: int, stats: Any, end_stats: Any
) -> dict[str, Any]:
    """The figures of the document and the process every run reports: queue.json's
    size after the setup and at the end, what the broker counts against its cap
    then (``stats``, ``end_stats``: ``client.stats()``), the jobs in segments
    after the setup (0 for a version without them), and the resident memory."""
    return {
        "queue_json_bytes": loaded_json,
        "queue_json_bytes_end": queue_json_bytes(directory),
        "document_bytes": stats.document_bytes,
        "document_bytes_end": end_stats.document_bytes,
        "spilled": sum(getattr(q, "spilled", 0) for q in stats.queues.values()),
        "rss_mib": peak_rss_mib(),
        "rss_end_mib": rss_mib(),
    }


async def sample_size(directory: str, sizes: list[int]) -> None:
    """Record queue.json's size every 50 ms (the largest goes in the report)."""
    while True:
        sizes.append(queue_json_bytes(directory))
        await asyncio.sleep(0.05)


class ReadRecorder:
    """A storage that records the keys read through it until its first write of the
    document (to show what a standby reads to take over: what it reads once it
    serves, such as the first load it plans, is its ordinary work)."""

    def __init__(self, inner: Any) -> None:
        self._inner = inner
        self.keys: list[str] = []
        self.recording = True

    def __getattr__(self, name: str) -> Any:
        return getattr(self._inner, name)

    async def read(self, key: str) -> Any:
        if self.recording:
            self.keys.append(key)
        return await self._inner.read(key)

    async def get(self, key: str) -> bytes:
        if self.recording:
            self.keys.append(key)
        data: bytes = await self._inner.get(key)
        return data

    async def write(self, key: str, data: bytes, *, if_match: str | None) -> str:
        etag: str = await self._inner.write(key, data, if_match=if_match)
        if key == "queue.json":
            self.recording = False  # taken over: the takeover's reads are recorded
        return etag


async def time_takeover(
    broker: Any, url: str, config: Any, queue: str = "default"
) -> dict[str, Any]:
    """Kill ``broker`` where it stands; time a standby's takeover and first claim
    (of ``queue``), and count the cold objects the standby read to take over
    (before its first write of the document)."""
    import osqueue
    from osqueue.storage import from_url

    storage = ReadRecorder(from_url(url))
    standby = osqueue.Broker(storage, config, standby=True)  # type: ignore[arg-type]
    starting = asyncio.ensure_future(standby.start())
    await asyncio.sleep(0.5)  # the standby has read the document once
    for task in broker.tasks():  # a crash: no last write, the lease runs out
        task.cancel()
    killed = time.perf_counter()
    await starting
    serving = time.perf_counter() - killed
    storage.recording = False
    jobs = await standby.client().claim("after-takeover", [queue], wait_s=30.0)
    claimed = time.perf_counter() - killed
    await standby.stop()
    cold = [key for key in storage.keys if key.startswith(COLD_PREFIXES)]
    return {
        "takeover_s": round(serving, 3),
        "takeover_claim_s": round(claimed, 3) if jobs else None,
        "takeover_cold_reads": len(cold),
        **({"takeover_cold_read_keys": cold[:3]} if cold else {}),
        "lease_s": standby.config.lease_s,
    }


def child_run(cmd: list[str], label: str) -> dict[str, Any]:
    """Run ``cmd`` (this program as a child: one run) and return its JSON line."""
    out = subprocess.run(cmd, capture_output=True, text=True, env=os.environ, check=False)
    lines = [line for line in out.stdout.splitlines() if line.startswith("{")]
    if out.returncode != 0 or not lines:
        log(out.stderr[-3000:])
        raise SystemExit(f"{label}: the run failed")
    log("  " + lines[-1])
    result: dict[str, Any] = json.loads(lines[-1])
    return result


def median_line(
    done: list[dict[str, Any]], empty_runs: list[dict[str, Any]] | None
) -> dict[str, Any]:
    """The median run of ``done`` (by jobs/s), with every run's jobs/s, and against
    the empty runs (``empty_runs``; None when they did not run, or when ``done``
    are they): ``of_empty`` (median over median), ``of_empty_by_round`` (each
    run over the empty run of its own round) and ``cpu_of_empty`` (the empty
    runs' median CPU time per job over this one's)."""
    best = dict(sorted(done, key=lambda r: r["jobs_per_s"])[len(done) // 2])
    best["runs_jobs_per_s"] = [r["jobs_per_s"] for r in done]
    best["median_of"] = len(done)
    if empty_runs:
        empty = sorted(r["jobs_per_s"] for r in empty_runs)[len(empty_runs) // 2]
        if empty:
            best["of_empty"] = round(best["jobs_per_s"] / empty, 3)
        cpus = sorted(r["cpu_us_per_job"] or 0.0 for r in empty_runs)
        if cpus[len(cpus) // 2] and best["cpu_us_per_job"]:
            # a loop held up by its CPU runs at the inverse ratio, whatever else
            # the shared machine does: the steadier figure
            best["cpu_of_empty"] = round(cpus[len(cpus) // 2] / best["cpu_us_per_job"], 3)
        pairs = zip(done, empty_runs, strict=True)
        best["of_empty_by_round"] = [
            round(r["jobs_per_s"] / e["jobs_per_s"], 3) if e["jobs_per_s"] else None
            for r, e in pairs
        ]
    return best
