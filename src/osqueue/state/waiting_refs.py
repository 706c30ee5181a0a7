"""The document's references to waiting children kept in objects (``waiting/``).

A job pushed with ``after=[...]`` waits in the document while its parents run.
Many waiting jobs (a fan-in of 100,000 children on one parent, a child of
10,000 parents) would make every commit rewrite them, so the broker moves
them into immutable objects (:mod:`osqueue.state.cold_waiting` decides,
:mod:`osqueue.broker.cold.waiting` does the I/O).  One object holds waiting
jobs of one queue that all wait for the *same* parents (the same ``after``), so its
reference says for all of them at once which parents are still pending: a
finishing parent touches the references that name it (``by_parent``, an
index built from the references, not stored), never a job; and a child of
10,000 parents is one job in one object, named by 10,000 index entries.

The reference (:class:`WaitingRef`) carries what the document must answer
without reading the object: the parents still pending (``after``) and those
that ended dead or cancelled (``failed``), the count per queue (status
counts; one queue per object), the id bounds (``maybe_cold``: is an id a live cold child), the ids
cancelled while cold, and the payload objects its jobs use (the payload sweep
keeps them).  Once ``after`` is empty, or a parent failed, the broker loads
the object: its jobs come back as queued (or cancelled) in that commit.

Pure values; no I/O.
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from datetime import datetime
from typing import Annotated

import msgspec

from osqueue.errors import CorruptDocument
from osqueue.state.filter_refs import hold_filter

#: Objects of waiting children live under this prefix.
WAITING_PREFIX = "waiting/"

_encode = msgspec.json.Encoder().encode


class WaitingRef(msgspec.Struct, frozen=True, omit_defaults=True, gc=False):
    """The document's reference to one object of waiting children (JSON lines in
    the segment format: :func:`osqueue.state.segment_codec.encode_segment`)."""

    #: the object's key (``waiting/<unique>.jsonl``)
    key: str
    #: jobs in the object
    count: int
    #: the object's size and the hex SHA-256 of its bytes, checked by every reader
    size_bytes: int = msgspec.field(name="bytes")
    sha256: Annotated[str, msgspec.Meta(pattern="^[0-9a-f]{64}$")]
    #: lexicographic bounds of the object's ids
    min_id: str
    max_id: str
    #: the queue of every job in the object
    queue: str
    #: the parents every job of the object still waits for
    after: tuple[str, ...] = ()
    #: parents that ended dead or cancelled since the spill (the jobs' own
    #: ``on_parent_failure`` decides on load)
    failed: tuple[str, ...] = ()
    #: ids cancelled while in the object (skipped on load)
    cancelled: tuple[str, ...] = ()
    #: payload objects of the jobs (the payload sweep keeps them)
    payload_refs: tuple[str, ...] = ()
    #: bounds of the jobs' seqs and priorities: the claim-order bounds a listing
    #: pages by (None: a reference written before they were recorded)
    min_seq: int | None = None
    max_seq: int | None = None
    min_priority: int | None = None
    max_priority: int | None = None
    #: the filter of its dedupe jobs' ids and the newest of their creation times,
    #: as a ready segment's reference has them (osqueue.state.dedupe_filter): no tombstones
    id_filter: tuple[str, ...] = ()
    dedupe_created: datetime | None = None

    @property
    def due(self) -> bool:
        """Every parent ended, or one failed: the object is to be loaded."""
        return not self.after or bool(self.failed)

    @property
    def live(self) -> int:
        """Jobs in the object not cancelled."""
        return self.count - len(self.cancelled)


class WaitingAside(msgspec.Struct, frozen=True, gc=False):
    """An object's reference set aside (its object missing or failing its check):
    its jobs are neither lost nor loaded until a readmit; the parents that end
    meanwhile are still struck from ``ref.after`` (it stays in ``by_parent``),
    so a readmitted object whose parents all ended is due at once."""

    ref: WaitingRef
    reason: str
    at: datetime


class ColdWaiting:
    """The references of one document, with the index by parent (kept in step)."""

    __slots__ = (
        "_frags",
        "_framed_len",
        "_section",
        "aside",
        "by_parent",
        "due",
        "filter_floor",
        "filtered",
        "payloads",
        "refs",
    )

    def __init__(self, refs: list[WaitingRef] | None = None) -> None:
        #: key -> reference, in the order they were added
        self.refs: dict[str, WaitingRef] = {}
        #: parent id -> keys of the references still waiting for it
        self.by_parent: dict[str, dict[str, None]] = {}
        #: the payload objects the references' jobs use (the payload sweep keeps them)
        self.payloads: set[str] = set()
        self._frags: dict[str, bytes] = {}
        self._section: bytes | None = None
        #: key -> its reference set aside (indexed by parent, its payloads held)
        self.aside: dict[str, WaitingAside] = {}
        #: the keys of the listed references that are due (to load), in order
        self.due: dict[str, None] = {}
        #: the length of :meth:`framed` (None: measure it), asked by every push
        self._framed_len: int | None = None
        #: key -> its reference (listed or set aside) that carries an id filter, and
        #: the oldest of their ``dedupe_created`` (:mod:`osqueue.state.dedupe_filter`)
        self.filtered: dict[str, WaitingRef] = {}
        self.filter_floor: float | None = None
        for ref in refs or ():
            self.add(ref)

    def copy(self) -> ColdWaiting:
        new = ColdWaiting()
        new.refs = dict(self.refs)
        new.by_parent = {p: dict(keys) for p, keys in self.by_parent.items()}
        new.payloads = set(self.payloads)
        new._frags = dict(self._frags)
        new._section = self._section
        new.aside = dict(self.aside)
        new.due = dict(self.due)
        new._framed_len = self._framed_len
        new.filtered = dict(self.filtered)
        new.filter_floor = self.filter_floor
        return new

    def __bool__(self) -> bool:
        return bool(self.refs or self.aside)

    def __iter__(self) -> Iterator[WaitingRef]:
        return iter(self.refs.values())

    def __len__(self) -> int:
        return len(self.refs)

    def __eq__(self, other: object) -> bool:
        if not isinstance(other, ColdWaiting):
            return NotImplemented
        return list(self.refs.items()) == list(other.refs.items()) and self.aside == other.aside

    __hash__ = None  # type: ignore[assignment]

    def __repr__(self) -> str:
        return f"ColdWaiting({len(self.refs)} objects, {self.jobs()} jobs)"

    def holds(self, key: str) -> bool:
        """Object ``key`` is referenced or set aside: never an orphan."""
        return key in self.refs or key in self.aside

    def may_hold(self, job_id: str) -> bool:
        """A live job of an object (set aside or not) may have this id (its id bounds
        hold it)."""
        refs = [*self.refs.values(), *(e.ref for e in self.aside.values())]
        return any(r.min_id <= job_id <= r.max_id and job_id not in r.cancelled for r in refs)

    def find(self, key: str) -> WaitingRef | None:
        """``key``'s reference, listed or set aside."""
        ref = self.refs.get(key)
        if ref is None and key in self.aside:
            return self.aside[key].ref
        return ref

    def set_aside_jobs(self, queue: str) -> int:
        """Live jobs of ``queue`` in objects set aside (counted apart from ``waiting``)."""
        return sum(e.ref.live for e in self.aside.values() if e.ref.queue == queue)

    def set_aside_of(self, queue: str) -> int:
        """How many of ``queue``'s objects are set aside."""
        return sum(1 for e in self.aside.values() if e.ref.queue == queue)

    def jobs(self, queue: str | None = None) -> int:
        """Live cold waiting jobs (of ``queue``, or of all queues)."""
        return sum(r.live for r in self.refs.values() if queue is None or r.queue == queue)

    def section(self) -> bytes:
        """The references' encodings joined by commas (the inside of the JSON list)."""
        if self._section is None:
            self._section = b",".join(self._frags.values())
        return self._section

    def framed(self) -> bytes:
        """The document's ``,"waiting":[...]`` and ``,"waiting_aside":[...]`` sections
        (each empty when there is none)."""
        listed = b',"waiting":[' + self.section() + b"]" if self.refs else b""
        return listed + self._aside_section()

    def framed_bytes(self) -> int:
        """The length of :meth:`framed` (kept until a reference changes: a commit that
        touches none pays nothing for them)."""
        size = self._framed_len
        if size is None:
            listed = len(b',"waiting":[]') + len(self.section()) if self.refs else 0
            size = self._framed_len = listed + len(self._aside_section())
        return size

    def _changed(self, ref: WaitingRef | None = None, key: str = "") -> None:
        """A listed reference changed (``ref``), or left (``key``): the section is
        stale, and the reference is due or not."""
        self._section = None
        self._framed_len = None
        if ref is not None and ref.due:
            self.due[ref.key] = None
        else:
            self.due.pop(ref.key if ref is not None else key, None)

    def _aside_section(self) -> bytes:
        if not self.aside:
            return b""
        entries = (_encode(self.aside[key]) for key in sorted(self.aside))
        return b',"waiting_aside":[' + b",".join(entries) + b"]"

    # -- changes ------------------------------------------------------------------

    def add(self, ref: WaitingRef) -> None:
        self.refs[ref.key] = ref
        self._frags[ref.key] = _encode(ref)
        self._changed(ref)
        self.payloads.update(ref.payload_refs)
        hold_filter(self, ref)
        for parent in ref.after:
            self.by_parent.setdefault(parent, {})[ref.key] = None

    def replace(self, ref: WaitingRef) -> None:
        """Swap in ``ref`` for the reference of the same key, listed or set aside (its
        ``after`` may only shrink)."""
        entry = self.aside.get(ref.key)
        if entry is not None:
            old = entry.ref
            self.aside[ref.key] = msgspec.structs.replace(entry, ref=ref)
            self._framed_len = None
        else:
            old = self.refs[ref.key]
            self.refs[ref.key] = ref
            self._frags[ref.key] = _encode(ref)
            self._changed(ref)
        if ref.key in self.filtered:  # (the filter kept, or dropped by a prune)
            del self.filtered[ref.key]
            hold_filter(self, ref)
        if len(old.after) != len(ref.after):
            kept = set(ref.after)
            for parent in old.after:
                if parent not in kept:
                    self._unindex(parent, ref.key)

    def remove(self, key: str) -> WaitingRef:
        ref = self.refs.pop(key)
        del self._frags[key]
        self._changed(key=key)
        self.payloads.difference_update(ref.payload_refs)
        for entry in self.aside.values():  # (set-aside objects keep theirs)
            self.payloads.update(entry.ref.payload_refs)
        for parent in ref.after:
            self._unindex(parent, key)
        self.filtered.pop(key, None)
        return ref

    def set_aside(self, entry: WaitingAside, *, listed: bool = True) -> None:
        """Move ``entry.ref`` aside (``listed``: a reference of this document; else one
        decoded from the set-aside list): not loaded; still indexed by parent, its
        payload objects held."""
        key = entry.ref.key
        self._framed_len = None
        if listed:
            del self.refs[key], self._frags[key]
            self._changed(key=key)
        else:
            self.payloads.update(entry.ref.payload_refs)
            hold_filter(self, entry.ref)
            for parent in entry.ref.after:
                self.by_parent.setdefault(parent, {})[key] = None
        self.aside[key] = entry

    def readmit(self, key: str) -> WaitingRef:
        """Take ``key``'s reference back among the loadable ones (due at once if its
        parents all ended meanwhile)."""
        ref = self.aside.pop(key).ref
        self.refs[key] = ref
        self._frags[key] = _encode(ref)
        self._changed(ref)
        return ref

    def _unindex(self, parent: str, key: str) -> None:
        keys = self.by_parent.get(parent)
        if keys is not None:
            keys.pop(key, None)
            if not keys:
                del self.by_parent[parent]


def cold_waiting_of(refs: list[WaitingRef], aside: Sequence[WaitingAside] = ()) -> ColdWaiting:
    """The stored references and those set aside, checked (a bad one is a
    ``CorruptDocument`` naming ``$.waiting[i]`` or ``$.waiting_aside[i].ref``
    and the field)."""
    out = ColdWaiting()
    for i, ref in enumerate(refs):
        _check(f"$.waiting[{i}]", ref, out)
        out.add(ref)
    for i, entry in enumerate(aside):
        _check(f"$.waiting_aside[{i}].ref", entry.ref, out)
        if not entry.reason:
            where = f"$.waiting_aside[{i}].reason"
            raise CorruptDocument(f"{where}: must say why it was set aside", path=where)
        out.set_aside(entry, listed=False)
    return out


def _check(where: str, ref: WaitingRef, seen: ColdWaiting) -> None:
    problem = _problem(ref, seen)
    if problem is not None:
        field, message = problem
        raise CorruptDocument(f"{where}.{field}: {message}", path=f"{where}.{field}")


def _problem(ref: WaitingRef, seen: ColdWaiting) -> tuple[str, str] | None:
    if not ref.key.startswith(WAITING_PREFIX) or seen.holds(ref.key):
        return ("key", f"{ref.key!r} is not a new key under {WAITING_PREFIX}")
    if ref.count < 1 or ref.size_bytes < 1:
        return ("count", "an object of waiting children holds at least one job")
    if not ref.min_id <= ref.max_id:
        return ("min_id", f"{ref.min_id!r} is after max_id {ref.max_id!r}")
    if not ref.queue:
        return ("queue", "must not be empty")
    if len(ref.cancelled) >= ref.count + 1 or len(set(ref.cancelled)) != len(ref.cancelled):
        return ("cancelled", "more cancels than jobs, or one twice")
    return None
