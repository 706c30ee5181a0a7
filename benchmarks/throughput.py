"""The broker under injected write latency: the issue's closed-loop throughput figures.

    .venv/bin/python benchmarks/throughput.py [--cases w200-c1000,...] [--runs 3] [--quick]
        [--backend memory|file]

Prints one JSON line per case on stdout: the ``osqueue bench`` fields
(``ops_per_s``, ``jobs_per_s``, ``p50_ms``, ``p99_ms``, ``commits``,
``avg_batch``, ``storage``, ``clients``) of the median run (by ops/s), plus
``case``, ``ideal_ops_per_s`` (clients / write latency: every closed-loop op
needs one write) and ``of_ideal``; the preloaded case also carries
``of_empty``, its ops/s over the empty-queue case's (when both ran).  The
``-metrics`` case runs its baseline with the broker serving Prometheus metrics,
scraped every second (``python -m osqueue.bench --metrics``), and carries
``of_no_metrics``, its ops/s over the baseline's: the cost of metrics on the hot
path (the figure to meet: at least 0.97).  Each run is a fresh process
(``python -m osqueue.bench``); every run's figures go to stderr.
"""

from __future__ import annotations

import json
import os
import statistics
import subprocess
import sys
import tempfile
import uuid
from dataclasses import dataclass

from _cases import parse_cases

WRITE_MS = 200.0


@dataclass(frozen=True, slots=True)
class Case:
    name: str
    clients: int
    jobs: int
    quick_jobs: int
    preload: int = 0
    duration_s: float = 40.0
    #: The case whose ops/s this one is compared with, and the key of the ratio.
    baseline: str | None = None
    ratio_key: str = "of_empty"
    #: The broker serves metrics, scraped every second.
    metrics: bool = False


CASES = {
    case.name: case
    for case in (
        Case("w200-c1000", clients=1_000, jobs=30_000, quick_jobs=3_000),
        Case("w200-c5000", clients=5_000, jobs=120_000, quick_jobs=15_000),
        Case(
            "w200-c1000-p100k",
            clients=1_000,
            jobs=30_000,
            quick_jobs=3_000,
            preload=100_000,
            baseline="w200-c1000",
        ),
        Case(
            "w200-c5000-metrics",
            clients=5_000,
            jobs=120_000,
            quick_jobs=15_000,
            baseline="w200-c5000",
            ratio_key="of_no_metrics",
            metrics=True,
        ),
        Case(
            "w200-c1000-p1m",
            clients=1_000,
            jobs=30_000,
            quick_jobs=3_000,
            preload=1_000_000,
            baseline="w200-c1000",
        ),
    )
}


def log(message: str) -> None:
    print(message, file=sys.stderr, flush=True)


def run_once(case: Case, jobs: int, backend: str = "memory") -> dict[str, object]:
    if backend == "file":
        with tempfile.TemporaryDirectory(prefix="osqueue-throughput-") as directory:
            return _run_url(case, jobs, f"latency+file://{directory}?write_ms={WRITE_MS:g}")
    return _run_url(
        case, jobs, f"latency+memory://throughput-{uuid.uuid4().hex[:8]}?write_ms={WRITE_MS:g}"
    )


def _run_url(case: Case, jobs: int, url: str) -> dict[str, object]:
    cmd = [
        sys.executable,
        "-m",
        "osqueue.bench",
        "--json",
        f"--storage={url}",
        f"--clients={case.clients}",
        f"--jobs={jobs}",
        f"--preload={case.preload}",
        f"--duration-s={case.duration_s}",
        *(["--metrics"] if case.metrics else []),
    ]
    proc = subprocess.run(cmd, capture_output=True, text=True, env=dict(os.environ), check=False)
    if proc.returncode != 0:
        raise SystemExit(f"{case.name}: osqueue.bench failed ({proc.returncode}):\n{proc.stderr}")
    result: dict[str, object] = json.loads(proc.stdout.strip().splitlines()[-1])
    log(f"  {json.dumps(result)}")
    return result


def ops(result: dict[str, object]) -> float:
    return float(str(result["ops_per_s"]))


def run_case(case: Case, runs: int, quick: bool, backend: str = "memory") -> dict[str, object]:
    jobs = case.quick_jobs if quick else case.jobs
    results = []
    for i in range(runs):
        log(f"{case.name}: run {i + 1}/{runs}")
        results.append(run_once(case, jobs, backend))
    median_ops = statistics.median_low(ops(r) for r in results)
    chosen = next(r for r in results if ops(r) == median_ops)
    ideal = case.clients / (WRITE_MS / 1000.0)
    return {
        "case": case.name,
        **chosen,
        "preload": case.preload,
        "ideal_ops_per_s": ideal,
        "of_ideal": round(median_ops / ideal, 3),
    }


def main(argv: list[str]) -> int:
    args = parse_cases(__doc__, CASES, argv, backend=True)
    names = args.names
    done: dict[str, dict[str, object]] = {}
    for name in names:
        case = CASES[name]
        line = run_case(case, args.runs, args.quick, args.backend)
        if case.baseline in done:
            line[case.ratio_key] = round(ops(line) / ops(done[case.baseline]), 3)
        done[name] = line
        print(json.dumps(line), flush=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
