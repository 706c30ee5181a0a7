"""The record of finished jobs, sealed into objects written once (``finished/``).

Every entry of the record (:mod:`osqueue.state.finished_jobs`) sat in the
document, so each commit paid for every result kept.  Now the broker *seals*
the record's ``done`` entries into immutable objects, written whole before the
``SealFinished`` op that references them commits (the discipline of segment
objects: a stale op fails alone, its object is the orphan sweep's; a
takeover reads no object).  The document keeps per object only what finds it
(:class:`FinishedRef`: key, size and SHA-256, entry count, id bounds, the
latest expiry, and the result objects its entries reference, so the result
sweep keeps them).  ``result(job_id)`` for an id the document does not know
reads the objects whose id bounds hold it (the broker caches them).  A
reference whose entries have all expired leaves the document in the sweep
that rides every commit; its object then is an orphan and is deleted by the
orphan sweep.

Exactly once: an entry is in the document's record or in exactly one
referenced object, because the commit that references the object is the one
that removes the entries (and only if each is still there, unchanged).  A
crash before that commit leaves an object nothing names (swept); after it,
the entries are in the object only.

What stays in the document: entries that ended ``dead`` or ``cancelled`` (a
dead job can be retried, which drops its entry).  A ``done`` entry is sealed
whether or not dependencies are in use: a push naming a parent that is
neither live nor in the document's record asks the sealed objects
(:func:`parent_keys`: those whose id bounds hold it, unexpired) and, if any
may, fails alone with ``ReadToConfirm`` naming the parents and the objects.
The broker reads them between commits (through its cache) and sends the
push again with what it found (``Push.sealed_parents``: how the parent
finished, or not there), so the transition stays pure and a parent sealed
before dependencies came into use is found too.

The entries kept only for such children (``held``: no result, no TTL of
their own; every job finishing while dependencies are in use gets one for
``dependency_window_s``) are sealed into objects of their own, bounded like
the document's record: past ``max_finished_jobs`` held entries in objects,
the oldest held objects are dropped (counted in ``finished_evicted``), so
the references stay a handful however fast jobs finish.

The references carry no filter of their ids (the per-object Bloom filter of
:mod:`osqueue.state.dedupe_filter` was tried: building it cost 7 to 10 µs of
the broker's CPU per finishing job in Python, near a tenth of a closed
loop's whole cost per job, paid by every job while dependencies are in use,
to save reads that only a push naming a parent gone from the document
makes; held objects are few and the broker caches the objects it reads).
"""

from __future__ import annotations

import hashlib
from collections.abc import Callable, Sequence
from typing import Any

import msgspec

from osqueue.api import FinishedStatus
from osqueue.errors import Conflict, CorruptDocument, InvalidInput
from osqueue.state.document import Document
from osqueue.state.finished_jobs import FinishedJob
from osqueue.state.finished_refs import FINISHED_PREFIX, FinishedRef
from osqueue.state.ops import Counted, OpResult, ParentRead, Policy, SealFinished
from osqueue.state.segment_codec import check_segment
from osqueue.storage.keys import check_key

_encode = msgspec.json.Encoder().encode
_entry_decoder = msgspec.json.Decoder(FinishedJob)

# --------------------------------------------------------------------------- plans and objects


def plan_seal(doc: Document, now: float, policy: Policy) -> list[FinishedJob]:
    """The ``done`` entries to seal now (oldest first), once ``finished_seal_above_entries``
    of them sit in the document; at most ``finished_object_entries``, all
    ``held`` or none (held objects are bounded apart, and carry a filter)."""
    above = policy.finished_seal_above_entries
    record = doc.finished
    if above is None or len(record) < above:
        return []
    out = [e for e in record if e.status == "done" and now < e.expires_at]
    if len(out) < above:
        return []
    held = [e for e in out if e.held]
    kept = [e for e in out if not e.held]
    if not held or not kept:
        return out[: policy.finished_object_entries]
    # the kind with more entries goes first; the other once it has enough
    for group in sorted((held, kept), key=len, reverse=True):
        if len(group) >= above:
            return group[: policy.finished_object_entries]
    return []


def build(
    entries: Sequence[FinishedJob], unique: str, lines: Sequence[bytes] | None = None
) -> tuple[SealFinished, bytes]:
    """The object holding ``entries`` (one per line) and the op referencing it
    (``lines``: the record's encodings of them, :meth:`FinishedRecord.encoded`)."""
    encoded = lines if lines is not None else [_encode(e) for e in entries]
    data = b"\n".join(encoded) + b"\n"
    key = check_key(f"{FINISHED_PREFIX}{unique}.jsonl", "key")
    return SealFinished(make_ref(key, entries, data), tuple(entries)), data


def make_ref(key: str, entries: Sequence[FinishedJob], data: bytes) -> FinishedRef:
    ids = [e.id for e in entries]
    held = all(e.held for e in entries)
    return FinishedRef(
        key=key,
        count=len(entries),
        size_bytes=len(data),
        sha256=hashlib.sha256(data).hexdigest(),
        min_id=min(ids),
        max_id=max(ids),
        expires_at=max(e.expires_at for e in entries),
        result_refs=tuple(e.result.ref for e in entries if e.result and e.result.ref),
        held=held,
    )


def read(ref: FinishedRef, data: bytes) -> dict[str, FinishedJob]:
    """``data``, read for ``ref``: checked (size, SHA-256) and decoded, by id."""
    check_segment(ref, data)
    out: dict[str, FinishedJob] = {}
    for i, line in enumerate(data.splitlines()):
        try:
            entry = _entry_decoder.decode(line)
        except msgspec.MsgspecError as exc:
            raise CorruptDocument(f"{ref.key} line {i + 1}: {exc}", path="$") from exc
        out[entry.id] = entry
    if len(out) != ref.count:
        raise CorruptDocument(f"{ref.key} holds {len(out)} entries, not {ref.count}", path="$")
    return out


# --------------------------------------------------------------------------- transitions


def seal(doc: Document, op: SealFinished, now: float, policy: Policy) -> Counted:
    ref, entries = op.ref, op.entries
    if not isinstance(ref, FinishedRef) or not ref.key.startswith(FINISHED_PREFIX):
        raise InvalidInput(f"must reference an object under {FINISHED_PREFIX}", field="ref")
    if not entries or ref.count != len(entries):
        raise InvalidInput(f"the object holds {ref.count} entries", field="entries")
    sealed = doc.finished.sealed
    if sealed.holds(ref.key):
        raise Conflict(f"object {ref.key} is referenced already")
    record = doc.finished
    for entry in entries:
        held = record.get(entry.id)  # (the broker's op holds the record's own entries)
        if entry.status != "done" or (held is not entry and held != entry):
            raise Conflict(f"the entry of job {entry.id} changed since the seal's snapshot")
    for entry in entries:
        record.remove(entry.id)
    sealed.add(ref)
    return Counted(len(entries))


def expire(doc: Document, now: float, policy: Policy) -> int:
    """Drop the references whose every entry expired, and the oldest held ones past
    ``max_finished_jobs`` held entries; returns how many entries that evicted
    (held ones dropped before they expired)."""
    sealed = doc.finished.sealed
    soonest = sealed.soonest()
    if soonest is not None and soonest < now:
        for key in [r.key for r in sealed if r.expires_at < now]:
            sealed.remove(key)
    cap = policy.max_finished_jobs
    evicted = 0
    while sealed.held_entries > cap:
        oldest = next(r for r in sealed if r.held)
        if oldest.count == sealed.held_entries:  # the newest one stays, whatever its size
            break
        sealed.remove(oldest.key)
        evicted += oldest.count
    return evicted


def parent_keys(
    doc: Document, parent: str, now: float, read: Sequence[ParentRead]
) -> tuple[FinishedStatus | None, list[str]]:
    """How ``parent`` (neither live nor in the document's record) finished as the
    broker read it in sealed objects (``read``), or the sealed objects still to
    read that may hold it: unexpired, their id bounds holding it.  ``(None, [])``:
    no sealed object knows it."""
    sealed = doc.finished.sealed
    done: tuple[str, ...] = ()
    for seen in read:
        if seen.id == parent:
            if seen.status is not None:
                return seen.status, []
            done = seen.keys
    if not sealed:
        return None, []
    keys = [r.key for r in sealed.candidates(parent, now) if r.key not in done]
    return None, keys


#: The transitions' entry for the op (``tx``: the transitions' ``_Tx``).
DISPATCH: dict[type[Any], Callable[[Any, Any], OpResult]] = {
    SealFinished: lambda tx, op: seal(tx.doc, op, tx.now, tx.policy),
}
