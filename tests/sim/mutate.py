"""``python -m sim.mutate`` (``make mutate``): the seeds against planted bugs.

Each mutation of :data:`sim.mutations.MUTATIONS` is applied, alone, to a
fresh copy of ``src/osqueue`` in a temporary folder (the tree itself is never
touched).  That copy, and a copy of the simulator taken when the run starts
(so editing ``tests/sim`` meanwhile changes nothing), go first on the
``PYTHONPATH`` of ``python -m sim sweep`` processes that run the seeds, split
over ``--processes`` (two by default: the machine has two cores).

A seed *kills* a mutation when its run breaks a rule (``ok`` false in its
report).  The table shows, per mutation, how many seeds killed it and which
rules fired; the last line is one JSON object with the counts.  The exit
status is 1 when a mutation does not apply (its snippet is not found exactly
once) or is killed by fewer than ``--min-kills`` seeds.

    PYTHONPATH=tests .venv/bin/python -m sim.mutate            # all, 600 seeds
    PYTHONPATH=tests .venv/bin/python -m sim.mutate --check    # apply each, no seeds
    PYTHONPATH=tests .venv/bin/python -m sim.mutate --only commit-answers-last-attempt \
        --seeds 100 --start 300
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path

from sim.mutations import MIN_KILLS, MUTATIONS, Mutation

#: ``src/osqueue`` of this checkout (what is copied and mutated)
PACKAGE = Path(__file__).resolve().parents[2] / "src" / "osqueue"
#: ``tests/``, and the packages of it the simulator runs on (copied once per run)
TESTS_DIR = Path(__file__).resolve().parents[1]
SIMULATOR = ("sim", "chaos", "servers")  # the simulator and what it imports from tests
DEFAULT_SEEDS = 600  # the sweep of ``make test`` (tests/simulation/conftest.py)


class DoesNotApply(Exception):
    """A mutation's snippet is not found exactly once in its file."""


@dataclass
class Outcome:
    mutation: Mutation
    killed: list[int] = field(default_factory=list)
    seeds: int = 0
    #: rule (or problem) name -> seeds where it fired
    rules: Counter[str] = field(default_factory=Counter)
    error: str | None = None
    seconds: float = 0.0

    def passes(self, min_kills: int) -> bool:
        return self.error is None and len(self.killed) >= min_kills


def patched(mutation: Mutation, package: Path = PACKAGE) -> str:
    """The text of ``mutation.file`` in ``package`` with the mutation applied (checked
    to compile); :class:`DoesNotApply` unless its snippet occurs there exactly once."""
    path = package / mutation.file
    if not path.is_file():
        raise DoesNotApply(f"{mutation.name}: no file {mutation.file} in {package}")
    text = path.read_text(encoding="utf-8")
    found = text.count(mutation.original)
    if found != 1:
        raise DoesNotApply(
            f"{mutation.name}: its snippet occurs {found} times in {mutation.file} "
            f"(must be once):\n{mutation.original}"
        )
    out = text.replace(mutation.original, mutation.replacement)
    try:
        compile(out, str(path), "exec")
    except SyntaxError as exc:
        raise DoesNotApply(f"{mutation.name}: the mutated file does not compile: {exc}") from exc
    return out


def apply(mutation: Mutation, root: Path) -> Path:
    """Copy the package under ``root`` with ``mutation`` applied; returns the folder to
    put first on ``PYTHONPATH``."""
    text = patched(mutation)
    target = root / "osqueue"
    shutil.copytree(PACKAGE, target, ignore=shutil.ignore_patterns("__pycache__"))
    (target / mutation.file).write_text(text, encoding="utf-8")
    return root


def _env(first: Path, simulator: Path) -> dict[str, str]:
    rest = os.environ.get("PYTHONPATH")
    path = [str(first), str(simulator), *([rest] if rest else [])]
    return dict(os.environ, PYTHONHASHSEED="0", PYTHONPATH=os.pathsep.join(path))


def _check_import(env: dict[str, str], first: Path, simulator: Path) -> None:
    """The sweeps must import the mutated copy (not the tree or an installed one) and
    the simulator's copy."""
    got = subprocess.run(
        [sys.executable, "-c", "import osqueue, sim; print(osqueue.__file__, sim.__file__)"],
        env=env,
        cwd=simulator,
        capture_output=True,
        text=True,
        check=True,
    ).stdout.split()
    if not (got[0].startswith(str(first)) and got[1].startswith(str(simulator))):
        raise DoesNotApply(f"the sweep would import {got}, not the copies in {first}")


def _rule_of(violation: str) -> str:
    """A violation's text (``"I1 no-loss: acknowledged job..."``) -> ``no-loss``."""
    head = violation.split(":", 1)[0]
    return head.split(" ", 1)[-1][:40]


def sweep(
    env: dict[str, str], seeds: range, processes: int, simulator: Path
) -> list[dict[str, object]]:
    """The seeds' reports, from ``processes`` ``python -m sim sweep`` at once (run in
    ``simulator``: ``python -m`` puts the working folder first on the path)."""
    size = -(-len(seeds) // processes)
    parts = [seeds[i : i + size] for i in range(0, len(seeds), size)]
    procs = [
        subprocess.Popen(
            [sys.executable, "-m", "sim", "sweep", str(p.start), str(len(p))],
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            env=env,
            cwd=simulator,
            text=True,
        )
        for p in parts
    ]
    reports: list[dict[str, object]] = []
    failed: list[str] = []
    for proc in procs:
        out, err = proc.communicate()
        if proc.returncode != 0:
            failed.append(err[-3000:])
        reports += [json.loads(line) for line in out.splitlines() if line.startswith("{")]
    if failed:
        raise RuntimeError("a sweep process failed:\n" + "\n".join(failed))
    return reports


def run_one(mutation: Mutation, seeds: range, processes: int, simulator: Path) -> Outcome:
    """Run ``seeds`` against ``mutation`` (``simulator``: the folder holding the
    copy of ``sim`` to run)."""
    outcome = Outcome(mutation)
    started = time.monotonic()
    with tempfile.TemporaryDirectory(prefix=f"osqueue-mutant-{mutation.name}-") as tmp:
        try:
            first = apply(mutation, Path(tmp))
            env = _env(first, simulator)
            _check_import(env, first, simulator)
            reports = sweep(env, seeds, processes, simulator) if len(seeds) else []
        except (DoesNotApply, RuntimeError) as exc:
            outcome.error = str(exc)
            outcome.seconds = time.monotonic() - started
            return outcome
    outcome.seeds = len(reports)
    for r in reports:
        if not r["ok"]:
            outcome.killed.append(int(str(r["seed"])))
            violations = r["violations"]
            assert isinstance(violations, list)
            outcome.rules.update({_rule_of(str(v)) for v in violations})
    outcome.killed.sort()
    outcome.seconds = time.monotonic() - started
    return outcome


def table(outcomes: Sequence[Outcome], min_kills: int) -> str:
    lines = [
        "| mutation | family | seeds that killed it | rules that fired (seeds) |",
        "|---|---|---|---|",
    ]
    for o in outcomes:
        if o.error is not None:
            lines.append(f"| `{o.mutation.name}` | {o.mutation.family} | ERROR | {o.error} |")
            continue
        mark = "" if len(o.killed) >= min_kills else " **(gap)**"
        rules = ", ".join(f"{k} ({v})" for k, v in o.rules.most_common(4))
        lines.append(
            f"| `{o.mutation.name}` | {o.mutation.family} | "
            f"{len(o.killed)} of {o.seeds}{mark} | {rules} |"
        )
    return "\n".join(lines)


def main(argv: Sequence[str]) -> int:
    parser = argparse.ArgumentParser(prog="python -m sim.mutate", description=__doc__)
    parser.add_argument("--seeds", type=int, default=DEFAULT_SEEDS, help="seeds per mutation")
    parser.add_argument("--start", type=int, default=0, help="the first seed")
    parser.add_argument("--processes", type=int, default=2, help="sweep processes at once")
    parser.add_argument("--only", action="append", default=[], help="this mutation (repeatable)")
    parser.add_argument("--min-kills", type=int, default=MIN_KILLS)
    parser.add_argument(
        "--check", action="store_true", help="only apply each mutation (no seeds run)"
    )
    args = parser.parse_args(argv)
    if args.check:
        args.seeds, args.min_kills = 0, 0
    chosen = [m for m in MUTATIONS if not args.only or m.name in args.only]
    unknown = set(args.only) - {m.name for m in MUTATIONS}
    if unknown:
        parser.error(f"unknown mutation(s): {', '.join(sorted(unknown))}")
    seeds = range(args.start, args.start + args.seeds)
    started = time.monotonic()
    outcomes = []
    with tempfile.TemporaryDirectory(prefix="osqueue-mutate-sim-") as simulator:
        for package in SIMULATOR:
            shutil.copytree(
                TESTS_DIR / package,
                Path(simulator) / package,
                ignore=shutil.ignore_patterns("__pycache__"),
            )
        for mutation in chosen:
            o = run_one(mutation, seeds, args.processes, Path(simulator))
            outcomes.append(o)
            status = o.error or f"killed by {len(o.killed)} of {o.seeds} seeds: {o.killed[:12]}"
            print(f"{mutation.name}: {status} ({o.seconds:.0f}s)", file=sys.stderr, flush=True)
    elapsed = time.monotonic() - started
    print(table(outcomes, args.min_kills))
    bad = [o.mutation.name for o in outcomes if not o.passes(args.min_kills)]
    summary = {
        "seeds": f"{seeds.start}-{seeds.stop - 1}",
        "killed": {o.mutation.name: len(o.killed) for o in outcomes if o.error is None},
        "errors": {o.mutation.name: o.error for o in outcomes if o.error is not None},
        "below_min": bad,
        "min_kills": args.min_kills,
        "elapsed_s": round(elapsed, 1),
    }
    print(json.dumps(summary, sort_keys=True))
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
