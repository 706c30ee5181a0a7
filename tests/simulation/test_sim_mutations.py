"""The mutation suite's list (``tests/sim/mutations.py``) against today's code: every
planted bug still applies, so ``make mutate`` cannot rot silently as the code moves.
(``make mutate`` itself runs the seeds against each; it is too heavy for ``make test``.)"""

from __future__ import annotations

import shutil
from dataclasses import replace
from pathlib import Path

import pytest
from sim.mutate import PACKAGE, SIMULATOR, TESTS_DIR, DoesNotApply, apply, patched, run_one
from sim.mutations import MUTATIONS, Mutation


@pytest.mark.parametrize("mutation", MUTATIONS, ids=[m.name for m in MUTATIONS])
def test_each_mutation_applies_once_and_compiles(mutation: Mutation) -> None:
    before = (PACKAGE / mutation.file).read_text(encoding="utf-8")
    after = patched(mutation)
    assert after != before
    assert mutation.family
    assert mutation.models


def test_the_mutations_are_named_once_and_cover_every_family() -> None:
    names = [m.name for m in MUTATIONS]
    assert len(names) == len(set(names))
    families = " ".join(m.family for m in MUTATIONS)
    for family in (
        "fencing",
        "archive",
        "leases and takeover",
        "group commit",
        "segments",
        "payload",
        "results",
        "schedules",
        "queue limits",
        "dependencies",
    ):
        assert family in families, family


def test_a_snippet_not_found_once_fails_loudly() -> None:
    [first, *_] = MUTATIONS
    gone = replace(first, original="no such text in the code\n")
    with pytest.raises(DoesNotApply, match="occurs 0 times"):
        patched(gone)
    twice = replace(first, file="state/transitions.py", original="\n")
    with pytest.raises(DoesNotApply, match="must be once"):
        patched(twice)
    broken = replace(first, replacement="  this is not Python(\n")
    with pytest.raises(DoesNotApply, match="does not compile"):
        patched(broken)


def test_a_mutation_is_applied_to_a_copy_never_to_the_tree(tmp_path: Path) -> None:
    mutation = MUTATIONS[0]
    tree = (PACKAGE / mutation.file).read_text(encoding="utf-8")
    root = apply(mutation, tmp_path)
    assert (root / "osqueue" / mutation.file).read_text(encoding="utf-8") == patched(mutation)
    assert (PACKAGE / mutation.file).read_text(encoding="utf-8") == tree


def test_a_mutant_run_imports_the_copies_of_the_package_and_the_simulator(
    tmp_path: Path,
) -> None:
    """``make mutate`` runs each mutant with copies of the simulator's packages (and
    what they import from tests/) on the path: with none of them missing, a run of
    no seeds applies the mutation and imports both copies without an error."""
    simulator = tmp_path / "simulator"
    for package in SIMULATOR:
        shutil.copytree(TESTS_DIR / package, simulator / package)
    outcome = run_one(MUTATIONS[0], range(0), 1, simulator)
    assert outcome.error is None, outcome.error
