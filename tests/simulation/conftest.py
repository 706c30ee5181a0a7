"""Options for the simulation: ``--seeds N`` (how many seeds the sweep runs) and
``--seed S`` (replay exactly these seeds, loud, in ``test_replay``)."""

from __future__ import annotations

import pytest

DEFAULT_SEEDS = 600
#: seeds per test: small chunks for the default run, bigger ones for a long soak
CHUNK_MIN, CHUNK_MAX = 40, 400


def pytest_addoption(parser: pytest.Parser) -> None:
    group = parser.getgroup("osqueue simulation")
    group.addoption(
        "--seeds",
        type=int,
        default=DEFAULT_SEEDS,
        help=f"how many seeds the simulation sweep runs (default {DEFAULT_SEEDS})",
    )
    group.addoption(
        "--seed-start",
        type=int,
        default=0,
        help="the first seed of the sweep (default 0)",
    )
    group.addoption(
        "--seed",
        type=int,
        action="append",
        default=None,
        help="replay this seed (repeatable); used with -k replay",
    )


def pytest_generate_tests(metafunc: pytest.Metafunc) -> None:
    if "seed_chunk" in metafunc.fixturenames:
        start = metafunc.config.getoption("--seed-start")
        total = metafunc.config.getoption("--seeds")
        end = start + total
        chunk = min(CHUNK_MAX, max(CHUNK_MIN, total // 100))
        chunks = [range(a, min(a + chunk, end)) for a in range(start, end, chunk)]
        metafunc.parametrize(
            "seed_chunk", chunks, ids=[f"seeds-{c.start}-{c.stop - 1}" for c in chunks]
        )
    if "replay_seed" in metafunc.fixturenames:
        seeds = metafunc.config.getoption("--seed") or [0]
        metafunc.parametrize("replay_seed", seeds, ids=[f"seed-{s}" for s in seeds])
