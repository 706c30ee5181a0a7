"""What every rule of the checker shares: where findings go, and the landed chain read once."""

from __future__ import annotations

from collections import Counter, defaultdict
from collections.abc import Collection, Iterator, Mapping
from dataclasses import dataclass, field

from osqueue.state import Document, SegmentRef, StoredJob
from osqueue.state.model import DelayedRef
from sim.history import Rule, Violation


class Findings:
    """The checker's findings; a disabled rule's are dropped (the mutation switch)."""

    def __init__(self, disabled: Collection[Rule] = ()) -> None:
        unknown = [r for r in disabled if not isinstance(r, Rule)]
        if unknown:
            raise TypeError(f"disabled must hold Rule values, not {unknown!r}")
        self.disabled = frozenset(disabled)
        self.violations: list[Violation] = []
        #: how many cases some rules looked at (versions, claims, delayed claims...):
        #: a sweep shows with these that its rules had something to judge
        self.checked: Counter[str] = Counter()

    def add(self, rule: Rule, message: str) -> None:
        if rule not in self.disabled:
            self.violations.append(Violation(rule, message))


@dataclass
class Chain:
    """The versions that landed, decoded, in landing order, and facts read from them once."""

    docs: list[Document]
    #: pairs of consecutive versions (v, v + 1); a chain that starts at version 1
    #: starts with (the empty document, version 1)
    steps: list[tuple[Document, Document]] = field(default_factory=list)
    #: job id -> the version it first appears in
    first_seen: dict[str, int] = field(default_factory=dict)
    #: job id -> each time it left the document before it was done (cancelled):
    #: (the version without it, next_token before that version, next_token after)
    left_undone: dict[str, list[tuple[int, int, int]]] = field(default_factory=dict)
    #: (job, token) of every claim some version holds (claimed, done or requeued later)
    held: set[tuple[str, int]] = field(default_factory=set)
    #: (job, token) of every job some version holds done under that token
    done_under: set[tuple[str, int]] = field(default_factory=set)
    #: version -> the jobs its segments hold (not loaded, not cancelled), by id
    spilled: dict[int, dict[str, StoredJob]] = field(default_factory=dict)
    #: version -> those of them in segments set aside (present, not claimable)
    aside: dict[int, set[str]] = field(default_factory=dict)

    def spilled_in(self, doc: Document) -> dict[str, StoredJob]:
        """The jobs ``doc``'s segments hold live (spilled out of the document)."""
        return self.spilled.get(doc.version, {})

    def holds(self, doc: Document, job_id: str) -> bool:
        """``job_id`` is in ``doc``: in its document, or spilled in a segment."""
        return job_id in doc.jobs or job_id in self.spilled.get(doc.version, ())


def build_chain(
    docs: list[Document], objects: Mapping[str, list[StoredJob]] | None = None
) -> Chain:
    """The chain of ``docs``; ``objects``: the segment objects written, decoded (a job
    in a segment counts as in the version, so a spill is no departure)."""
    chain = Chain(docs)
    left: dict[str, list[tuple[int, int, int]]] = defaultdict(list)
    if docs and docs[0].version == 1:
        chain.steps.append((Document.empty(), docs[0]))
    previous: Document | None = None
    for doc in docs:
        if (doc.segments or doc.waiting_cold or doc.dead or doc.delayed) and objects is not None:
            chain.spilled.setdefault(doc.version, _out_of_document(doc, objects))
            if doc.segments.aside:
                aside = [entry.ref for entry in doc.segments.aside.values()]
                chain.aside[doc.version] = set(live_spilled(doc, objects, aside))
        for job_id, job in doc.jobs.items():
            chain.first_seen.setdefault(job_id, doc.version)
            claim = job.claim
            if claim is not None:
                chain.held.add((job_id, claim.token))
                if job.status == "done":
                    chain.done_under.add((job_id, claim.token))
        if previous is not None:
            was = [*previous.jobs.values(), *chain.spilled_in(previous).values()]
            for job in was:
                if job.status != "done" and not chain.holds(doc, job.id):
                    left[job.id].append((doc.version, previous.next_token, doc.next_token))
            if doc.version == previous.version + 1:
                chain.steps.append((previous, doc))
        previous = doc
    chain.left_undone = dict(left)
    return chain


def all_refs(doc: Document) -> Iterator[SegmentRef]:
    """Every segment reference of ``doc``: listed, then set aside."""
    yield from doc.segments
    for entry in doc.segments.set_aside_of():
        yield entry.ref


def _out_of_document(doc: Document, objects: Mapping[str, list[StoredJob]]) -> dict[str, StoredJob]:
    """The jobs ``doc``'s segments and dead segments hold (a job also elsewhere is seen
    there: DEAD_RETRIED_ONCE, :mod:`sim.dead_rules`, reports the two places)."""
    held = live_spilled(doc, objects)
    for job_id, job in dead_spilled(doc, objects).items():
        held.setdefault(job_id, doc.jobs.get(job_id, job))
    return held


def dead_spilled(doc: Document, objects: Mapping[str, list[StoredJob]]) -> dict[str, StoredJob]:
    """The dead jobs ``doc``'s dead segments hold, by id."""
    refs = [*doc.dead, *(entry.ref for entry in doc.dead.aside.values())]  # (set aside too)
    return {job.id: job for ref in refs for job in objects.get(ref.key, ())}


def cold_keys(doc: Document) -> Iterator[str]:
    """The keys of every object ``doc`` references: segments (listed or set aside),
    waiting children, the sealed record."""
    yield from (ref.key for ref in all_refs(doc))
    yield from doc.waiting_cold.refs
    yield from doc.waiting_cold.aside  # (set aside: never deleted)
    yield from doc.dead.aside
    yield from doc.finished.sealed.refs
    yield from doc.delayed.refs  # delayed jobs' objects (listed or set aside)
    yield from doc.delayed.aside


def live_spilled(
    doc: Document,
    objects: Mapping[str, list[StoredJob]],
    refs: Collection[SegmentRef] | None = None,
) -> dict[str, StoredJob]:
    """The jobs ``doc``'s segments (or ``refs``) still hold (not loaded, not
    cancelled), by id; those set aside included (present, if not claimable)."""
    out: dict[str, StoredJob] = {}
    listed: list[SegmentRef | DelayedRef] = list(all_refs(doc) if refs is None else refs)
    if refs is None:  # and the waiting children in objects (sim.waiting_rules)
        waiting = [*doc.waiting_cold, *(e.ref for e in doc.waiting_cold.aside.values())]
        for cold in waiting:
            struck = set(cold.cancelled)
            out.update((j.id, j) for j in objects.get(cold.key, ()) if j.id not in struck)
        listed.extend(doc.delayed)  # and the delayed jobs in objects
        listed.extend(entry.ref for entry in doc.delayed.aside.values())
    for ref in listed:
        jobs = objects.get(ref.key)
        if jobs is None:
            continue
        cancelled = set(ref.cancelled)
        for job in jobs[ref.loaded :]:
            if job.id not in cancelled:
                out.setdefault(job.id, job)
    return out
