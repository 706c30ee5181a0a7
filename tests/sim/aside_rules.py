"""The checker's rule of cold objects set aside and readmitted (ASIDE_KEPT).

A broker that finds a cold object missing or failing its check moves its
reference to the document's set-aside list (``SetAside``): its jobs are reported
(``osqueue status``, ``segments list``) and kept, neither lost nor claimable,
until ``osqueue segments readmit`` checks the restored object and lists the
reference again (``Readmit``).  The other rules count a set-aside object's jobs
as present (:func:`sim.findings.live_spilled`, :func:`sim.findings.dead_spilled`);
this one holds the list itself, for every kind (ready segments, delayed
objects, dead segments, waiting children): from one version to the next a key
set aside stays aside or is listed again (readmitted), never dropped with its
jobs.  (A version that lists a key and sets it aside at once, a readmit that
kept the entry, does not decode: VERSION_DECODES.)  The simulator's store loses
or corrupts dead and waiting objects (:mod:`sim.damage`), so these counts come
from the "dead-segments" and "waiting-cold" families.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any

from osqueue.state import Document
from sim.findings import Chain, Findings
from sim.history import Rule

_Refs = Callable[[Document], Mapping[str, Any]]
#: kind -> (the references a version lists, by key; its holder, whose ``aside``
#: maps each key set aside to an entry holding the reference)
_KINDS: dict[str, tuple[_Refs, Callable[[Document], Any]]] = {
    "segment": (lambda d: {r.key: r for r in d.segments}, lambda d: d.segments),
    "delayed object": (lambda d: d.delayed.refs, lambda d: d.delayed),
    "dead segment": (lambda d: {r.key: r for r in d.dead}, lambda d: d.dead),
    "waiting object": (lambda d: d.waiting_cold.refs, lambda d: d.waiting_cold),
}


def _aside(holder: Any) -> dict[str, Any]:
    """The references ``holder`` sets aside, by key."""
    return {k: e.ref for k, e in holder.aside.items()}


#: what a reference says of its object's jobs, which no op changes while it is aside
_FIXED = ("count", "min_id", "max_id")


def check_asides(chain: Chain, f: Findings) -> None:
    """ASIDE_KEPT over the chain, and the counts of dead and waiting objects set
    aside and readmitted."""
    if not any(_KINDS[k][1](doc).aside for doc in chain.docs for k in _KINDS):
        return
    told: set[str] = set()
    seen: set[str] = set()
    for before, after in chain.steps:
        for kind, (listed, holder) in _KINDS.items():
            was, now, back = _aside(holder(before)), _aside(holder(after)), listed(after)
            left = was.keys() - now.keys()
            readmitted = left & back.keys()
            if kind == "dead segment":
                f.checked["dead objects set aside"] += len(now.keys() - seen)
                f.checked["dead objects readmitted"] += len(readmitted)
            elif kind == "waiting object":
                f.checked["waiting objects set aside"] += len(now.keys() - seen)
                f.checked["waiting objects readmitted"] += len(readmitted)
            seen |= now.keys()
            for key in sorted(left - told):
                old, new = was[key], back.get(key)
                if new is None:
                    changed = []
                else:
                    changed = [n for n in _FIXED if getattr(new, n) != getattr(old, n)]
                    if not changed:
                        continue
                told.add(key)
                how = f"with its {', '.join(changed)} changed" if changed else "without a readmit"
                f.add(
                    Rule.ASIDE_KEPT,
                    f"version {after.version}: {kind} {key} left the set-aside list of "
                    f"version {before.version} {how} (its jobs with it)",
                )
