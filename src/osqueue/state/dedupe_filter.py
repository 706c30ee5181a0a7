"""Dedupe of cold jobs: a per-object filter of ids instead of a tombstone per job.

A job pushed with an id the caller chose (``dedupe``: every remote push, a
Spark write's rows) may be pushed again, and the retry must be applied once.
While the job is in the document its id answers that; once it leaves, a
29-byte tombstone did, for ``dedupe_window_s``.  A job that moves to a cold
object (a segment) leaves the document too, so a backlog of 5,000,000 such
jobs cost 145 MB of tombstones.  Instead, the reference to the object carries
a **filter** of the ids of its dedupe jobs (:func:`build`: a Bloom filter,
:data:`BITS_PER_ID` bits an id, about 1.7 bytes in the document, with a
false-positive rate near 1%) and the newest of their creation times
(``dedupe_created``): the filter answers until ``dedupe_window_s`` after it.

A push of an id the document does not hold asks :func:`unconfirmed`: the keys
of the objects whose filter may hold the id (and whose id bounds admit it).
If there are any, the push fails with :class:`ReadToConfirm` naming them, and
nothing changes; the broker reads those objects (checked, through its cache),
and answers the push as a retry if one holds the id at a position not loaded
yet, or submits it again with ``absent_from`` naming the objects it read. So
a false positive costs one read and never refuses a new job, and a retried
push of a cold job is applied once.  A reference set aside is asked too (its
object cannot be read: the broker then answers the push as a retry, the safe
side).  Any kind of cold object can carry a filter: it is a tuple of filter
strings (a merge of objects concatenates them) and a time.  Every kind does:
ready segments (``doc.segments``), delayed objects (``doc.delayed``), dead
segments (``doc.dead``) and objects of waiting children (``doc.waiting_cold``)
each keep their references with a filter in ``filtered`` (:func:`hold_filter`),
and a push asks all four (:func:`check`, :func:`holders`).
"""

from __future__ import annotations

import base64
import hashlib
from collections.abc import Iterable, Sequence
from datetime import datetime
from functools import lru_cache
from itertools import chain
from typing import Protocol

import msgspec

from osqueue.errors import Conflict
from osqueue.state.filter_refs import Filtered as Filtered
from osqueue.state.filter_refs import FilterHolder as FilterHolder
from osqueue.state.filter_refs import hold_filter as hold_filter
from osqueue.state.model import StoredJob
from osqueue.state.ops import Policy, Push

#: filter bits per id (with HASHES hashes: about 1% false positives)
BITS_PER_ID = 10
HASHES = 7


class ColdKinds(Protocol):
    """The kinds of cold object whose references carry filters (a ``Document``)."""

    @property
    def segments(self) -> FilterHolder: ...
    @property
    def delayed(self) -> FilterHolder: ...
    @property
    def dead(self) -> FilterHolder: ...
    @property
    def waiting_cold(self) -> FilterHolder: ...


def holders(doc: ColdKinds) -> tuple[FilterHolder, ...]:
    """Every kind's references that may carry filters: ready segments, delayed
    objects, dead segments, objects of waiting children."""
    return (doc.segments, doc.delayed, doc.dead, doc.waiting_cold)


class ReadToConfirm(Conflict):
    """A push's id may be held by the cold objects ``keys``: the broker reads them
    and answers, or sends the push again with ``absent_from`` (never seen by a
    caller).  With ``parents``: those parents the push names may have finished
    in the sealed objects ``keys`` of the record of finished jobs; the broker
    reads them and sends the push again with what it found (``sealed_parents``)."""

    def __init__(self, job_id: str, keys: Sequence[str], parents: Sequence[str] = ()) -> None:
        what = f"parents {', '.join(parents)} of {job_id}" if parents else f"id {job_id}"
        super().__init__(f"{what} may be held by a cold object: read {', '.join(keys)}")
        self.job_id = job_id
        self.keys = tuple(keys)
        self.parents = tuple(parents)


def _hashes(job_id: str) -> tuple[int, int]:
    digest = hashlib.blake2b(job_id.encode(), digest_size=16).digest()
    return int.from_bytes(digest[:8], "little"), int.from_bytes(digest[8:], "little") | 1


def _positions(job_id: str, bits: int) -> list[int]:
    h1, h2 = _hashes(job_id)
    return [(h1 + i * h2) % bits for i in range(HASHES)]


def build(ids: Iterable[str]) -> str:
    """The filter of ``ids`` (base64 of its bits; "" for none)."""
    ids = list(ids)
    if not ids:
        return ""
    bits = max(64, BITS_PER_ID * len(ids))
    bits += -bits % 8
    field = bytearray(bits // 8)
    for job_id in ids:
        for p in _positions(job_id, bits):
            field[p >> 3] |= 1 << (p & 7)
    return base64.b64encode(bytes(field)).decode("ascii")


@lru_cache(maxsize=4096)
def _bits(encoded: str) -> bytes:
    return base64.b64decode(encoded)


def may_hold(encoded: str, job_id: str, hashes: tuple[int, int] | None = None) -> bool:
    """The filter ``encoded`` may hold ``job_id`` (False: it certainly does not);
    ``hashes``: the id's, if the caller has them."""
    if not encoded:
        return False
    field = _bits(encoded)
    bits = len(field) * 8
    h1, h2 = hashes or _hashes(job_id)
    for i in range(HASHES):
        p = (h1 + i * h2) % bits
        if not field[p >> 3] >> (p & 7) & 1:
            return False
    return True


def ref_may_hold(
    ref: Filtered, job_id: str, since: float, hashes: tuple[int, int] | None = None
) -> bool:
    """``ref``'s object may hold ``job_id`` as a dedupe job created at ``since`` or later."""
    created = ref.dedupe_created
    return (
        created is not None
        and created.timestamp() >= since
        and ref.min_id <= job_id <= ref.max_id
        and any(may_hold(f, job_id, hashes) for f in ref.id_filter)
    )


def unconfirmed(
    refs: Iterable[Filtered], job_id: str, since: float, absent_from: Sequence[str]
) -> list[str]:
    """The keys of ``refs`` whose filter may hold ``job_id`` (created at ``since`` or
    later), but those the broker read and found without it (``absent_from``)."""
    hashes = _hashes(job_id)
    return [
        ref.key
        for ref in refs
        if ref.id_filter and ref.key not in absent_from and ref_may_hold(ref, job_id, since, hashes)
    ]


def newest(times: Iterable[datetime | None]) -> datetime | None:
    """The latest of ``times`` (None if none is set)."""
    known = [t for t in times if t is not None]
    return max(known) if known else None


def check(doc: ColdKinds, op: Push, now: float, policy: Policy) -> None:
    """For a push of an id the document does not hold: raise :class:`ReadToConfirm`
    if a cold object's filter (of any kind: :func:`holders`) may hold it and the
    broker has not read that object (``op.absent_from``).  A push of a made-up
    id (no ``dedupe``) pays one check, one with an id a look at each kind."""
    if op.dedupe and (
        doc.segments.filtered
        or doc.delayed.filtered
        or doc.dead.filtered
        or doc.waiting_cold.filtered
    ):
        since = now - policy.dedupe_window_s
        refs = chain[Filtered].from_iterable(h.filtered.values() for h in holders(doc))
        keys = unconfirmed(refs, op.id, since, op.absent_from)
        if keys:
            raise ReadToConfirm(op.id, keys)


def prune(holder: FilterHolder, cutoff: float) -> None:
    """Drop the filters whose newest dedupe job was created before ``cutoff`` (the
    dedupe window is over for all of their jobs), so they cost the document
    nothing more; set-aside references keep theirs."""
    floor: float | None = None
    for key, ref in list(holder.filtered.items()):
        created = ref.dedupe_created
        if created is None or holder.find(key) is None:
            continue
        at = created.timestamp()
        if at < cutoff:
            holder.replace(msgspec.structs.replace(ref, id_filter=(), dedupe_created=None))
        else:
            floor = at if floor is None else min(floor, at)
    holder.filter_floor = floor


class Tombstones(Protocol):
    """Where a job that left keeps its dedupe tombstone (a ``Document``)."""

    def add_tombstone(self, job_id: str, created_at: datetime) -> None: ...


def leave_tombstone(doc: Tombstones, job: StoredJob, now: float, policy: Policy) -> None:
    """A cold job leaves for good (cancelled, skipped by its load; purged from a
    dead segment): a retried push of it (a ``dedupe`` job created within
    ``dedupe_window_s``) is recognised by a tombstone from now on (its object's
    filter answered until then)."""
    if job.dedupe and job.created_at.timestamp() >= now - policy.dedupe_window_s:
        doc.add_tombstone(job.id, job.created_at)
