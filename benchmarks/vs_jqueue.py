"""osqueue's broker against jqueue 1.0.0's BrokerQueue, same workload, same storage, one run.

    .venv/bin/python benchmarks/vs_jqueue.py [--cases seq-0ms,c50-0ms] [--runs 3] [--quick]

Prints one JSON line per case on stdout:
``{"case", "osqueue_jobs_per_s", "jqueue_jobs_per_s", "ratio"}`` (medians of
``--runs`` runs; ratio = osqueue / jqueue).  Each run's full figures go to stderr.

Both sides run the same closed loop (N clients, each push -> claim -> complete,
one job at a time, a 32-byte payload), the same preload, the same stop rule
(a total job count or a time limit, whichever comes first), each in a fresh
process: osqueue through ``python -m osqueue.bench``, jqueue through
``benchmarks/_jqueue_runner.py`` under its own Python 3.12 venv (jqueue needs
3.12), which this script creates on first use in ``.venv/jqueue-py312``.
Injected latency is paid before every read and every write on both sides
(osqueue: the ``latency+`` storage wrapper; jqueue: an equivalent wrapper
around its storage port).  The S3 case runs both queues on one moto S3 server
on loopback, each under its own key prefix.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import time
import uuid
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

from _cases import parse_cases

ROOT = Path(__file__).resolve().parent.parent
JQUEUE_VENV = ROOT / ".venv" / "jqueue-py312"
JQUEUE_PYTHON = JQUEUE_VENV / "bin" / "python"
JQUEUE_RUNNER = Path(__file__).resolve().parent / "_jqueue_runner.py"
JQUEUE_REQUIREMENT = "jqueue[s3]==1.0.0"
#: Both sides run on the same event loop and GC settings (osqueue.runtime's).
JQUEUE_EXTRAS = ("uvloop>=0.19",)
PYENV_VERSION = "3.12.1"
S3_BUCKET = "osqueue-bench"


@dataclass(frozen=True, slots=True)
class Case:
    name: str
    clients: int
    jobs: int
    quick_jobs: int
    preload: int = 0
    latency_ms: float = 0.0
    s3: bool = False
    duration_s: float = 30.0
    quick_duration_s: float = 8.0


CASES = {
    case.name: case
    for case in (
        Case("seq-0ms", clients=1, jobs=5_000, quick_jobs=500),
        Case("c50-0ms", clients=50, jobs=20_000, quick_jobs=2_000),
        Case(
            "c100-50ms-10k", clients=100, jobs=5_000, quick_jobs=500, preload=10_000, latency_ms=50
        ),
        Case("c1000-200ms", clients=1_000, jobs=20_000, quick_jobs=3_000, latency_ms=200),
        Case("s3-c100", clients=100, jobs=3_000, quick_jobs=300, s3=True),
    )
}


def log(message: str) -> None:
    print(message, file=sys.stderr, flush=True)


def ensure_jqueue_venv() -> None:
    """Create the 3.12 venv with jqueue 1.0.0 (and aioboto3 for S3) unless it is there."""
    probe = (
        "import jqueue, aioboto3, uvloop; assert jqueue.__version__ == '1.0.0', jqueue.__version__"
    )
    if JQUEUE_PYTHON.exists():
        ok = subprocess.run([str(JQUEUE_PYTHON), "-c", probe], capture_output=True, check=False)
        if ok.returncode == 0:
            return
    log(f"creating {JQUEUE_VENV} with Python {PYENV_VERSION} and {JQUEUE_REQUIREMENT}")
    env = {**os.environ, "PYENV_VERSION": PYENV_VERSION}
    subprocess.run(["python3.12", "-m", "venv", str(JQUEUE_VENV)], env=env, check=True)
    subprocess.run(
        [str(JQUEUE_PYTHON), "-m", "pip", "install", "-q", JQUEUE_REQUIREMENT, *JQUEUE_EXTRAS],
        env=env,
        check=True,
    )
    subprocess.run([str(JQUEUE_PYTHON), "-c", probe], check=True)


@dataclass(frozen=True, slots=True)
class S3Target:
    """One moto S3 server on loopback (one bucket) that both queues use."""

    endpoint: str
    bucket: str
    env: dict[str, str]
    osqueue_url: Callable[[str], str]


@contextmanager
def s3_server() -> Iterator[S3Target]:
    sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tests"))
    from servers import MotoS3Server

    with MotoS3Server(bucket=S3_BUCKET) as server:
        yield S3Target(
            endpoint=server.endpoint, bucket=server.bucket, env=server.env, osqueue_url=server.url
        )


def osqueue_storage_url(case: Case, s3: S3Target | None, run_id: str) -> str:
    if case.s3:
        assert s3 is not None
        return s3.osqueue_url(f"osqueue-{run_id}")
    base = f"memory://bench-{run_id}"
    if case.latency_ms > 0:
        ms = f"{case.latency_ms:g}"
        return f"latency+{base}?write_ms={ms}&read_ms={ms}"
    return base


def side_env(s3: S3Target | None) -> dict[str, str]:
    return {**os.environ, **(s3.env if s3 is not None else {})}


def run_json(cmd: list[str], env: dict[str, str]) -> dict[str, object]:
    proc = subprocess.run(cmd, capture_output=True, text=True, env=env, check=False)
    if proc.returncode != 0:
        raise SystemExit(f"{cmd[0]} failed ({proc.returncode}):\n{proc.stderr}")
    lines = [line for line in proc.stdout.splitlines() if line.startswith("{")]
    if not lines:
        raise SystemExit(f"{' '.join(cmd)} printed no JSON line:\n{proc.stdout}\n{proc.stderr}")
    result: dict[str, object] = json.loads(lines[-1])
    return result


def run_osqueue(case: Case, jobs: int, duration_s: float, s3: S3Target | None) -> float:
    run_id = uuid.uuid4().hex[:8]
    cmd = [
        sys.executable,
        "-m",
        "osqueue.bench",
        "--json",
        f"--storage={osqueue_storage_url(case, s3, run_id)}",
        f"--clients={case.clients}",
        f"--jobs={jobs}",
        f"--preload={case.preload}",
        f"--duration-s={duration_s}",
    ]
    result = run_json(cmd, side_env(s3))
    log(f"  osqueue {json.dumps(result)}")
    return float(str(result["jobs_per_s"]))


def run_jqueue(case: Case, jobs: int, duration_s: float, s3: S3Target | None) -> float:
    run_id = uuid.uuid4().hex[:8]
    cmd = [
        str(JQUEUE_PYTHON),
        str(JQUEUE_RUNNER),
        f"--clients={case.clients}",
        f"--jobs={jobs}",
        f"--preload={case.preload}",
        f"--latency-ms={case.latency_ms}",
        f"--duration-s={duration_s}",
    ]
    if case.s3:
        assert s3 is not None
        cmd += [
            "--storage=s3",
            f"--s3-endpoint={s3.endpoint}",
            f"--s3-bucket={s3.bucket}",
            f"--s3-key=jqueue-{run_id}/state.json",
        ]
    result = run_json(cmd, side_env(s3))
    log(f"  jqueue  {json.dumps(result)}")
    return float(str(result["jobs_per_s"]))


def run_case(case: Case, runs: int, quick: bool, s3: S3Target | None) -> dict[str, object]:
    jobs = case.quick_jobs if quick else case.jobs
    duration_s = case.quick_duration_s if quick else case.duration_s
    ours: list[float] = []
    theirs: list[float] = []
    for i in range(runs):
        log(f"{case.name}: run {i + 1}/{runs}")
        # Alternate who goes first so drift in the machine's load hits both sides.
        if i % 2 == 0:
            ours.append(run_osqueue(case, jobs, duration_s, s3))
            theirs.append(run_jqueue(case, jobs, duration_s, s3))
        else:
            theirs.append(run_jqueue(case, jobs, duration_s, s3))
            ours.append(run_osqueue(case, jobs, duration_s, s3))
    osq = statistics.median(ours)
    jq = statistics.median(theirs)
    return {
        "case": case.name,
        "osqueue_jobs_per_s": round(osq, 1),
        "jqueue_jobs_per_s": round(jq, 1),
        "ratio": round(osq / jq, 2) if jq > 0 else None,
    }


def parse(argv: list[str]) -> argparse.Namespace:
    args = parse_cases(__doc__, CASES, argv)
    names = args.names
    args.case_list = [CASES[name] for name in names]
    return args


def main(argv: list[str]) -> int:
    args = parse(argv)
    ensure_jqueue_venv()
    started = time.perf_counter()
    for case in args.case_list:
        if case.s3:
            with s3_server() as target:
                line = run_case(case, args.runs, args.quick, target)
        else:
            line = run_case(case, args.runs, args.quick, None)
        print(json.dumps(line), flush=True)
    log(f"done in {time.perf_counter() - started:.0f} s")
    return 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
