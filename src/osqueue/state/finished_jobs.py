"""The record of finished jobs: how each job that completed, died or was cancelled
ended, with its result, kept for the job's ``result_ttl_s``.

The document holds it as ``"finished": [...]``, one :class:`FinishedJob` per
job, in the order the jobs finished.  A result of up to
``result_inline_max_bytes`` sits in its entry (``result.value``); a larger one
lives in an object of its own, ``results/<job id>=<upload id>``, written
before the completion that references it commits (``result.ref``), like a
payload object.

The record is bounded.  An entry expires ``ttl_s`` after ``finished_at`` and
is pruned by the sweep that rides every commit.  Past ``max_finished_jobs``
entries or ``max_finished_bytes``, or when the document would pass
``max_document_bytes`` (the record yields to jobs: pushes do not count its
bytes), the entries closest to expiry are evicted first, and
``stats.finished_evicted`` counts them.  Both
happen in batches, so the encoded section is rebuilt rarely: expired entries
go once the soonest has been expired for :data:`PRUNE_SLACK_S`, and an
eviction takes the record down to :data:`EVICT_TO` of its caps.  In between,
the section grows by appending (like the dedupe tombstones), so a commit pays
a byte join for it.

Pure values; no I/O.  The document (:mod:`osqueue.state.document`) owns one
:class:`FinishedRecord`; :mod:`osqueue.state.results` answers questions about
it.
"""

from __future__ import annotations

import heapq
from collections.abc import Iterable, Iterator
from datetime import datetime

import msgspec

from osqueue.api import FinishedStatus, ResultKind
from osqueue.state.finished_refs import SealedRecord

#: Result objects live under this prefix: ``results/<job id>=<upload id>``.
RESULT_PREFIX = "results/"
#: Expired entries are pruned once the soonest expiry is this far past (in one batch).
PRUNE_SLACK_S = 10.0
#: An eviction takes the record down to this share of its caps (in one batch).
EVICT_TO = 0.9
#: A dead job's last error is kept in its entry up to this many characters.
FINISHED_ERROR_CHARS = 1024

_encode = msgspec.json.Encoder().encode


class Stamp:
    """``at.timestamp()``, remembered for the last ``datetime`` asked.

    Converting an aware ``datetime`` to seconds costs a timedelta's arithmetic
    each time.  The entries of one commit share one ``finished_at`` (the same
    object), so a record of finished jobs, and a seal of its oldest entries,
    convert it about once a commit instead of once an entry.  (Reading the pair
    is atomic: a stamp used from another thread at worst converts again.)"""

    __slots__ = ("_last",)

    def __init__(self) -> None:
        self._last: tuple[datetime | None, float] = (None, 0.0)

    def __call__(self, at: datetime) -> float:
        last = self._last
        if last[0] is at:
            return last[1]
        seconds = at.timestamp()
        self._last = (at, seconds)
        return seconds


#: the seconds of a finished entry's ``finished_at``
_finished_seconds = Stamp()


class ResultData(msgspec.Struct, frozen=True, omit_defaults=True, gc=False):
    """A job's result as the document references it: inline, or in an object."""

    #: how the bytes are read (:class:`osqueue.api.EncodedResult`)
    kind: ResultKind
    #: the result's length in bytes
    size: int
    #: the bytes themselves (base64 in the document), for a small result
    value: bytes | None = None
    #: or the object holding them (``results/<job id>=<upload id>``)
    ref: str | None = None


class FinishedJob(msgspec.Struct, frozen=True, omit_defaults=True, gc=False):
    """One entry of the record: how a job ended, and its result."""

    id: str
    status: FinishedStatus
    #: broker time the job finished
    finished_at: datetime
    #: kept this long after ``finished_at``
    ttl_s: float
    attempts: int = 0
    #: a dead job's last error (up to :data:`FINISHED_ERROR_CHARS`)
    error: str | None = None
    #: a completed job's result, if its completion carried one
    result: ResultData | None = None
    #: kept only for the children that may name the job as a parent (no result and
    #: no TTL of its own): sealed, such entries are bounded by ``max_finished_jobs``
    #: (:mod:`osqueue.state.finished_objects`)
    held: bool = False

    @property
    def expires_at(self) -> float:
        """Broker time (seconds) after which the entry is gone."""
        return _finished_seconds(self.finished_at) + self.ttl_s


class FinishedRecord:
    """The entries of one document, with their encodings and expiry order.

    ``entries`` keeps finish order (the document's order); a lazy heap of
    ``(expires_at, id)`` gives the soonest expiry (an entry replaced or removed
    leaves a stale heap item that is skipped).
    """

    __slots__ = ("_blob", "_bytes", "_expires", "_frags", "_heap", "_stale", "entries", "sealed")

    def __init__(self, entries: Iterable[FinishedJob] = ()) -> None:
        self.entries: dict[str, FinishedJob] = {}
        #: id -> the entry's encoded bytes
        self._frags: dict[str, bytes] = {}
        #: the summed length of the fragments
        self._bytes = 0
        self._heap: list[tuple[float, str]] = []
        #: id -> its entry's expiry (a heap item is current while it matches)
        self._expires: dict[str, float] = {}
        #: heap items whose entry is gone (a seal takes a thousand at once: past
        #: as many as there are entries, the heap is made again from ``_expires``
        #: rather than popped an item at a time)
        self._stale = 0
        #: the encoded section (fragments joined by commas), grown by appending;
        #: None after a removal until :meth:`section` rebuilds it
        self._blob: bytearray | None = None
        #: the entries sealed into objects (:mod:`osqueue.state.finished_objects`)
        self.sealed = SealedRecord()
        for entry in entries:
            self.add(entry)

    def copy(self) -> FinishedRecord:
        new = FinishedRecord()
        new.entries = dict(self.entries)
        new._frags = dict(self._frags)
        new._bytes = self._bytes
        new._heap = list(self._heap)
        new._expires = dict(self._expires)
        new._stale = self._stale
        new._blob = None if self._blob is None else bytearray(self._blob)
        new.sealed = self.sealed.copy()
        return new

    # -- reading ------------------------------------------------------------------

    def get(self, job_id: str) -> FinishedJob | None:
        return self.entries.get(job_id)

    def __contains__(self, job_id: object) -> bool:
        return job_id in self.entries

    def __len__(self) -> int:
        return len(self.entries)

    def __bool__(self) -> bool:
        return bool(self.entries)

    def __iter__(self) -> Iterator[FinishedJob]:
        return iter(self.entries.values())

    def __eq__(self, other: object) -> bool:
        if not isinstance(other, FinishedRecord):
            return NotImplemented
        same = list(self.entries.items()) == list(other.entries.items())
        return same and self.sealed == other.sealed

    __hash__ = None  # type: ignore[assignment]

    def __repr__(self) -> str:
        return f"FinishedRecord({len(self.entries)} entries, {self.size_bytes()} bytes)"

    def encoded(self, job_id: str) -> bytes:
        """The entry's encoding as the document holds it (kept since it was added)."""
        return self._frags[job_id]

    def refs(self) -> set[str]:
        """The result objects the entries reference (the result sweep keeps them)."""
        return {e.result.ref for e in self.entries.values() if e.result and e.result.ref}

    # -- encoding -----------------------------------------------------------------

    def section(self) -> bytearray:
        """The entries' encodings joined by commas (the inside of the JSON list).

        The cache itself is returned (not a copy): use it before the next change."""
        blob = self._blob
        if blob is None:
            blob = self._blob = bytearray(b",".join(self._frags.values()))
        return blob

    def size_bytes(self) -> int:
        """The length of :meth:`section`."""
        return self._bytes + max(0, len(self._frags) - 1)

    # -- changes --------------------------------------------------------------------

    def add(self, entry: FinishedJob) -> None:
        """Record ``entry`` (replacing an entry of the same id)."""
        if entry.id in self.entries:
            self.remove(entry.id)
        frag = _encode(entry)
        expires = entry.expires_at
        self.entries[entry.id] = entry
        self._frags[entry.id] = frag
        self._expires[entry.id] = expires
        self._bytes += len(frag)
        heapq.heappush(self._heap, (expires, entry.id))
        blob = self._blob
        if blob is not None:
            if len(self._frags) > 1:
                blob += b","
            blob += frag

    def remove(self, job_id: str) -> FinishedJob | None:
        entry = self.entries.pop(job_id, None)
        if entry is not None:
            self._bytes -= len(self._frags.pop(job_id))
            del self._expires[job_id]
            self._blob = None
            self._stale += 1  # its heap item stays, stale
        return entry

    def discard(self, job_id: str) -> None:
        """Forget ``job_id``'s entry, if any (the hot path of every push: one check)."""
        if self.entries and job_id in self.entries:
            self.remove(job_id)

    def _pop_soonest(self) -> FinishedJob | None:
        """Remove and return the entry closest to expiry (skipping stale heap items)."""
        self._drop_stale()
        heap, current = self._heap, self._expires
        while heap:
            expires, job_id = heapq.heappop(heap)
            if current.get(job_id) == expires:
                entry = self.remove(job_id)
                self._stale -= 1  # (its item is popped, not left stale)
                return entry
            self._stale -= 1
        return None

    def _soonest(self) -> float | None:
        self._drop_stale()
        heap, current = self._heap, self._expires
        while heap:
            expires, job_id = heap[0]
            if current.get(job_id) == expires:
                return expires
            heapq.heappop(heap)
            self._stale -= 1
        return None

    def _drop_stale(self) -> None:
        """More stale heap items than entries: make the heap again from the entries."""
        if self._stale > 64 and self._stale > len(self._expires):
            self._heap = [(expires, job_id) for job_id, expires in self._expires.items()]
            heapq.heapify(self._heap)
            self._stale = 0

    def prune(self, now: float) -> list[FinishedJob]:
        """Drop the entries expired at ``now``, once the soonest has been expired
        for :data:`PRUNE_SLACK_S` (so the section is rebuilt once per batch)."""
        soonest = self._soonest()
        if soonest is None or soonest + PRUNE_SLACK_S > now:
            return []
        out: list[FinishedJob] = []
        while (soonest := self._soonest()) is not None and soonest <= now:
            entry = self._pop_soonest()
            assert entry is not None
            out.append(entry)
        return out

    def evict(self, max_jobs: int, max_bytes: int) -> list[FinishedJob]:
        """Over either cap: drop the entries closest to expiry until the record is
        under :data:`EVICT_TO` of both."""
        if len(self.entries) <= max_jobs and self.size_bytes() <= max_bytes:
            return []
        keep_jobs, keep_bytes = int(max_jobs * EVICT_TO), int(max_bytes * EVICT_TO)
        out: list[FinishedJob] = []
        while self.entries and (len(self.entries) > keep_jobs or self.size_bytes() > keep_bytes):
            entry = self._pop_soonest()
            if entry is None:  # pragma: no cover (every entry has a heap item)
                break
            out.append(entry)
        return out
