"""``python -m osqueue.bench``: the benchmark without the CLI (used by ``benchmarks/``)."""

from __future__ import annotations

import argparse
import sys

from osqueue.bench.runner import bench_command


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m osqueue.bench", description=__doc__)
    parser.add_argument("--storage", default="memory://bench", help="storage URL")
    parser.add_argument("--clients", type=int, default=1, help="closed-loop clients")
    parser.add_argument("--jobs", type=int, default=10_000, help="total jobs to run")
    parser.add_argument("--preload", type=int, default=0, help="jobs queued before timing")
    parser.add_argument("--batch", type=int, default=1, help="jobs per push and claim call")
    parser.add_argument("--duration-s", type=float, default=60.0, help="time limit")
    parser.add_argument(
        "--remote", action="store_true", help="broker in a child process, clients over gRPC"
    )
    parser.add_argument(
        "--metrics",
        action="store_true",
        help="the broker serves Prometheus metrics, scraped every second during the run",
    )
    parser.add_argument("--json", action="store_true", help="print one JSON line")
    args = parser.parse_args(argv)
    return bench_command(
        storage=args.storage,
        clients=args.clients,
        jobs=args.jobs,
        preload=args.preload,
        batch=args.batch,
        as_json=args.json,
        duration_s=args.duration_s,
        remote=args.remote,
        metrics=args.metrics,
    )


if __name__ == "__main__":
    sys.exit(main())
