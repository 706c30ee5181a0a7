"""The seed sweep: ``--seeds N`` seeds (default 600), each a whole simulated run
checked against I1 to I5, and ``test_replay`` that replays ``--seed S`` loudly.

Seeds run in subprocesses with fixed string hashing (``python -m sim``),
two at a time, so a failing seed replays exactly with the command it prints.
"""

from __future__ import annotations

import json
import subprocess
import sys
from collections import Counter

import pytest
from sim import FAMILY_NAMES, quiet_logs, run_seed
from sim.run import REPLAY, sim_env

#: subprocesses per chunk (the machine has two cores)
PARALLEL = 2


def _sweep(seeds: range) -> list[dict[str, object]]:
    size = -(-len(seeds) // PARALLEL)
    parts = [seeds[i : i + size] for i in range(0, len(seeds), size)]
    env = sim_env()
    procs = [
        subprocess.Popen(
            [sys.executable, "-m", "sim", "sweep", str(p.start), str(len(p))],
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            env=env,
            text=True,
        )
        for p in parts
    ]
    reports: list[dict[str, object]] = []
    for proc in procs:
        out, err = proc.communicate(timeout=3600)
        assert proc.returncode == 0, f"the sweep process failed:\n{err[-4000:]}"
        reports += [json.loads(line) for line in out.splitlines() if line.startswith("{")]
    return reports


@pytest.mark.timeout(900)
def test_seeds(seed_chunk: range) -> None:
    reports = _sweep(seed_chunk)
    assert sorted(r["seed"] for r in reports) == list(seed_chunk)  # type: ignore[type-var]
    bad = [r for r in reports if not r["ok"]]
    faults = sum(sum(r["faults"].values()) for r in reports)  # type: ignore[attr-defined]
    families = Counter(r["family"] for r in reports)
    assert faults >= 10 * len(reports), "the faults did not happen; the sweep proves nothing"
    assert all(r["acknowledged"] for r in reports), "a run acknowledged no push at all"
    assert bad == [], "\n\n".join(str(r["summary"]) for r in bad[:10]) + (
        f"\n\n{len(bad)} of {len(reports)} seeds broke an invariant; replay one with: "
        + REPLAY.format(seed=bad[0]["seed"])
    )
    assert set(families) <= set(FAMILY_NAMES)


def test_replay(replay_seed: int) -> None:
    """``-k replay --seed S``: the run of seed S, its whole history printed."""
    proc = subprocess.run(
        [sys.executable, "-m", "sim", "replay", str(replay_seed)],
        capture_output=True,
        env=sim_env(),
        text=True,
        timeout=600,
    )
    print(proc.stdout)
    assert proc.returncode == 0, proc.stdout[-6000:] + proc.stderr[-3000:]


def test_a_seed_is_a_pure_function_of_itself() -> None:
    """Same seed, same history: the replay command reproduces what the sweep saw."""
    with quiet_logs():
        first = [run_seed(seed) for seed in (3, 4)]
        again = [run_seed(seed) for seed in (3, 4)]
    assert [r.fingerprint for r in first] == [r.fingerprint for r in again]
    assert first[0].fingerprint != first[1].fingerprint
