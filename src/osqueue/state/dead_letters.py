"""The dead segments a document references (see :mod:`osqueue.state.cold_dead`)."""

from __future__ import annotations

from collections.abc import Iterator
from datetime import datetime
from typing import Annotated

import msgspec

from osqueue.state.filter_refs import hold_filter


class DeadRef(msgspec.Struct, frozen=True, omit_defaults=True, gc=False):
    """One dead segment: an immutable object (``dead/<queue>/...``) holding dead jobs
    of one queue, written with the segment codec (status ``dead``, jobs in seq
    order).  A queue's dead segments are cut in the order their jobs died: every
    job of one died no later than every job of the next.

    A reference is never edited: a retry or purge of some of its jobs writes a
    new object with the rest and swaps the references in one commit."""

    #: the object's key (``dead/...``, unique per written object)
    key: str
    queue: str
    #: jobs in the object
    count: int
    #: the object's size and hex SHA-256, recorded when written (every reader checks both)
    size_bytes: int = msgspec.field(name="bytes")
    sha256: Annotated[str, msgspec.Meta(pattern="^[0-9a-f]{64}$")]
    #: seqs of the object's first and last job (its header says the same)
    first_seq: int
    last_seq: int
    #: lexicographic bounds of its ids (to find a dead id's segment)
    min_id: str
    max_id: str
    #: when its first and last job died (a time filter skips the others)
    died_from: datetime
    died_to: datetime
    #: payload objects its jobs use (the payload sweep keeps them)
    payload_refs: tuple[str, ...] = ()
    #: its jobs' lowest and highest priority: with the seqs, the claim-order bounds
    #: a listing pages by (None: a reference written before they were recorded)
    min_priority: int | None = None
    max_priority: int | None = None
    #: the filter of its dedupe jobs' ids and the newest of their creation times,
    #: as a ready segment's reference has them (osqueue.state.dedupe_filter): no tombstones
    id_filter: tuple[str, ...] = ()
    dedupe_created: datetime | None = None

    @property
    def priority(self) -> int:
        """A dead segment's header names no stream: priority 0 (for the codec's checks)."""
        return 0


class DeadAside(msgspec.Struct, frozen=True, gc=False):
    """A dead segment's reference set aside (its object missing or failing its
    check): its jobs are neither lost nor listed, retried or purged until a
    readmit; its payload objects stay held (as for ready segments)."""

    ref: DeadRef
    reason: str
    at: datetime


_encode = msgspec.json.Encoder().encode


class DeadLetters:
    """A document's dead segments, by queue in the order their jobs died, with the
    lookups counts and the payload sweep need (kept in step on every change)."""

    __slots__ = (
        "_by_key",
        "_frags",
        "_section",
        "aside",
        "counts",
        "filter_floor",
        "filtered",
        "payloads",
        "queues",
    )

    def __init__(self, refs: dict[str, list[DeadRef]] | None = None) -> None:
        #: queue -> its references, oldest deaths first
        self.queues: dict[str, list[DeadRef]] = {}
        #: queue -> dead jobs in its segments
        self.counts: dict[str, int] = {}
        #: payload objects of jobs in dead segments
        self.payloads: set[str] = set()
        self._by_key: dict[str, DeadRef] = {}
        self._frags: dict[str, bytes] = {}
        self._section: bytes | None = None
        #: object key -> its reference set aside (object missing or broken)
        self.aside: dict[str, DeadAside] = {}
        #: object key -> its reference (listed or set aside) that carries an id filter,
        #: and the oldest of their ``dedupe_created`` (:mod:`osqueue.state.dedupe_filter`)
        self.filtered: dict[str, DeadRef] = {}
        self.filter_floor: float | None = None
        for queue_refs in (refs or {}).values():
            for ref in queue_refs:
                self.append(ref)

    def copy(self) -> DeadLetters:
        new = DeadLetters()
        new.queues = {q: list(refs) for q, refs in self.queues.items()}
        new.counts = dict(self.counts)
        new.payloads = set(self.payloads)
        new._by_key = dict(self._by_key)
        new._frags = dict(self._frags)
        new._section = self._section
        new.aside = dict(self.aside)
        new.filtered = dict(self.filtered)
        new.filter_floor = self.filter_floor
        return new

    def __bool__(self) -> bool:
        return bool(self.queues or self.aside)

    def __eq__(self, other: object) -> bool:
        if not isinstance(other, DeadLetters):
            return NotImplemented
        return self.queues == other.queues and self.aside == other.aside

    __hash__ = None  # type: ignore[assignment]

    def __iter__(self) -> Iterator[DeadRef]:
        """Every reference, by queue, oldest deaths first."""
        for queue in sorted(self.queues):
            yield from self.queues[queue]

    def count(self, queue: str | None = None) -> int:
        """Dead jobs in segments (of ``queue``)."""
        if queue is None:
            return sum(self.counts.values())
        return self.counts.get(queue, 0)

    def find(self, key: str) -> DeadRef | None:
        return self._by_key.get(key)

    def holds(self, key: str) -> bool:
        """Object ``key`` is referenced or set aside: never an orphan."""
        return key in self._by_key or key in self.aside

    def set_aside_jobs(self, queue: str) -> int:
        """Dead jobs of ``queue`` in segments set aside (counted apart from ``dead``)."""
        return sum(e.ref.count for e in self.aside.values() if e.ref.queue == queue)

    def set_aside_of(self, queue: str) -> int:
        """How many of ``queue``'s dead segments are set aside."""
        return sum(1 for e in self.aside.values() if e.ref.queue == queue)

    def framed_bytes(self) -> int:
        """The encoded length of the ``dead`` and ``dead_aside`` sections,
        punctuation included (0: none)."""
        listed = len(b',"dead":{') + len(self.section()) + 1 if self.queues else 0
        return listed + len(self.aside_section())

    def aside_section(self) -> bytes:
        """The document's ``,"dead_aside":[...]`` (empty when none is set aside)."""
        if not self.aside:
            return b""
        entries = (_encode(self.aside[key]) for key in sorted(self.aside))
        return b',"dead_aside":[' + b",".join(entries) + b"]"

    def set_aside(self, entry: DeadAside, *, listed: bool = True) -> None:
        """Move ``entry.ref`` aside (``listed``: a reference of this document; else one
        decoded from the set-aside list): not counted, listed or acted on; its
        payload objects held."""
        if listed:
            self.swap(entry.ref, None)
        self.aside[entry.ref.key] = entry
        self.payloads.update(entry.ref.payload_refs)
        hold_filter(self, entry.ref)  # (a set-aside object's filter still answers)

    def readmit(self, key: str) -> DeadRef:
        """Take ``key``'s reference back, in its queue's place by time of death."""
        ref = self.aside.pop(key).ref
        refs = self.queues.setdefault(ref.queue, [])
        at = next((i for i, r in enumerate(refs) if r.died_from > ref.died_from), len(refs))
        refs.insert(at, ref)
        self._index(ref)
        return ref

    def section(self) -> bytes:
        """The encoded inside of the ``dead`` map (``"q":[ref,...],...``); cached
        until a reference changes."""
        section = self._section
        if section is None:
            frags = self._frags
            section = self._section = b",".join(
                _encode(q) + b":[" + b",".join(frags[r.key] for r in self.queues[q]) + b"]"
                for q in sorted(self.queues)
            )
        return section

    def append(self, ref: DeadRef) -> None:
        """Add ``ref`` after its queue's last reference (its jobs died later)."""
        self.queues.setdefault(ref.queue, []).append(ref)
        self._index(ref)

    def replace(self, ref: DeadRef) -> None:
        """Put ``ref`` in the place of the listed reference with the same key."""
        self.swap(self._by_key[ref.key], ref)

    def swap(self, old: DeadRef, new: DeadRef | None) -> None:
        """Put ``new`` in the place of ``old`` (None: drop ``old``)."""
        refs = self.queues[old.queue]
        at = next(i for i, r in enumerate(refs) if r.key == old.key)
        self._forget(old)  # first: ``new`` holds some of the same payload objects
        if new is None:
            del refs[at]
            if not refs:
                del self.queues[old.queue]
        else:
            refs[at] = new
            self._index(new)

    def _index(self, ref: DeadRef) -> None:
        self._by_key[ref.key] = ref
        self._frags[ref.key] = _encode(ref)
        self.counts[ref.queue] = self.counts.get(ref.queue, 0) + ref.count
        self.payloads.update(ref.payload_refs)
        hold_filter(self, ref)
        self._section = None

    def _forget(self, ref: DeadRef) -> None:
        del self._by_key[ref.key]
        del self._frags[ref.key]
        left = self.counts[ref.queue] - ref.count
        if left:
            self.counts[ref.queue] = left
        else:
            del self.counts[ref.queue]
        self.payloads.difference_update(ref.payload_refs)
        for entry in self.aside.values():  # (set-aside segments keep theirs)
            self.payloads.update(entry.ref.payload_refs)
        self.filtered.pop(ref.key, None)
        self._section = None
