"""What many schedules cost an idle broker: CPU with N schedules against none.

    .venv/bin/python benchmarks/schedules.py [--schedules 10000] [--every-s 60]
        [--seconds 180] [--url-template 'file://{dir}']

Two fresh processes, one after the other: each runs an embedded broker on a
fresh queue (``file://`` in a temporary folder by default), adds
``--schedules`` schedules (``every_s=--every-s``; none in the baseline), then,
with no client traffic at all, measures the process's CPU time (user + system)
over ``--seconds`` of wall time.  Every tick pushes its job (nobody claims
them, so they pile up: the cost of the ticks themselves is counted).  Prints
one JSON line: the CPU seconds and the share of one core of each run, the
difference in points of a core, the ratio, and the document's size at the
end.  The issue's target: 10,000 schedules with ``every_s=60`` cost the idle
broker at most 5% more CPU than none.

Only public APIs are used.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any


async def _one(url: str, schedules: int, every_s: float, seconds: float) -> dict[str, Any]:
    import osqueue

    async with osqueue.Broker(url, osqueue.BrokerConfig()) as broker:
        client = broker.client()
        for start in range(0, schedules, 1000):
            await asyncio.gather(
                *(
                    client.schedule(f"s{i}", queue="ticks", every_s=every_s)
                    for i in range(start, min(schedules, start + 1000))
                )
            )
        cpu0, wall0 = time.process_time(), time.monotonic()
        await asyncio.sleep(seconds)
        cpu, wall = time.process_time() - cpu0, time.monotonic() - wall0
        stats = await client.stats()
    return {
        "schedules": schedules,
        "cpu_s": round(cpu, 3),
        "core_pct": round(100 * cpu / wall, 3),
        "jobs": stats.depth,
        "document_bytes": stats.document_bytes,
    }


def _child(args: argparse.Namespace, schedules: int) -> dict[str, Any]:
    with tempfile.TemporaryDirectory(prefix="osqueue-bench-sched-") as directory:
        url = args.url_template.format(dir=Path(directory).as_posix())
        proc = subprocess.run(
            [
                sys.executable,
                __file__,
                "--child",
                str(schedules),
                "--every-s",
                str(args.every_s),
                "--seconds",
                str(args.seconds),
                "--url",
                url,
            ],
            capture_output=True,
            text=True,
            check=True,
            env=dict(os.environ),
        )
    result: dict[str, Any] = json.loads(proc.stdout.strip().splitlines()[-1])
    return result


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--schedules", type=int, default=10_000)
    parser.add_argument("--every-s", type=float, default=60.0)
    parser.add_argument("--seconds", type=float, default=180.0)
    parser.add_argument("--url-template", default="file://{dir}")
    parser.add_argument("--child", type=int, default=None, help=argparse.SUPPRESS)
    parser.add_argument("--url", default=None, help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.child is not None:
        result = asyncio.run(_one(args.url, args.child, args.every_s, args.seconds))
        print(json.dumps(result), flush=True)
        return
    none = _child(args, 0)
    many = _child(args, args.schedules)
    print(
        json.dumps(
            {
                "benchmark": "schedules",
                "every_s": args.every_s,
                "seconds": args.seconds,
                "none": none,
                "with_schedules": many,
                "extra_core_pct_points": round(many["core_pct"] - none["core_pct"], 3),
                "cpu_ratio": round(many["cpu_s"] / none["cpu_s"], 3) if none["cpu_s"] else None,
            }
        ),
        flush=True,
    )


if __name__ == "__main__":
    main()
