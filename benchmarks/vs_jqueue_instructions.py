"""osqueue against jqueue counted in instructions a job (callgrind), not in seconds.

    .venv/bin/python benchmarks/vs_jqueue_instructions.py [--cases seq-0ms,c50-0ms]

The same closed loops as ``benchmarks/vs_jqueue.py``'s zero-latency cases (N
clients, push -> claim -> complete, one job at a time, ``memory://`` on our
side and jqueue's ``InMemoryStorage`` on its), each run under valgrind's
callgrind, which counts the instructions a process executes whatever else the
machine is doing.  A side's figure is the difference of two runs, one of the
case's jobs and one of a quarter of them, over the jobs between: start-up,
imports and the loop's first commits cancel out.  Prints one JSON line per
case: ``osqueue_instructions_per_job``, ``jqueue_instructions_per_job`` and
``ratio`` (jqueue's over ours: read it as the jobs/s ratio a machine that
runs both sides' instructions at one rate would give).

Why: on a shared two-core guest the timed ratio of one invocation moves by a
third from one minute to the next, where these counts move by a percent or
two (one client's loop follows timers and the archive writer's interleaving,
so its count has that spread; fifty clients move less).  They leave out what
instructions do not show (a cache miss, a thread's wait, Rust's higher rate
per instruction in jqueue's pydantic-core), so the timed figure stays the
one to reach; this one says whether a change moved it.  Each run takes
minutes under valgrind (about 50 times slower than native).
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from vs_jqueue import CASES, JQUEUE_PYTHON, JQUEUE_RUNNER, ensure_jqueue_venv, log

#: the cases this program counts (no latency, no S3: nothing but the loop's own work)
COUNTED = ("seq-0ms", "c50-0ms")


def instructions(cmd: list[str]) -> int:
    """The instructions ``cmd`` executed, all its threads (callgrind's total)."""
    with tempfile.TemporaryDirectory(prefix="osqueue-callgrind-") as tmp:
        out = Path(tmp) / "callgrind.out"
        proc = subprocess.run(
            ["valgrind", "--tool=callgrind", f"--callgrind-out-file={out}", *cmd],
            capture_output=True,
            text=True,
            check=False,
        )
        if proc.returncode != 0:
            raise SystemExit(f"valgrind {' '.join(cmd)} failed ({proc.returncode}):\n{proc.stderr}")
        for line in out.read_text().splitlines():
            if line.startswith(("summary:", "totals:")):
                return int(line.split()[1])
    raise SystemExit(f"callgrind wrote no total for {' '.join(cmd)}")


def per_job(side: str, clients: int, jobs: int) -> float:
    small = max(1, jobs // 4)
    counts = []
    for n in (small, jobs):
        if side == "osqueue":
            cmd = [
                sys.executable,
                "-m",
                "osqueue.bench",
                "--json",
                f"--storage=memory://count-{n}",
                f"--clients={clients}",
                f"--jobs={n}",
                "--duration-s=3600",
            ]
        else:
            cmd = [
                str(JQUEUE_PYTHON),
                str(JQUEUE_RUNNER),
                f"--clients={clients}",
                f"--jobs={n}",
                "--duration-s=3600",
            ]
        started = time.perf_counter()
        counts.append(instructions(cmd))
        took = time.perf_counter() - started
        log(f"  {side} {n} jobs: {counts[-1]:,} instructions ({took:.0f} s)")
    return (counts[1] - counts[0]) / (jobs - small)


def main(argv: list[str]) -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    p.add_argument("--cases", default=",".join(COUNTED), help="comma-separated: seq-0ms, c50-0ms")
    p.add_argument("--jobs", type=int, default=0, help="jobs of the larger run (0: the case's)")
    args = p.parse_args(argv)
    names = [n.strip() for n in args.cases.split(",") if n.strip()]
    unknown = [n for n in names if n not in COUNTED]
    if unknown or not names:
        p.error(f"--cases: unknown case(s) {unknown}; choose from {', '.join(COUNTED)}")
    if args.jobs < 0 or 0 < args.jobs < 8:
        p.error("--jobs must be 0 (the case's) or at least 8")
    if subprocess.run(["valgrind", "--version"], capture_output=True, check=False).returncode:
        p.error("valgrind is not installed (Debian: apt-get install valgrind)")
    ensure_jqueue_venv()
    os.environ.setdefault("PYTHONHASHSEED", "0")  # (both sides: the same hashing each run)
    for name in names:
        case = CASES[name]
        jobs = args.jobs or case.jobs
        log(f"{name}: {case.clients} client(s), {jobs // 4} and {jobs} jobs a side")
        ours = per_job("osqueue", case.clients, jobs)
        theirs = per_job("jqueue", case.clients, jobs)
        line = {
            "case": name,
            "osqueue_instructions_per_job": round(ours),
            "jqueue_instructions_per_job": round(theirs),
            "ratio": round(theirs / ours, 2) if ours > 0 else None,
        }
        print(json.dumps(line), flush=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
