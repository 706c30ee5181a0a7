"""The checker's rules of deep backlogs (I13), and the spilled jobs every other rule
counts as present.

A version's jobs are its document's jobs and the *spilled* ones: the part of
each referenced segment object not loaded yet, less what was cancelled there.
The objects come from the store's record of every segment put
(:attr:`sim.history.Outcome.segment_puts`), so a segment deleted since is still
known.  With them the other rules see a spill as a job staying where it is and
a load as nothing at all: a job that goes into a segment and never comes back
is lost (NO_LOSS), one that comes back twice is in two places (ONE_PLACE), and
a claim that passes over a spilled job waiting before it is out of order
(PRIORITY_ORDER).

A reference set aside (its object missing or failing its check) keeps its
jobs: they count as present (``live_spilled`` includes them: neither lost nor
in two places) but not as waiting in claim order (``Chain.aside``; a claim
may pass them).  The sim's store never damages a segment object, so a
reference set aside over an intact object is a finding too.
"""

from __future__ import annotations

import hashlib
from collections.abc import Mapping

from osqueue.errors import CorruptDocument
from osqueue.state import SEGMENT_PREFIX, SegmentRef, StoredJob, decode_segment
from osqueue.state.cold_delayed import DELAYED_PREFIX
from osqueue.state.segment_codec import SegmentLines, make_ref
from sim.findings import Chain, Findings, all_refs, cold_keys
from sim.history import Outcome, Rule

#: the ref's fields an object fixes when it is written (the others move with loads and cancels)
_FIXED = (
    "queue",
    "priority",
    "first_seq",
    "last_seq",
    "count",
    "size_bytes",
    "sha256",
    "min_id",
    "max_id",
)


def decode_objects(outcome: Outcome, f: Findings) -> dict[str, list[StoredJob]]:
    """Every segment object written, decoded (one that does not decode is a finding)."""
    out: dict[str, list[StoredJob]] = {}
    for key, (_, data) in sorted(outcome.segment_puts.items()):
        if not key.startswith((SEGMENT_PREFIX, DELAYED_PREFIX, "dead/")):  # (dead: sim.dead_rules)
            continue  # waiting children, the sealed record: sim.waiting_rules
        try:
            if key.startswith(DELAYED_PREFIX):  # an object of delayed jobs
                lines = SegmentLines.parse(data, key, delayed=True)
                out[key] = lines.jobs(0, len(lines))
                continue
            out[key] = decode_segment(data, key)[1]
        except CorruptDocument as exc:
            f.add(Rule.SEGMENT_WRITTEN, f"segment {key} does not decode: {exc}")
    for key in sorted(set(outcome.segment_rewrites)):
        f.add(Rule.SEGMENT_WRITTEN, f"segment {key} was written twice with different bytes")
    f.checked["segment objects"] += len(out)
    return out


def check_segments(
    chain: Chain,
    indices: list[int],
    objects: Mapping[str, list[StoredJob]],
    outcome: Outcome,
    f: Findings,
) -> None:
    """SEGMENT_WRITTEN, SEGMENT_DELETED_UNREFERENCED and ONE_PLACE (``indices``: each
    version's position among the writes that landed)."""
    _check_written(chain, indices, objects, outcome, f)
    _check_deletes(chain, indices, outcome, f)
    _check_one_place(chain, objects, f)


def _check_written(
    chain: Chain,
    indices: list[int],
    objects: Mapping[str, list[StoredJob]],
    outcome: Outcome,
    f: Findings,
) -> None:
    told: set[str] = set()
    for doc, i in zip(chain.docs, indices, strict=True):
        for ref in all_refs(doc):
            f.checked["segment references"] += 1
            if ref.key in told:
                continue
            problem = _ref_problem(ref, i, objects, outcome)
            if problem is None and ref.key in doc.segments.aside:
                problem = "is set aside, but the store never damaged its object"
            if problem is not None:
                told.add(ref.key)
                f.add(Rule.SEGMENT_WRITTEN, f"version {doc.version}: segment {ref.key} {problem}")


def _ref_problem(
    ref: SegmentRef, index: int, objects: Mapping[str, list[StoredJob]], outcome: Outcome
) -> str | None:
    put = outcome.segment_puts.get(ref.key)
    if put is None:
        return "was never written"
    if put[0] > index:
        return f"was written after {put[0]} versions had landed, not before the one naming it"
    jobs = objects.get(ref.key)
    if jobs is None:
        return "does not decode"
    expected = make_ref(ref.key, jobs, len(put[1]), hashlib.sha256(put[1]).hexdigest())
    wrong = [name for name in _FIXED if getattr(ref, name) != getattr(expected, name)]
    if wrong:
        return f"is not what its reference says ({', '.join(wrong)})"
    if not 0 <= ref.loaded < ref.count:
        return f"has loaded {ref.loaded} of {ref.count} jobs and is still referenced"
    rest = jobs[ref.loaded :]
    ids = {job.id for job in rest}
    if ref.next_seq != rest[0].seq or ref.next_created_at != rest[0].created_at:
        return f"says its next job is seq {ref.next_seq}, but it is {rest[0].seq}"
    if not set(ref.cancelled) <= ids:
        return "lists as cancelled a job it does not hold unloaded"
    keyed = {j.id: j.key for j in rest if j.key is not None and j.id not in ref.cancelled}
    if dict(ref.keyed) != keyed:
        return f"says its keyed jobs are {dict(ref.keyed)}, not {keyed}"
    if set(ref.payload_refs) != {j.payload_ref for j in rest if j.payload_ref is not None}:
        return "names payload objects other than those of its jobs not loaded yet"
    return None


def _check_deletes(chain: Chain, indices: list[int], outcome: Outcome, f: Findings) -> None:
    """A delete after ``n`` versions landed: the version that landed as write
    ``n - 1`` and every later one must not name the key (``indices``: each
    decoded version's position among the writes that landed)."""
    if not outcome.segment_deletes:
        return
    last_named: dict[str, int] = {}  # key -> the last write that landed naming it
    for doc, i in zip(chain.docs, indices, strict=True):
        for key in cold_keys(doc):
            last_named[key] = i
    f.checked["segment deletes"] += len(outcome.segment_deletes)
    told: set[str] = set()
    for n, key in outcome.segment_deletes:
        named = last_named.get(key)
        if named is not None and named >= n - 1 and key not in told:
            told.add(key)
            f.add(
                Rule.SEGMENT_DELETED_UNREFERENCED,
                f"segment {key} was deleted after {n} versions had landed, but the version "
                f"that landed as write #{named} names it",
            )


def _check_one_place(chain: Chain, objects: Mapping[str, list[StoredJob]], f: Findings) -> None:
    told: set[str] = set()
    for doc in chain.docs:
        where: dict[str, str] = {}
        for ref in [*all_refs(doc), *doc.delayed]:
            jobs = objects.get(ref.key)
            if jobs is None:
                continue
            cancelled = set(ref.cancelled)
            for job in jobs[ref.loaded :]:
                if job.id in cancelled or job.id in told:
                    continue
                place = where.setdefault(job.id, ref.key)
                if job.id in doc.jobs or place != ref.key:
                    told.add(job.id)
                    other = "the document" if job.id in doc.jobs else place
                    f.add(
                        Rule.ONE_PLACE,
                        f"version {doc.version}: job {job.id} is in segment {ref.key} and in "
                        f"{other}",
                    )
