"""The seed sweep: ``--seeds N`` seeds (default 600), each a whole simulated run
judged by every rule of the checker (I1 to I9), and ``test_replay`` that replays
``--seed S`` loudly.

Seeds run in subprocesses with fixed string hashing (``python -m sim``),
two at a time, so a failing seed replays exactly with the command it prints;
``test_fifty_seeds_replay_byte_for_byte_in_fresh_processes`` shows that it does.
"""

from __future__ import annotations

import json
import re
import subprocess
import sys
from collections import Counter
from collections.abc import Callable, Iterable
from pathlib import Path
from typing import Any

import pytest
import sim
from sim import FAMILY_NAMES, quiet_logs, run_seed
from sim.run import REPLAY, sim_env

#: subprocesses at a time (the machine has two cores)
PARALLEL = 2
#: everything the checker counts as it judges (``Report.checked``): each must occur in
#: a chunk, so a change that stops the simulator generating a kind of case fails the
#: sweep (``test_the_guard_covers_every_count_of_the_checker`` keeps the list whole)
EXERCISED = (
    "versions",
    "claims",
    "claims of delayed jobs",
    "queued jobs kept",
    "claims while others waited",
    "claims of children",
    "live keyed jobs",
    "dead jobs",
    "cancels",
    "payload objects",
    "results",
    "schedule ticks",
    "schedule steps",
    "claims under limits",
    "segment objects",
    "segment references",
    "segment deletes",
)
#: what only one family's runs count: each must occur in that family's own seeds
#: (``test_family_seeds`` in test_sim_scenarios.py asserts it), not in every chunk
FAMILY_EXERCISED = {
    "waiting references": "waiting-cold",
    "waiting objects": "waiting-cold",
    "sealed entries": "finished-seal",
    "sealed objects": "finished-seal",
    "children of sealed parents": "waiting-cold",
    "dead jobs retried": "dead-segments",
    "dead objects set aside": "dead-segments",
    "dead objects readmitted": "dead-segments",
    "waiting objects set aside": "waiting-cold",
    "waiting objects readmitted": "waiting-cold",
    "delayed loads timed": "delayed-spill",
}
#: a chunk this big (the default's chunks are 40 seeds) has a case of each
EXERCISED_MIN_SEEDS = 40
#: the seeds replayed byte for byte in fresh processes
REPLAYED = range(50)


def _sweep(seeds: range, processes: int = PARALLEL) -> list[dict[str, Any]]:
    """Run ``seeds`` in ``processes`` fresh ``python -m sim sweep`` processes (at most
    two at a time); one report per seed."""
    size = -(-len(seeds) // processes)
    parts = [seeds[i : i + size] for i in range(0, len(seeds), size)]
    reports: list[dict[str, Any]] = []
    for i in range(0, len(parts), PARALLEL):
        reports += _run_parts(parts[i : i + PARALLEL])
    return reports


def _run_parts(parts: list[range]) -> list[dict[str, Any]]:
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
    reports: list[dict[str, Any]] = []
    for proc in procs:
        out, err = proc.communicate(timeout=3600)
        assert proc.returncode == 0, f"the sweep process failed:\n{err[-4000:]}"
        reports += [json.loads(line) for line in out.splitlines() if line.startswith("{")]
    return reports


@pytest.mark.timeout(900)
def test_seeds(seed_chunk: range, keep_reports: Callable[[Iterable[str]], None]) -> None:
    reports = _sweep(seed_chunk)
    keep_reports(json.dumps(r, sort_keys=True) for r in reports)
    assert sorted(r["seed"] for r in reports) == list(seed_chunk)
    bad = [r for r in reports if not r["ok"]]
    faults = sum(sum(r["faults"].values()) for r in reports)
    families = Counter(r["family"] for r in reports)
    assert faults >= 10 * len(reports), "the faults did not happen; the sweep proves nothing"
    assert all(r["acknowledged"] for r in reports), "a run acknowledged no push at all"
    if len(reports) >= EXERCISED_MIN_SEEDS:  # every rule had cases to judge
        checked = unexercised(reports)
        assert not checked, f"no {', '.join(checked)} in {len(reports)} seeds"
    assert bad == [], "\n\n".join(str(r["summary"]) for r in bad[:10]) + (
        f"\n\n{len(bad)} of {len(reports)} seeds broke an invariant; replay one with: "
        + REPLAY.format(seed=bad[0]["seed"])
    )
    assert set(families) <= set(FAMILY_NAMES)


def unexercised(reports: Iterable[dict[str, Any]]) -> list[str]:
    """The kinds of case of :data:`EXERCISED` that no report's checker counted."""
    checked: Counter[str] = Counter()
    for r in reports:
        checked.update(r["checked"])
    return [case for case in EXERCISED if not checked[case]]


def test_the_guard_covers_every_count_of_the_checker() -> None:
    """Every ``checked["..."]`` the simulator's rules count is in :data:`EXERCISED`
    (a new count joins the guard with its rule), and nothing else is."""
    counted = set()
    for path in Path(sim.__file__).parent.glob("*.py"):
        counted |= set(re.findall(r'checked\["([^"]+)"\]', path.read_text(encoding="utf-8")))
    assert counted == set(EXERCISED) | set(FAMILY_EXERCISED)


def test_the_guard_names_a_kind_of_case_no_seed_had() -> None:
    """A chunk whose runs never claimed a child (its generator removed) fails the
    guard, naming what is missing."""
    every = {case: 1 for case in EXERCISED}
    reports = [{"checked": every}, {"checked": {**every, "claims of children": 0}}]
    assert unexercised(reports) == []
    without = {case: n for case, n in every.items() if case != "claims of children"}
    assert unexercised([{"checked": without}] * EXERCISED_MIN_SEEDS) == ["claims of children"]


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


@pytest.mark.timeout(600)
def test_fifty_seeds_replay_byte_for_byte_in_fresh_processes() -> None:
    """50 seeds, run in fresh processes twice, cut into different chunks each time (so
    what a process ran before a seed cannot matter): the same fingerprint, seed by seed.
    Among them are runs that offload payloads to objects (their upload ids come from the
    seed too) and runs that keep every payload inline."""
    first = {r["seed"]: r for r in _sweep(REPLAYED, processes=2)}
    again = {r["seed"]: r for r in _sweep(REPLAYED, processes=5)}
    assert sorted(first) == sorted(again) == list(REPLAYED)
    differ = [s for s in REPLAYED if first[s]["fingerprint"] != again[s]["fingerprint"]]
    assert differ == [], f"seeds {differ} did not replay: " + REPLAY.format(seed=differ[0])
    offloaded = [s for s in REPLAYED if first[s]["checked"].get("payload objects")]
    assert 0 < len(offloaded) < len(REPLAYED), "need runs with and without payload objects"
    assert all(r["ok"] for r in first.values())
