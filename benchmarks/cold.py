"""Cold backlogs: the closed loop's throughput with a backlog of any kind on another queue.

    .venv/bin/python benchmarks/cold.py [--cases empty,delayed:1000000,dead:1000000,...]
        [--runs 3] [--workers 200] [--seconds 20] [--url-template 'file://{dir}']
        [--config '{"head_jobs": 1000}'] [--takeover]

The measurement of issue 25: an embedded broker on ``file://`` in a fresh
directory on tmpfs (``/dev/shm`` when there is one, else the temporary
directory), ``--workers`` closed-loop workers each claiming one job of a queue
of its own, completing it and pushing one to replace it (in the same commit),
again and again for ``--seconds``; a case puts a backlog on ANOTHER queue
first, and its figure is its jobs/s against the ``empty`` run of the same
invocation (``of_empty``).  The cases (``N`` jobs each):

- ``empty``: no backlog.
- ``delayed:N``: N jobs due tomorrow (``push_many`` in batches of 10,000), and
  a probe: 100 jobs due at moments spread over the timed run, on a queue of
  their own, claimed by a waiting worker; ``lateness_ms`` is claim time minus
  due time (p50, p99, max), ``probe_unclaimed`` those never claimed.
- ``dead:N``: N jobs with ``max_attempts=1``, claimed 10,000 at a time and
  failed (dead letters).
- ``waiting:N``: N children, each after one of 10 parents that sit unclaimed in
  a paused queue (so the children wait all run long).
- ``ready:N``: N ready jobs.
- ``ready-push:N``: N ready jobs on the SAME queue the workers use: each worker
  claims the oldest job, completes it and pushes its own (``ready-push:0`` is
  that loop on an empty shared queue).
- ``mixed`` (or ``mixed:N``): N ready + N delayed (with the probe) + N dead on
  three other queues, N = 1,000,000 unless given.

With ``--runs N`` the cases take turns (run 1 of each case, then run 2 of each,
...), each run a fresh process and a fresh queue, and each case's line is its
median run.  A line: ``jobs_per_s``, ``of_empty`` (median over the empty
runs' median; ``of_empty_by_round``: each run over the empty run of its round;
``cpu_of_empty``: the empty runs' CPU time per job over this case's, steadier
on a shared machine),
``p50_ms``/``p99_ms`` (claim + complete, per job), ``cpu_us_per_job``,
``jobs_per_commit`` (the timed run's jobs over its commits: the closed loop's
200 workers run in lock step, a commit of their claims and one of their
completions and pushes, so 100 unless the batches split),
``starved_commits`` (the timed run's commits whose claims stopped at a
segment barrier and waited a commit for a load: 0 when the loads keep ahead),
``setup_s`` (the backlog's setup; then the run waits, 10 s at most, until the
document stops shrinking), ``queue_json_bytes`` (after the setup and at
the end: ``_end``), ``queue_json_max_bytes_setup`` and ``queue_json_max_bytes``
(the largest seen during the setup and during the timed run, by a sampler
reading its size every 50 ms), ``document_bytes`` (what the broker counts
against its cap, after the setup and at the end), ``rss_mib`` (peak) and
``rss_end_mib``, ``spilled`` (ready jobs in segments after the setup), and
``refused``: the error that stopped the setup (a version that keeps the kind
in the document meets its cap: ``QueueFull after 612345``), with no timed run.

``--takeover`` adds a failover after the timed run (as in backlog.py):
``takeover_s`` until a standby serves, ``takeover_claim_s`` until its first
claim returns a job, and ``takeover_cold_reads``: the cold objects (segments,
delayed, dead, waiting, finished) the standby read to take over (before its
first write of the document), which must be 0.  ``--config`` passes
``BrokerConfig`` fields to every run; ``--profile PATH`` writes each case's
timed run, profiled, to ``PATH.<case>`` (``pstats``).

Only public APIs are used, so the same program measures any version
(``PYTHONPATH=/path/to/other/src``) for before/after tables.
"""

from __future__ import annotations

import argparse
import asyncio
import cProfile
import json
import shutil
import sys
import time
from collections.abc import Callable
from typing import Any

from _backlog_common import (
    PAYLOAD,
    child_run,
    document_figures,
    load,
    log,
    median_line,
    percentile_ms,
    queue_json_bytes,
    run_directory,
    sample_size,
    time_takeover,
    worker,
)

KINDS = ("empty", "delayed", "dead", "waiting", "ready", "ready-push", "mixed")
DEFAULT_CASES = (
    "empty,delayed:1000000,dead:1000000,waiting:100000,ready:1000000,ready-push:1000000,mixed"
)
MIXED_DEFAULT = 1_000_000
DAY_S = 24 * 3600.0
PROBES = 100
PARENTS = 10
#: the dead setup gives up after this many empty answers in a row (5 s each)
EMPTY_CLAIMS = 6
#: the queue the ready-push workers share with the backlog
SHARED = "backlog"


def parse_case(case: str) -> tuple[str, int]:
    """``kind:N`` (or ``empty``, ``mixed``) as (kind, N); a clear error otherwise."""
    kind, _, count = case.partition(":")
    if kind not in KINDS:
        raise ValueError(f"case {case!r}: the kind must be one of {', '.join(KINDS)}")
    if kind == "empty":
        if count:
            raise ValueError(f"case {case!r}: empty takes no count")
        return kind, 0
    if not count and kind == "mixed":
        return kind, MIXED_DEFAULT
    try:
        n = int(count.replace("_", ""))
    except ValueError:
        raise ValueError(f"case {case!r}: the count after ':' must be an integer") from None
    if n < 0:
        raise ValueError(f"case {case!r}: the count must not be negative")
    return kind, n


# -- the backlogs -------------------------------------------------------------------------


def _jobs(queue: str, **options: Any) -> Callable[[int], Any]:
    from osqueue import NewJob

    return lambda _i: NewJob(PAYLOAD, queue=queue, **options)


async def _ready(client: Any, n: int, queue: str = "backlog-ready") -> str | None:
    return (await load(client, n, _jobs(queue)))[1]


async def _delayed(client: Any, n: int) -> str | None:
    return (await load(client, n, _jobs("backlog-delayed", delay_s=DAY_S)))[1]


async def _dead(client: Any, n: int) -> str | None:
    """N dead letters: pushed with max_attempts=1, claimed in batches and failed
    (the next batch claimed while the last one's failures commit)."""
    from osqueue import OsqueueError

    queue = "backlog-dead"
    refused = (await load(client, n, _jobs(queue, max_attempts=1)))[1]
    if refused:
        return refused

    def claim() -> asyncio.Future[Any]:
        return asyncio.ensure_future(client.claim("setup", [queue], max_jobs=10_000, wait_s=5.0))

    failed = empty = 0
    try:
        jobs = await claim()
        # An empty answer is not the end: a long poll can outlast its wait while the
        # broker loads the next segment behind a commit held for a dead spill.
        while jobs or (failed < n and empty < EMPTY_CLAIMS):
            empty = 0 if jobs else empty + 1
            following = claim() if failed + len(jobs) < n else None
            await asyncio.gather(*(client.fail(job, error="failed") for job in jobs))
            failed += len(jobs)
            jobs = await following if following else []
    except OsqueueError as exc:
        return f"{type(exc).__name__} after {failed} failed"
    return None if failed >= n else f"only {failed} of {n} claimed"


async def _waiting(client: Any, n: int) -> str | None:
    """N children, each after one of PARENTS parents held unclaimed in a paused queue."""
    from osqueue import NewJob

    await client.set_queue("backlog-parents", paused=True)
    parents = await client.push_many(
        [NewJob(PAYLOAD, queue="backlog-parents") for _ in range(PARENTS)]
    )
    return (
        await load(
            client,
            n,
            lambda i: NewJob(PAYLOAD, queue="backlog-waiting", after=(parents[i % PARENTS],)),
        )
    )[1]


async def _setup(client: Any, kind: str, n: int) -> str | None:
    """Put the case's backlog in place; the error that stopped it, if one did."""
    if kind == "delayed":
        return await _delayed(client, n)
    if kind == "dead":
        return await _dead(client, n)
    if kind == "waiting":
        return await _waiting(client, n)
    if kind == "ready":
        return await _ready(client, n)
    if kind == "ready-push":
        return await _ready(client, n, SHARED)
    if kind == "mixed":
        for step in (_dead, _delayed, _ready):
            refused = await step(client, n)
            if refused:
                return f"{step.__name__.strip('_')}: {refused}"
    return None


async def _settled(client: Any) -> None:
    """Wait (10 s at most) until the document stops shrinking: the broker's spills
    of what the setup pushed have landed, and the timed run starts from the
    steady state."""
    last = (await client.stats()).document_bytes
    for _ in range(50):
        await asyncio.sleep(0.2)
        now = (await client.stats()).document_bytes
        if now >= last:
            return
        last = now


# -- the probe of jobs falling due --------------------------------------------------------


async def _push_probes(client: Any, seconds: float) -> None:
    """PROBES jobs due at moments spread over the timed run (the delay in the payload)."""
    from osqueue import NewJob

    span = max(seconds - 2.0, 0.1)
    delays = [1.0 + span * i / PROBES for i in range(PROBES)]
    await client.push_many([NewJob(repr(d).encode(), queue="probe", delay_s=d) for d in delays])


async def _probe_worker(client: Any, deadline: float, lateness: list[float]) -> None:
    """Claim the probe jobs as they fall due; lateness = claim time - due time."""
    while time.perf_counter() < deadline and len(lateness) < PROBES:
        jobs = await client.claim("probe", ["probe"], max_jobs=100, wait_s=0.5)
        now = time.time()
        for job in jobs:
            lateness.append(now - (job.created_at + float(job.payload)))
        await asyncio.gather(*(client.complete(job) for job in jobs))


def _lateness(lateness: list[float]) -> dict[str, Any]:
    lateness.sort()
    return {
        "lateness_ms": {
            "p50": percentile_ms(lateness, 0.50),
            "p99": percentile_ms(lateness, 0.99),
            "max": percentile_ms(lateness, 1.0),
        },
        "probe_unclaimed": PROBES - len(lateness),
    }


# -- one run ------------------------------------------------------------------------------


async def one_case(
    url: str, directory: str, case: str, args: argparse.Namespace, settings: dict[str, Any]
) -> dict[str, Any]:
    import osqueue

    kind, n = parse_case(case)
    workers: int = args.workers
    config = osqueue.BrokerConfig(**settings) if settings else None
    setup_sizes: list[int] = []
    sampler = asyncio.ensure_future(sample_size(directory, setup_sizes))
    broker = osqueue.Broker(url, config)
    await broker.start()
    client = broker.client()
    started = time.perf_counter()
    refused = await _setup(client, kind, n)
    setup_s = time.perf_counter() - started
    await _settled(client)
    queues = [SHARED if kind == "ready-push" else f"w{i}" for i in range(workers)]
    # one job per worker on its queue: the depth each keeps
    await load(client, workers, lambda i: osqueue.NewJob(PAYLOAD, queue=queues[i]))
    probing = kind in ("delayed", "mixed") and not refused
    if probing:
        await _push_probes(client, args.seconds)
    sampler.cancel()
    loaded_json = queue_json_bytes(directory)
    stats = await client.stats()
    run_sizes: list[int] = []
    sampler = asyncio.ensure_future(sample_size(directory, run_sizes))
    lat: list[float] = []
    lateness: list[float] = []
    deadline = time.perf_counter() + args.seconds
    start = time.perf_counter()
    cpu_start = time.process_time()
    commits_start = getattr(broker, "commits", 0)  # (a version without it: 0)
    starved_start = _starved(broker)
    # A setup that was refused leaves no room for the workers' pushes either: no timed run.
    loops = [worker(client, f"w{i}", deadline, lat, queues[i]) for i in range(workers)]
    if probing:
        loops.append(_probe_worker(client, deadline + 1.0, lateness))
    profile = cProfile.Profile() if args.profile else None
    if profile is not None:
        profile.enable()
    counts = [0] if refused else await asyncio.gather(*loops)
    if profile is not None:
        profile.disable()
        profile.dump_stats(args.profile)
    elapsed = time.perf_counter() - start
    cpu_s = time.process_time() - cpu_start
    commits = getattr(broker, "commits", 0) - commits_start
    starved = _starved(broker)
    sampler.cancel()
    end_stats = await client.stats()
    figures = document_figures(directory, loaded_json, stats, end_stats)  # (before a takeover)
    failover = await time_takeover(broker, url, config, queues[0]) if args.takeover else {}
    await broker.stop()
    lat.sort()
    jobs = sum(c for c in counts if c)
    return {
        "case": case,
        "workers": workers,
        "jobs_per_s": round(jobs / elapsed, 1),
        "cpu_us_per_job": round(cpu_s / jobs * 1e6, 1) if jobs else None,
        "jobs_per_commit": round(jobs / commits, 1) if commits else None,
        "starved_commits": None if starved is None else starved - (starved_start or 0),
        "p50_ms": percentile_ms(lat, 0.50),
        "p99_ms": percentile_ms(lat, 0.99),
        "setup_s": round(setup_s, 2),
        "refused": refused,
        "queue_json_max_bytes_setup": max(setup_sizes, default=0),
        "queue_json_max_bytes": max(run_sizes, default=0),
        **figures,
        **(_lateness(lateness) if probing else {}),
        **failover,
        **({"config": settings} if settings else {}),
    }


def _starved(broker: Any) -> int | None:
    """The broker's commits whose claims stopped at a segment barrier so far (None: a
    version that does not count them)."""
    counters = getattr(getattr(broker, "segments", None), "counters", None)
    return getattr(counters, "starved", None)


def child(args: argparse.Namespace) -> None:
    directory = run_directory("osqueue-cold-")
    try:
        url = args.url_template.replace("{dir}", directory)
        from osqueue import runtime

        runtime.tune_gc()
        settings = json.loads(args.config) if args.config else {}
        result = runtime.run(one_case(url, directory, args.case, args, settings))
        print(json.dumps(result), flush=True)
    finally:
        shutil.rmtree(directory, ignore_errors=True)


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__.split("\n\n")[0], formatter_class=argparse.RawTextHelpFormatter
    )
    parser.add_argument("--cases", default=DEFAULT_CASES, help="comma-separated: kind[:N]")
    parser.add_argument("--workers", type=int, default=200)
    parser.add_argument("--seconds", type=float, default=20.0)
    parser.add_argument("--runs", type=int, default=3, help="runs per case; the median is shown")
    parser.add_argument("--url-template", default="file://{dir}")
    parser.add_argument("--config", default="", help="BrokerConfig fields as a JSON object")
    parser.add_argument("--takeover", action="store_true", help="time a standby's takeover")
    parser.add_argument("--profile", help="cProfile the timed run of each case into this file")
    parser.add_argument("--case", help=argparse.SUPPRESS)  # child process
    args = parser.parse_args()
    if args.case is not None:
        child(args)
        return
    cases = [c.strip() for c in args.cases.split(",") if c.strip()]
    try:
        for case in cases:
            parse_case(case)
    except ValueError as exc:
        parser.error(f"--cases: {exc}")
    if args.runs < 1:
        parser.error("--runs must be at least 1")
    # Round-robin: run k of every case, then run k + 1, so a machine that drifts over
    # the minutes a deep setup takes shifts every case alike.
    runs: dict[str, list[dict[str, Any]]] = {case: [] for case in cases}
    for run in range(args.runs):
        for case in cases:
            log(f"{case}: run {run + 1}/{args.runs}")
            runs[case].append(_child_run(args, case))
    for case in cases:
        print(json.dumps(median_line(runs[case], runs.get("empty"))), flush=True)


def _child_run(args: argparse.Namespace, case: str) -> dict[str, Any]:
    """One run of ``case`` in a fresh process: its JSON line."""
    cmd = [
        sys.executable,
        __file__,
        "--case",
        case,
        "--workers",
        str(args.workers),
        "--seconds",
        str(args.seconds),
        "--url-template",
        args.url_template,
        "--config",
        args.config,
        *(["--takeover"] if args.takeover else []),
        *(["--profile", f"{args.profile}.{case.replace(':', '-')}"] if args.profile else []),
    ]
    return child_run(cmd, case)


if __name__ == "__main__":
    main()
