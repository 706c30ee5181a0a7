"""Options for the chaos tests: ``--chaos-seed S|random`` and ``--chaos-rounds N``.

Without ``--chaos-seed`` each backend's test runs the seeds listed for it in
``seeds.py`` (one test per seed), so ``make test`` and CI replay the same plan
every time.  ``--chaos-seed S`` runs seed ``S`` on every backend (the replay of
a failure), ``--chaos-seed random`` a new seed, the same on every backend
(``make chaos``).  A failing test prints its seed (a report section, "chaos
seed") with the command that replays it.  The seed picks the order of the
rounds, the victims among those that fit each round's rule, and every proxy's
faults.
"""

from __future__ import annotations

import os
from collections.abc import Generator

import pytest
from seeds import DEFAULT_ROUNDS, SEEDS

RANDOM = "random"
FRESH_SEED = pytest.StashKey[int]()


def _seed(text: str) -> int | str:
    if text == RANDOM:
        return RANDOM
    try:
        return int(text)
    except ValueError:
        raise pytest.UsageError(
            f"--chaos-seed: expected an integer or {RANDOM!r}, got {text!r}"
        ) from None


def pytest_addoption(parser: pytest.Parser) -> None:
    group = parser.getgroup("osqueue chaos")
    group.addoption(
        "--chaos-seed",
        type=_seed,
        default=None,
        help="seed of the chaos runs on every backend, or 'random' for a new one "
        "(default: the seeds listed per backend in tests/chaos/seeds.py)",
    )
    group.addoption(
        "--chaos-rounds",
        type=int,
        default=DEFAULT_ROUNDS,
        help=f"rounds per backend (default {DEFAULT_ROUNDS}; `make chaos` runs more)",
    )


def _backend(metafunc: pytest.Metafunc) -> str:
    names = [b for b in SEEDS if f"{b}_backend" in metafunc.fixturenames]
    assert len(names) == 1, f"{metafunc.function.__name__}: which backend? {names}"
    return names[0]


def pytest_generate_tests(metafunc: pytest.Metafunc) -> None:
    """One test per seed: the option's, or the ones listed for the test's backend."""
    if "chaos_seed" not in metafunc.fixturenames:
        return
    config = metafunc.config
    option: int | str | None = config.getoption("--chaos-seed")
    if option == RANDOM:
        if FRESH_SEED not in config.stash:
            config.stash[FRESH_SEED] = int.from_bytes(os.urandom(4), "big")
        seeds = [config.stash[FRESH_SEED]]
    elif isinstance(option, int):
        seeds = [option]
    else:
        seeds = list(SEEDS[_backend(metafunc)])
    metafunc.parametrize("chaos_seed", seeds, ids=[str(s) for s in seeds])


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """A time limit that grows with the rounds (a chaos test runs minutes, not seconds)."""
    rounds = config.getoption("--chaos-rounds")
    for item in items:
        if item.get_closest_marker("chaos") is not None:
            item.add_marker(pytest.mark.timeout(300 + 60 * rounds))


@pytest.fixture
def chaos_rounds(pytestconfig: pytest.Config) -> int:
    rounds: int = pytestconfig.getoption("--chaos-rounds")
    return rounds


@pytest.hookimpl(wrapper=True)
def pytest_runtest_makereport(
    item: pytest.Item, call: pytest.CallInfo[None]
) -> Generator[None, pytest.TestReport, pytest.TestReport]:
    report = yield
    callspec = getattr(item, "callspec", None)
    seed = callspec.params.get("chaos_seed") if callspec is not None else None
    if seed is not None and report.failed:
        rounds = item.config.getoption("--chaos-rounds")
        test = item.nodeid.split("[", 1)[0]
        report.sections.append(
            (
                "chaos seed",
                f"seed {seed}; replay: pytest '{test}' --chaos-seed {seed} --chaos-rounds {rounds}"
                " (if it failed in a plain run, add it to tests/chaos/seeds.py)",
            )
        )
    return report
