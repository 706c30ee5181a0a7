"""``python -m sim``: run seeds, or replay one loudly.

* ``python -m sim sweep START COUNT`` prints one JSON line per seed;
* ``python -m sim sweep --storage moto|azurite START COUNT`` runs them over a
  real server (started for the sweep) through a faulty proxy, each run
  shortened (:mod:`sim.realstore`);
* ``python -m sim replay SEED`` prints the run's history (every answer
  the clients got and every version that landed) and its verdict; exits 1 on
  a violation.

Runs are exact functions of the seed only when string hashing is fixed too
(set iteration order reaches the document's bytes), so both commands re-run
themselves with ``PYTHONHASHSEED=0`` when it is not set.
"""

from __future__ import annotations

import contextlib
import logging
import os
import sys
from collections.abc import Sequence

from sim import realstore
from sim.config import config_for
from sim.run import Sim, quiet_logs, run_config

HASH_SEED = "0"


def _ensure_fixed_hashing(argv: Sequence[str]) -> None:
    if os.environ.get("PYTHONHASHSEED") != HASH_SEED:
        env = dict(os.environ, PYTHONHASHSEED=HASH_SEED)
        os.execve(sys.executable, [sys.executable, "-m", "sim", *argv], env)


def sweep(start: int, count: int, storage: str = "memory") -> int:
    with quiet_logs(), contextlib.ExitStack() as stack:
        real = None if storage == "memory" else stack.enter_context(realstore.started(storage))
        for seed in range(start, start + count):
            cfg, rng = config_for(seed)
            if real is not None:
                cfg = realstore.trimmed(cfg)
            print(run_config(cfg, rng, real=real).as_json(), flush=True)
    return 0


def replay(seed: int) -> int:
    logging.basicConfig(level=logging.INFO, format="%(levelname)s %(name)s: %(message)s")
    cfg, rng = config_for(seed)
    print(f"config: {cfg}")
    sim = Sim(cfg, rng)
    report = run_config(cfg, rng, sim=sim)
    print("\nhistory (answers in the order the broker produced them):")
    for e in sorted(sim.history.events, key=lambda e: e.seq):
        token = f" token={e.token}" if e.token else ""
        print(f"  t={e.at:9.3f} #{e.seq:<5} {e.kind.value:<13} {e.actor:<7} {e.job}{token}")
    print("\nversions that landed:")
    for item in sim.store.landed:
        print(f"  t={item.at:9.3f} by {item.writer:<6} {item.data[:160]!r}")
    print("\n" + report.summary())
    return 0 if report.ok else 1


def main(argv: Sequence[str]) -> int:
    usage = "usage: python -m sim sweep [--storage memory|moto|azurite] START COUNT | replay SEED"
    args = list(argv)
    storage = "memory"
    if args[:1] == ["sweep"] and len(args) == 5 and args[1] == "--storage":
        storage = args[2]
        del args[1:3]
        if storage not in ("memory", *realstore.BACKENDS):
            print(f"unknown storage {storage!r}\n{usage}", file=sys.stderr)
            return 2
    if len(args) == 3 and args[0] == "sweep":
        _ensure_fixed_hashing(argv)
        return sweep(int(args[1]), int(args[2]), storage)
    if len(argv) == 2 and argv[0] == "replay":
        _ensure_fixed_hashing(argv)
        return replay(int(argv[1]))
    print(usage, file=sys.stderr)
    return 2


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
