"""Segment objects the broker has read: parsed, kept within a byte budget.

A deep stream's first segment is read ahead (prefetch) and loaded a chunk at a
time, so the broker keeps the objects it reads, split into job lines
(:class:`~osqueue.state.SegmentLines`), until the memory they take passes
``max_bytes``; then the least recently used go.  So the broker's memory is
bounded by the cache and the document, not by the backlog.  A cancel of a
spilled job reads its candidate segments through the same cache.

A load's jobs are decoded from their lines when it is submitted, after a
commit and before the next can start: on the path of every op waiting for
that commit.  The next chunk is known as soon as a load is submitted (the
same object, from where this one ends), and the commit loop spends most of
a write waiting for storage with nothing to run, so :class:`DecodeAhead`
notes that chunk, the commit loop has it decoded once it has sent a write
(:meth:`DecodeAhead.run`, while the write is in flight), and the next load
takes the jobs if they are the ones it needs (the same object, start and
end); any other decodes as before.  The jobs are a pure function of the
object's lines, which never change under a key, and the ``Load`` carrying
them is checked by the state layer like any other.
"""

from __future__ import annotations

import asyncio
import logging
from collections import OrderedDict
from collections.abc import Callable, Sequence

from osqueue.broker.core.retry import StorageRetry
from osqueue.errors import CorruptDocument, NotFound, StorageError
from osqueue.state import Cancel, Document, SegmentRef, StoredJob, candidates
from osqueue.state.model import DelayedRef
from osqueue.state.segment_codec import SegmentLines
from osqueue.storage.port import Storage

log = logging.getLogger(__name__)

#: objects at least this large are checked (SHA-256) and split in a thread
CHECK_IN_THREAD_BYTES = 1 << 20


class SegmentCache:
    """Parsed segment objects by key, least recently used first.

    Owns nothing but the objects it keeps: reads happen in the caller's task
    (:meth:`fetch`), so the broker decides which reads run when.  An object
    larger than the budget is still kept (alone), so a load can always go on.
    """

    def __init__(self, storage: Storage, max_bytes: int, retry: StorageRetry) -> None:
        self._storage = storage
        self._max_bytes = max_bytes
        self._retry = retry
        self._objects: OrderedDict[str, SegmentLines] = OrderedDict()
        #: the summed size of the kept objects (their bytes as stored)
        self.bytes = 0
        #: objects read from storage (a figure for tests and benchmarks)
        self.reads = 0
        #: small segments a spill of this broker just wrote, kept for the compactions
        #: (never for a load, which reads and checks what is stored); oldest first
        self._written: OrderedDict[str, SegmentLines] = OrderedDict()
        self._written_bytes = 0
        #: the loads' next chunks, decoded while a document write is in flight
        self.ahead = DecodeAhead(self)

    def keep_written(self, obj: SegmentLines) -> None:
        """Keep ``obj`` as this broker wrote it, for :meth:`written` (the oldest go
        once they pass a quarter of the budget)."""
        self._written[obj.key] = obj
        self._written_bytes += obj.size_bytes
        while self._written_bytes > self._max_bytes // 4:
            self._written_bytes -= self._written.popitem(last=False)[1].size_bytes

    def written(self, key: str) -> SegmentLines | None:
        """The object ``key`` as a spill of this broker wrote it, if it is kept."""
        return self._written.get(key)

    def __contains__(self, key: str) -> bool:
        return key in self._objects

    def __len__(self) -> int:
        return len(self._objects)

    def fits(self, size_bytes: int) -> bool:
        """An object of ``size_bytes`` would be kept beside every object kept now
        (a read ahead that does not fit would push out one still in use)."""
        return self.bytes + size_bytes <= self._max_bytes

    def get(self, key: str) -> SegmentLines | None:
        """The kept object ``key`` (now the most recently used), if it is kept."""
        obj = self._objects.get(key)
        if obj is not None:
            self._objects.move_to_end(key)
        return obj

    async def fetch(
        self, ref: SegmentRef | DelayedRef, attempts: int | None = None
    ) -> SegmentLines:
        """The object ``ref`` names: kept, or read, parsed, checked against ``ref`` and
        kept.  A storage error is retried with backoff (``attempts``: at most this
        many tries; None: until it succeeds); a missing object is ``NotFound``, one
        that is not what ``ref`` says (size, SHA-256, header) is ``CorruptDocument``."""
        obj = self.get(ref.key)
        if obj is not None:
            return obj
        attempt = 0
        while True:
            try:
                data = await self._storage.get(ref.key)
                break
            except StorageError as exc:
                attempt += 1
                if attempts is not None and attempt >= attempts:
                    raise
                await self._retry.wait(attempt - 1, exc)
        self.reads += 1
        if isinstance(ref, DelayedRef):  # an object of delayed jobs (osqueue.broker.cold.delayed)
            check = SegmentLines.checked_delayed
            if len(data) < CHECK_IN_THREAD_BYTES:
                obj = check(ref, data)
            else:
                obj = await asyncio.to_thread(check, ref, data)
        elif len(data) < CHECK_IN_THREAD_BYTES:
            obj = SegmentLines.checked(ref, data)
        else:
            obj = await asyncio.to_thread(SegmentLines.checked, ref, data)
        self._keep(obj)
        return obj

    def _keep(self, obj: SegmentLines) -> None:
        objects = self._objects
        old = objects.pop(obj.key, None)
        if old is not None:
            self.bytes -= old.size_bytes
        objects[obj.key] = obj
        self.bytes += obj.size_bytes
        while self.bytes > self._max_bytes and len(objects) > 1:
            _, evicted = objects.popitem(last=False)
            self.bytes -= evicted.size_bytes

    def evict(self, key: str) -> None:
        """Forget ``key`` (its reference is gone, or a load of it failed)."""
        self.ahead.forget(key)
        obj = self._objects.pop(key, None)
        if obj is not None:
            self.bytes -= obj.size_bytes
        obj = self._written.pop(key, None)
        if obj is not None:
            self._written_bytes -= obj.size_bytes

    async def locate(
        self,
        job_id: str,
        document: Callable[[], Document | None],
        broken: Callable[[str, str], None],
    ) -> Cancel | None:
        """The ``Cancel`` of ``job_id`` in the segment that holds it live, if one does:
        the candidates (whose id bounds admit it) are read through the cache, and
        ``document()`` (the broker's, which moves on meanwhile) says whether the job
        is still unloaded there.  A candidate that fails its check is passed to
        ``broken(key, why)`` (the broker sets it aside) and skipped."""
        for _ in range(3):  # again if a candidate was compacted meanwhile (then merged)
            found, moved = await self._locate(job_id, document, broken)
            if found is not None or not moved:
                return found
        return None

    async def _locate(
        self,
        job_id: str,
        document: Callable[[], Document | None],
        broken: Callable[[str, str], None],
    ) -> tuple[Cancel | None, bool]:
        """One look (see :meth:`locate`); and whether a candidate holding the job
        left the references meanwhile (loaded, or compacted into another)."""
        doc = document()
        if doc is None:
            return None, False
        moved = False
        for ref in candidates(doc, job_id):
            try:
                obj = await self.fetch(ref, attempts=3)
            except NotFound:
                moved = True  # loaded or merged, and deleted meanwhile
                continue
            except CorruptDocument as exc:
                broken(ref.key, str(exc))
                continue
            i = obj.find(job_id)
            if i is None:
                continue
            now = document()
            current = now.segments.find(ref.key) if now is not None else None
            if current is None:
                return None, True  # loaded and dropped, or merged: look again
            if i < current.loaded or job_id in current.cancelled:
                return None, False  # loaded (it is in the document, or gone) or cancelled
            (job,) = obj.jobs(i, i + 1)
            return Cancel(job_id, segment=ref.key, seq=job.seq), False
        return None, moved

    async def holds_id(
        self,
        job_id: str,
        keys: Sequence[str],
        document: Callable[[], Document | None],
        since: float,
    ) -> bool:
        """Whether one of the cold objects ``keys`` (ready segments or delayed objects
        whose filters may hold ``job_id``) holds it at a position not loaded yet,
        created at ``since`` or later (in the dedupe window): read through the
        cache, checked.  An
        object that cannot be read (missing, broken, set aside) counts as holding
        it: a retried push is then answered as one, never applied twice (a storage
        error is raised: the push fails, and may be sent again).  A key no
        longer referenced is passed over (loaded, or merged: the push is checked
        again against what is there now)."""
        for key in keys:
            doc = document()
            if doc is None:
                return True
            ref: SegmentRef | DelayedRef | None = doc.segments.find(key)
            if ref is None:
                ref = doc.delayed.find(key)
            if ref is None:
                if key in doc.segments.aside or key in doc.delayed.aside:
                    return True
                continue
            try:
                obj = await self.fetch(ref, attempts=3)
                i = obj.find(job_id)
                if i is not None and i >= ref.loaded:
                    (job,) = obj.jobs(i, i + 1)
                    if job.created_at.timestamp() >= since:
                        return True
            except (NotFound, CorruptDocument):
                return True
        return False


class DecodeAhead:
    """Per object: the chunk a load will want next, and that chunk decoded
    (see the module's docstring)."""

    __slots__ = ("_cache", "_decoded", "pending", "used")

    def __init__(self, cache: SegmentCache) -> None:
        self._cache = cache
        #: chunks a load took decoded ahead (a figure for tests and benchmarks)
        self.used = 0
        #: key -> (start, end): the chunk to decode (the commit loop's cue to
        #: call :meth:`run` once it has sent a write)
        self.pending: dict[str, tuple[int, int]] = {}
        #: key -> (start, end, the jobs start..end-1 and the one after, if any)
        self._decoded: dict[str, tuple[int, int, list[StoredJob]]] = {}

    def note(self, key: str, start: int, end: int) -> None:
        """A load of ``key`` will want its jobs ``start..end-1`` (and the one after)."""
        self.pending[key] = (start, end)

    def run(self) -> None:
        """Decode the chunks noted, of the objects still kept."""
        pending, self.pending = self.pending, {}
        for key, (start, end) in pending.items():
            obj = self._cache.get(key)
            if obj is None:
                continue
            try:
                jobs = obj.jobs(start, end + 1)
            except CorruptDocument:
                continue  # the load decodes the chunk again, and sets the object aside
            self._decoded[key] = (start, end, jobs)

    def jobs(self, obj: SegmentLines, start: int, end: int) -> list[StoredJob]:
        """The jobs ``start..end-1`` of ``obj`` and the one after (a load's chunk):
        decoded ahead if exactly they were, else decoded now (``CorruptDocument``
        names a line that does not decode)."""
        key = obj.key
        self.pending.pop(key, None)
        decoded = self._decoded.pop(key, None)
        if decoded is not None and decoded[0] == start and decoded[1] == end:
            self.used += 1
            return decoded[2]
        return obj.jobs(start, end + 1)

    def forget(self, key: str) -> None:
        """Drop what is noted or decoded of ``key``."""
        self.pending.pop(key, None)
        self._decoded.pop(key, None)
