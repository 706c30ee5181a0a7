"""The mutation suite's list (``tests/sim/mutations.py``) against today's code: every
planted bug still applies, so ``make mutate`` cannot rot silently as the code moves.
(``make mutate`` itself runs the seeds against each; it is too heavy for ``make test``.)"""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path

import pytest
from sim.mutate import PACKAGE, DoesNotApply, apply, patched
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
