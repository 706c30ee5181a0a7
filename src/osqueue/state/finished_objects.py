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

What stays in the document: entries the pure transitions may ask about.
"Did parent X finish" is asked by a push naming parents, without I/O; so
while dependencies are in use (a push named parents within
``dependency_window_s``: ``Document.dependencies_at``) nothing is sealed,
and a seal planned before such a push fails alone (``Conflict``).  Entries
that ended ``dead`` or ``cancelled`` stay too (a dead job can be retried,
which drops its entry).
"""

from __future__ import annotations

import hashlib
from collections.abc import Callable, Sequence
from typing import Any

import msgspec

from osqueue.errors import Conflict, CorruptDocument, InvalidInput
from osqueue.state.document import Document
from osqueue.state.finished_jobs import FinishedJob
from osqueue.state.finished_refs import FINISHED_PREFIX, FinishedRef
from osqueue.state.ops import Counted, OpResult, Policy, SealFinished
from osqueue.state.segment_codec import check_segment
from osqueue.storage.keys import check_key

_encode = msgspec.json.Encoder().encode
_entry_decoder = msgspec.json.Decoder(FinishedJob)

# --------------------------------------------------------------------------- plans and objects


def deps_in_use(doc: Document, now: float, policy: Policy) -> bool:
    """A push named parents within ``dependency_window_s``: keep the record hot."""
    used = doc.dependencies_at
    return used is not None and now - used.timestamp() <= policy.dependency_window_s


def plan_seal(doc: Document, now: float, policy: Policy) -> list[FinishedJob]:
    """The ``done`` entries to seal now (oldest first), once ``finished_seal_above_entries``
    of them sit in the document; at most ``finished_object_entries``."""
    above = policy.finished_seal_above_entries
    record = doc.finished
    if above is None or len(record) < above or deps_in_use(doc, now, policy):
        return []
    out = [e for e in record if e.status == "done" and now < e.expires_at]
    if len(out) < above:
        return []
    return out[: policy.finished_object_entries]


def build(entries: Sequence[FinishedJob], unique: str) -> tuple[SealFinished, bytes]:
    """The object holding ``entries`` (one per line) and the op referencing it."""
    data = b"".join(_encode(e) + b"\n" for e in entries)
    key = check_key(f"{FINISHED_PREFIX}{unique}.jsonl", "key")
    return SealFinished(make_ref(key, entries, data), tuple(entries)), data


def make_ref(key: str, entries: Sequence[FinishedJob], data: bytes) -> FinishedRef:
    ids = [e.id for e in entries]
    return FinishedRef(
        key=key,
        count=len(entries),
        size_bytes=len(data),
        sha256=hashlib.sha256(data).hexdigest(),
        min_id=min(ids),
        max_id=max(ids),
        expires_at=max(e.expires_at for e in entries),
        result_refs=tuple(e.result.ref for e in entries if e.result and e.result.ref),
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
    if deps_in_use(doc, now, policy):
        raise Conflict("a push named parents since the seal was planned: the record stays")
    record = doc.finished
    for entry in entries:
        if entry.status != "done" or record.get(entry.id) != entry:
            raise Conflict(f"the entry of job {entry.id} changed since the seal's snapshot")
    for entry in entries:
        record.remove(entry.id)
    sealed.add(ref)
    return Counted(len(entries))


def expire(doc: Document, now: float) -> list[str]:
    """Drop the references whose every entry expired; returns their keys."""
    sealed = doc.finished.sealed
    gone = [r.key for r in sealed if r.expires_at < now]
    for key in gone:
        sealed.remove(key)
    return gone


#: The transitions' entry for the op (``tx``: the transitions' ``_Tx``).
DISPATCH: dict[type[Any], Callable[[Any, Any], OpResult]] = {
    SealFinished: lambda tx, op: seal(tx.doc, op, tx.now, tx.policy),
}
