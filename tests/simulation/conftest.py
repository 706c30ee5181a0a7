"""Options for the simulation: ``--seeds N`` (how many seeds the sweep runs),
``--seed S`` (replay exactly these seeds, loud, in ``test_replay``) and
``--real-seeds N`` (how many seeds run over moto's S3 and over Azurite)."""

from __future__ import annotations

from collections.abc import Callable, Iterable

import pytest

DEFAULT_SEEDS = 600
#: seeds per real server (moto, Azurite) in ``test_sim_real_storage.py``
DEFAULT_REAL_SEEDS = 8
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
        "--real-seeds",
        type=int,
        default=DEFAULT_REAL_SEEDS,
        help=f"how many seeds (from 0) run over each real server (default {DEFAULT_REAL_SEEDS})",
    )
    group.addoption(
        "--sim-report",
        default=None,
        metavar="PATH",
        help="append every simulated seed's report to PATH as JSON lines (for figures)",
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


@pytest.fixture
def real_seeds(request: pytest.FixtureRequest) -> range:
    """The seeds the simulation runs over each real server."""
    count: int = request.config.getoption("--real-seeds")
    return range(count)


@pytest.fixture
def keep_reports(request: pytest.FixtureRequest) -> Callable[[Iterable[str]], None]:
    """Append JSON report lines to ``--sim-report`` (a no-op without it)."""
    path: str | None = request.config.getoption("--sim-report")

    def keep(lines: Iterable[str]) -> None:
        if path:
            with open(path, "a", encoding="utf-8") as out:
                out.writelines(line + "\n" for line in lines)

    return keep
