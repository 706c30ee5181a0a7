"""Options for the chaos tests: ``--chaos-seed S`` and ``--chaos-rounds N``.

Without ``--chaos-seed`` every run draws a new seed; a failing test prints
it (a report section, "chaos seed") with the command that replays it.  The
seed picks the order of the rounds, the victims among those that fit each
round's rule, and every proxy's faults.  ``make chaos`` runs many rounds.
"""

from __future__ import annotations

import os
from collections.abc import Generator

import pytest

DEFAULT_ROUNDS = 4
SEED = pytest.StashKey[int]()


def pytest_addoption(parser: pytest.Parser) -> None:
    group = parser.getgroup("osqueue chaos")
    group.addoption(
        "--chaos-seed",
        type=int,
        default=None,
        help="seed of the chaos runs (default: a new one every run, printed on failure)",
    )
    group.addoption(
        "--chaos-rounds",
        type=int,
        default=DEFAULT_ROUNDS,
        help=f"rounds per backend (default {DEFAULT_ROUNDS}; `make chaos` runs more)",
    )


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """A time limit that grows with the rounds (a chaos test runs minutes, not seconds)."""
    rounds = config.getoption("--chaos-rounds")
    for item in items:
        if item.get_closest_marker("chaos") is not None:
            item.add_marker(pytest.mark.timeout(300 + 60 * rounds))


@pytest.fixture(scope="session")
def session_chaos_seed(pytestconfig: pytest.Config) -> int:
    seed: int | None = pytestconfig.getoption("--chaos-seed")
    return seed if seed is not None else int.from_bytes(os.urandom(4), "big")


@pytest.fixture
def chaos_seed(request: pytest.FixtureRequest, session_chaos_seed: int) -> int:
    request.node.stash[SEED] = session_chaos_seed
    return session_chaos_seed


@pytest.fixture
def chaos_rounds(pytestconfig: pytest.Config) -> int:
    rounds: int = pytestconfig.getoption("--chaos-rounds")
    return rounds


@pytest.hookimpl(wrapper=True)
def pytest_runtest_makereport(
    item: pytest.Item, call: pytest.CallInfo[None]
) -> Generator[None, pytest.TestReport, pytest.TestReport]:
    report = yield
    seed = item.stash.get(SEED, None)
    if seed is not None and report.failed:
        rounds = item.config.getoption("--chaos-rounds")
        report.sections.append(
            (
                "chaos seed",
                f"seed {seed}; replay: pytest tests/chaos -k '{item.name}' "
                f"--chaos-seed {seed} --chaos-rounds {rounds}",
            )
        )
    return report
