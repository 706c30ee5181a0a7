"""The segment references a document holds, and what claims need from them.

A deep backlog does not live in the document: the cold middle of a *stream*
(one queue's jobs of one priority) is moved out into immutable *segment
objects* (``segments/...``), and the document keeps a
:class:`~osqueue.state.model.SegmentRef` per object.  Per stream, claim order
(priority, then seq) is then: the document's ready jobs with a seq below the
stream's **barrier**, then the segments in seq order, then the document's
jobs after them.  The barrier is ``next_seq`` of the stream's first
reference: the seq of the first job not loaded back yet.

* A claim never crosses a barrier it has not loaded: when the next job in
  claim order is a barrier, the claim stops there (it returns what it has)
  and the transition reports the stream as *starved*, so the broker loads at
  once (:mod:`osqueue.state.spill`).
* A document job whose seq lies inside or beyond a segment's range (a delayed
  or retried job keeps its seq; a job that was not ready at the spill stayed
  behind) simply waits until the loads pass it: that is the order a single
  queue gives.
* Only ready queued jobs (``run_at`` unset) spill, so every barrier is a job
  a claim could take now.

What must be answered without reading a segment is kept here: the
idempotency keys of spilled jobs (``keys``, so a push of a held key is a
``DuplicateKey``), the payload objects they use (``payloads``, so the payload
sweep keeps them), and the counts (``count - loaded - cancelled``).  A retried
push of a spilled id is recognised by the dedupe tombstone its spill wrote.

A reference whose object is missing or fails its check (size, SHA-256,
content) is **set aside** (:class:`~osqueue.state.model.SetAsideRef`, in
``aside``): it leaves its stream, so the stream's next segment is its barrier
and the queue keeps flowing, while its spilled jobs' idempotency keys and
payload objects stay held and its object stays referenced (the orphan sweep
keeps it), until a readmit puts it back in seq order.

The encoded references are cached per reference (a reference is immutable
and replaced when a load or cancel changes it), and the whole section is
cached until one changes, so a commit that touches no reference pays a byte
join for them, like the tombstones.
"""

from __future__ import annotations

from collections.abc import Iterator

import msgspec

from osqueue.state.dedupe_filter import hold_filter
from osqueue.state.model import SegmentRef, SetAsideRef

#: (queue, priority)
Stream = tuple[str, int]
#: (priority, seq): compares with the index's ready entries ``(priority, seq, id)``
Barrier = tuple[int, int]

_encode = msgspec.json.Encoder().encode


class Segments:
    """The references of one document, by stream, with the lookups claims,
    pushes and the payload sweep need (kept in step on every change)."""

    __slots__ = (
        "_by_key",
        "_frags",
        "_section",
        "aside",
        "barriers",
        "changes",
        "filter_floor",
        "filtered",
        "keys",
        "payloads",
        "streams",
    )

    def __init__(self, refs: list[SegmentRef] | None = None) -> None:
        #: stream -> its references, ordered by seq (non-overlapping)
        self.streams: dict[Stream, list[SegmentRef]] = {}
        #: queue -> the smallest (priority, next_seq) of its streams: its first barrier
        self.barriers: dict[str, Barrier] = {}
        #: idempotency key -> id of the spilled (not loaded, not cancelled) job holding it
        self.keys: dict[str, str] = {}
        #: payload objects spilled jobs use
        self.payloads: set[str] = set()
        #: object key -> its reference (listed or set aside), if it has an id filter
        self.filtered: dict[str, SegmentRef] = {}
        #: at most the oldest ``dedupe_created`` of a listed filter (Unix seconds)
        self.filter_floor: float | None = None
        #: object key -> its stream
        self._by_key: dict[str, Stream] = {}
        #: object key -> its reference's encoded bytes
        self._frags: dict[str, bytes] = {}
        self._section: bytes | None = None
        #: object key -> its reference set aside (see the module's docstring)
        self.aside: dict[str, SetAsideRef] = {}
        #: grows with every change (planners remember what they saw)
        self.changes = 0
        for ref in refs or ():
            self.append(ref)

    def copy(self) -> Segments:
        new = Segments()
        new.streams = {s: list(refs) for s, refs in self.streams.items()}
        new.barriers = dict(self.barriers)
        new.keys = dict(self.keys)
        new.payloads = set(self.payloads)
        new.filtered = dict(self.filtered)
        new.filter_floor = self.filter_floor
        new._by_key = dict(self._by_key)
        new._frags = dict(self._frags)
        new._section = self._section
        new.aside = dict(self.aside)
        new.changes = self.changes
        return new

    # -- reading ------------------------------------------------------------------

    def __bool__(self) -> bool:
        """References or set-aside ones: the document has a ``queues`` section."""
        return bool(self.streams or self.aside)

    def __iter__(self) -> Iterator[SegmentRef]:
        """Every reference, by queue, then priority, then seq."""
        for stream in sorted(self.streams):
            yield from self.streams[stream]

    def __eq__(self, other: object) -> bool:
        if not isinstance(other, Segments):
            return NotImplemented
        return self.streams == other.streams and self.aside == other.aside

    __hash__ = None  # type: ignore[assignment]

    def find(self, key: str) -> SegmentRef | None:
        """The reference of object ``key``, if the document holds one."""
        stream = self._by_key.get(key)
        for ref in self.streams.get(stream, ()) if stream is not None else ():
            if ref.key == key:
                return ref
        return None

    def first(self, stream: Stream) -> SegmentRef | None:
        refs = self.streams.get(stream)
        return refs[0] if refs else None

    def last(self, stream: Stream) -> SegmentRef | None:
        refs = self.streams.get(stream)
        return refs[-1] if refs else None

    def spilled(self, queue: str) -> int:
        """Live jobs of ``queue`` that sit in segments."""
        return sum(
            ref.remaining for (q, _), refs in self.streams.items() if q == queue for ref in refs
        )

    def queues(self) -> set[str]:
        return {q for q, _ in self.streams}

    def set_aside_jobs(self, queue: str) -> int:
        """Live jobs of ``queue`` in segments set aside (neither lost nor claimable)."""
        return sum(e.ref.remaining for e in self.aside.values() if e.ref.queue == queue)

    def set_aside_of(self, queue: str | None = None) -> list[SetAsideRef]:
        """The set-aside references (of ``queue``), by queue, priority and seq."""
        entries = [e for e in self.aside.values() if queue is None or e.ref.queue == queue]
        return sorted(entries, key=lambda e: (e.ref.queue, e.ref.priority, e.ref.first_seq))

    def holds(self, key: str) -> bool:
        """Object ``key`` is referenced or set aside: never an orphan."""
        return key in self._by_key or key in self.aside

    def section(self) -> bytes:
        """The encoded inside of the ``queues`` map
        (``"q":{"segments":[...],"set_aside":[...]},...``); cached until a
        reference changes."""
        section = self._section
        if section is None:
            frags = self._frags
            by_queue: dict[str, list[bytes]] = {}
            for q, p in sorted(self.streams):
                by_queue.setdefault(q, []).extend(frags[ref.key] for ref in self.streams[(q, p)])
            aside: dict[str, list[bytes]] = {}
            for entry in self.set_aside_of():
                aside.setdefault(entry.ref.queue, []).append(_encode(entry))
            parts: list[bytes] = []
            for q in sorted(by_queue.keys() | aside.keys()):
                fields = []
                if q in by_queue:
                    fields.append(b'"segments":[' + b",".join(by_queue[q]) + b"]")
                if q in aside:
                    fields.append(b'"set_aside":[' + b",".join(aside[q]) + b"]")
                parts.append(_encode(q) + b":{" + b",".join(fields) + b"}")
            section = self._section = b",".join(parts)
        return section

    # -- changes ------------------------------------------------------------------

    def append(self, ref: SegmentRef) -> None:
        """Add ``ref`` after the last reference of its stream (the caller checked
        that its seqs come after that one's)."""
        self.streams.setdefault(ref.stream, []).append(ref)
        self._index(ref)
        self._moved(ref.queue)

    def insert(self, ref: SegmentRef) -> None:
        """Add ``ref`` in seq order among its stream's references (the caller
        checked that it overlaps none)."""
        refs = self.streams.setdefault(ref.stream, [])
        at = next((i for i, r in enumerate(refs) if r.first_seq > ref.first_seq), len(refs))
        refs.insert(at, ref)
        self._index(ref)
        self._moved(ref.queue)

    def set_aside(self, entry: SetAsideRef, *, listed: bool = True) -> None:
        """Move ``entry.ref`` (``listed``: a reference of this document; else one
        decoded from the set-aside list) aside: its stream goes on without it;
        its keys and payload objects stay held."""
        ref = entry.ref
        if listed:
            self.remove(ref)
        self.aside[ref.key] = entry
        self._hold(ref)
        self._section = None

    def readmit(self, key: str) -> SegmentRef:
        """Take ``key``'s reference back from the set-aside ones (the caller puts it
        in its stream with :meth:`insert`)."""
        ref = self.aside.pop(key).ref
        self._release(ref)
        self._section = None
        return ref

    def replace(self, ref: SegmentRef) -> None:
        """Put ``ref`` in the place of the reference with the same key."""
        refs = self.streams[ref.stream]
        for i, old in enumerate(refs):
            if old.key == ref.key:
                refs[i] = ref
                self._forget(old)
                self._index(ref)
                self._moved(ref.queue)
                return
        raise KeyError(ref.key)

    def swap(self, olds: list[SegmentRef], new: SegmentRef) -> None:
        """Put ``new`` in the place of ``olds``, adjacent references of its stream (a
        compaction; the caller checked them)."""
        refs = self.streams[new.stream]
        at = next(i for i, r in enumerate(refs) if r.key == olds[0].key)
        refs[at : at + len(olds)] = [new]
        for old in olds:
            self._forget(old)
        self._index(new)
        self._moved(new.queue)

    def remove(self, ref: SegmentRef) -> None:
        stream = ref.stream
        refs = self.streams[stream]
        refs[:] = [r for r in refs if r.key != ref.key]
        if not refs:
            del self.streams[stream]
        self._forget(ref)
        self._moved(ref.queue)

    def _index(self, ref: SegmentRef) -> None:
        self._hold(ref)
        self._by_key[ref.key] = ref.stream
        self._frags[ref.key] = _encode(ref)

    def _forget(self, ref: SegmentRef) -> None:
        self._release(ref)
        self._by_key.pop(ref.key, None)
        self._frags.pop(ref.key, None)

    def _hold(self, ref: SegmentRef) -> None:
        """The idempotency keys and payload objects of ``ref``'s live jobs are held."""
        for job_id, key in ref.keyed.items():
            self.keys[key] = job_id
        self.payloads.update(ref.payload_refs)
        hold_filter(self, ref)

    def _release(self, ref: SegmentRef) -> None:
        keys = self.keys
        for job_id, key in ref.keyed.items():
            if keys.get(key) == job_id:
                del keys[key]
        self.payloads.difference_update(ref.payload_refs)
        self.filtered.pop(ref.key, None)

    def _moved(self, queue: str) -> None:
        """A reference of ``queue`` changed: its barrier and the section."""
        self._section = None
        self.changes += 1
        firsts = [
            (p, refs[0].next_seq) for (q, p), refs in self.streams.items() if q == queue and refs
        ]
        if firsts:
            self.barriers[queue] = min(firsts)
        else:
            self.barriers.pop(queue, None)
