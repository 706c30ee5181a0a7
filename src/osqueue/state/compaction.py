"""Compaction: adjacent small segments of a stream merged into one object.

A backlog built up slowly is spilled ``spill_above_jobs`` at a time, so it
sits in many small objects, and the document carries a reference (about 310
bytes) for each: 10,000,000 jobs in 1,000-job objects are 10,000 references
written by every commit.  The broker merges them (the I/O is its own, between
commits): it reads adjacent references' objects, writes one object holding
their lines in order (:func:`~osqueue.state.segment_codec.join_segments`),
and then submits :class:`~osqueue.state.ops.Compact`, which swaps the
references for the merged one in one commit.

* What is compacted (:func:`plan_compactions`): per stream, runs of at least
  two adjacent references past the first two (the first is being loaded, the
  second read ahead), none loaded from yet, each of at most a tenth of
  ``compact_jobs`` jobs (:data:`PART_SHARE`), together at most
  ``compact_jobs``, and at least half that (or :data:`MIN_PARTS` parts).  So
  a merged object is no part again (a job is rewritten once), and the large
  objects of a backlog loaded fast are never touched.
* The merged reference says exactly what its parts said
  (:func:`merged_ref`): the same seqs, jobs, cancelled ids (skipped when
  loaded, as before), idempotency keys and payload objects; claim order is
  the same, since the object's lines are the parts' lines in seq order.
* ``Compact`` applies only if every part is still referenced, unchanged (no
  load, no cancel since the snapshot) and adjacent in its stream, and the
  new reference is their merge; otherwise it fails alone with ``Conflict``
  and the new object is deleted.  The parts' keys go to
  ``Transition.dropped_segments``: the broker deletes them after the commit.
"""

from __future__ import annotations

import hashlib
from collections.abc import Collection, Sequence
from dataclasses import dataclass

from osqueue.errors import Conflict, InvalidInput
from osqueue.state.dedupe_filter import newest
from osqueue.state.document import Document
from osqueue.state.model import SegmentRef
from osqueue.state.ops import Compact, Counted, Policy
from osqueue.state.segment_codec import SEGMENT_PREFIX, SegmentLines, join_segments, segment_key
from osqueue.state.segments import Stream
from osqueue.storage.keys import check_key

#: references of a stream left alone at its start: the one being loaded, the one read ahead
SKIP_FIRST = 2
#: a part holds at most 1/PART_SHARE of ``compact_jobs``: merging is for the many
#: small objects of a trickle, and a larger object is rewritten to save a reference
#: of 310 bytes at the cost of reading and writing all its jobs (a backlog loaded
#: fast sits in objects of 10,000 jobs and more: never touched)
PART_SHARE = 10
#: a run is merged once it holds half of ``compact_jobs``, or this many parts: so
#: the merged object is no part again (each job is rewritten once), and a few
#: small objects wait for more rather than being merged again and again
MIN_PARTS = 16


@dataclass(frozen=True, slots=True)
class CompactPlan:
    """Adjacent references of one stream to merge (a snapshot)."""

    stream: Stream
    refs: tuple[SegmentRef, ...]

    def build(self, objects: Sequence[SegmentLines], unique: str) -> tuple[Compact, bytes]:
        """The ``Compact`` op to submit once ``data`` is stored under ``op.ref.key``
        (``objects``: the parts' objects, read and checked, in order)."""
        data = join_segments(objects)
        first = self.refs[0]
        key = segment_key(first.queue, first.priority, first.first_seq, unique)
        digest = hashlib.sha256(data).hexdigest()
        return Compact(self.refs, merged_ref(self.refs, key, len(data), digest)), data


def plan_compactions(
    doc: Document, policy: Policy, exclude: Collection[Stream] = (), limit: int = 1
) -> list[CompactPlan]:
    """Up to ``limit`` runs of adjacent small references to merge (one per stream at
    most; ``exclude``: streams not to plan now)."""
    target = policy.compact_jobs
    if target is None:
        return []
    plans: list[CompactPlan] = []
    for stream, refs in doc.segments.streams.items():
        if len(plans) >= limit:
            break
        if len(refs) < SKIP_FIRST + 2 or stream in exclude:
            continue
        run = _first_run(refs[SKIP_FIRST:], target)
        if run:
            plans.append(CompactPlan(stream, tuple(run)))
    return plans


def _first_run(refs: Sequence[SegmentRef], target: int) -> list[SegmentRef]:
    """The first run of at least two adjacent small references (each at most
    ``target / PART_SHARE`` jobs, none loaded from) holding at most ``target``
    jobs together, and at least half that or :data:`MIN_PARTS` references."""
    run: list[SegmentRef] = []
    total = 0
    for ref in refs:
        small = ref.loaded == 0 and PART_SHARE * ref.count <= target
        if small and total + ref.count <= target:
            run.append(ref)
            total += ref.count
            continue
        if _worth(run, total, target):
            return run
        run, total = ([ref], ref.count) if small else ([], 0)
    return run if _worth(run, total, target) else []


def _worth(run: list[SegmentRef], total: int, target: int) -> bool:
    return len(run) >= 2 and (2 * total >= target or len(run) >= MIN_PARTS)


def merged_ref(refs: Sequence[SegmentRef], key: str, size_bytes: int, sha256: str) -> SegmentRef:
    """The reference to object ``key`` (``size_bytes``, hex ``sha256``) holding the
    jobs of ``refs`` (adjacent, none loaded from), in order: what they said, at once."""
    first, last = refs[0], refs[-1]
    keyed: dict[str, str] = {}
    for ref in refs:
        keyed.update(ref.keyed)
    return SegmentRef(
        key=key,
        queue=first.queue,
        priority=first.priority,
        first_seq=first.first_seq,
        last_seq=last.last_seq,
        count=sum(ref.count for ref in refs),
        size_bytes=size_bytes,
        sha256=sha256,
        next_seq=first.next_seq,
        next_created_at=first.next_created_at,
        min_id=min(ref.min_id for ref in refs),
        max_id=max(ref.max_id for ref in refs),
        cancelled=tuple(i for ref in refs for i in ref.cancelled),
        keyed=keyed,
        payload_refs=tuple(p for ref in refs for p in ref.payload_refs),
        id_filter=tuple(f for ref in refs for f in ref.id_filter),
        dedupe_created=newest(ref.dedupe_created for ref in refs),
    )


def compact(doc: Document, op: Compact, dropped: list[str]) -> Counted:
    """Apply ``op``: swap its references for the merged one (``dropped`` gets the
    parts' keys: their objects go after the commit).  Returns the parts merged."""
    refs, ref = op.refs, op.ref
    if not isinstance(refs, tuple | list) or len(refs) < 2:
        raise InvalidInput("a compaction merges at least two segments", field="refs")
    for i, part in enumerate(refs):
        if not isinstance(part, SegmentRef):
            raise InvalidInput(
                f"must be a SegmentRef, not {type(part).__name__}", field=f"refs[{i}]"
            )
        if part.loaded:
            raise InvalidInput("a segment loaded from is not compacted", field=f"refs[{i}].loaded")
    if not isinstance(ref, SegmentRef):
        raise InvalidInput(f"must be a SegmentRef, not {type(ref).__name__}", field="ref")
    key = check_key(ref.key, "ref.key")
    if not key.startswith(SEGMENT_PREFIX):
        raise InvalidInput(f"{key!r} is not under {SEGMENT_PREFIX}", field="ref.key")
    expected = merged_ref(refs, key, ref.size_bytes, ref.sha256)
    if ref != expected:
        wrong = next(n for n in ref.__struct_fields__ if getattr(ref, n) != getattr(expected, n))
        raise InvalidInput(
            f"{getattr(ref, wrong)!r} is not the merge of the segments "
            f"({getattr(expected, wrong)!r})",
            field=f"ref.{wrong}",
        )
    segments = doc.segments
    if segments.holds(key):
        raise Conflict(f"segment {key} is referenced already")
    stream = segments.streams.get(refs[0].stream, [])
    at = next((i for i, r in enumerate(stream) if r.key == refs[0].key), None)
    if at is None or list(stream[at : at + len(refs)]) != list(refs):
        raise Conflict("the segments changed since the compaction's snapshot")
    segments.swap(list(refs), ref)
    dropped.extend(part.key for part in refs)
    return Counted(len(refs))


__all__ = [
    "MIN_PARTS",
    "PART_SHARE",
    "SKIP_FIRST",
    "Compact",
    "CompactPlan",
    "compact",
    "merged_ref",
    "plan_compactions",
]
