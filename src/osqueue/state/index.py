"""Lookup structures over a document's jobs, so no operation scans them all.

* ``ready[queue]``: the ``(priority, seq, id)`` entries of queued jobs that may
  run, in claim order (:class:`Ready`: a sorted run and a heap); a claim takes
  from the heads of the queues it asks for.
* ``delayed``: a heap of ``(run_at, seq, id)`` of queued jobs not due yet; due
  entries move to ``ready`` when a claim looks.
* ``keys``: idempotency key -> id of the live (queued or claimed) job holding it.
* ``claimed``: ids of claimed jobs (the heartbeat sweep walks only these).
* ``heartbeat_floor``: no claimed job's last heartbeat is older than this
  (``None``: not known), so the sweep walks them only when one may have expired.
* ``done``: ids of done jobs waiting for their archive object.
* ``counts``: ``(queue, status) -> n`` for O(queues) stats; ``queued``: the
  queued jobs of all queues.
* Scheduling (:mod:`osqueue.state.limits`, :mod:`osqueue.state.deps`):
  ``group_claimed``: ``(queue, group) -> n`` claimed jobs of each group;
  ``held``: ready entries a claim set aside because their group was at its
  cap (they go back to ``ready`` when the group has room); ``children``: parent
  id -> ids of the ``waiting`` jobs that wait for it.

Both are lazy: an entry whose job changed (claimed, cancelled, delayed again)
is dropped when it reaches the top, so every update is O(log n) at most.
"""

from __future__ import annotations

import heapq
from bisect import bisect_left, bisect_right
from collections.abc import Iterable, Iterator, Sequence
from dataclasses import dataclass, field
from datetime import datetime
from operator import lt

from osqueue.state.model import StoredJob
from osqueue.state.segments import Barrier

ReadyEntry = tuple[int, int, str]
DelayedEntry = tuple[float, int, str]

#: consumed entries at the front of a :class:`Ready` run kept before it is cut
_RUN_SLACK = 64


class Ready:
    """One queue's ready entries in claim order, ``(priority, seq, id)`` ascending.

    Most entries arrive in that order: each push has the highest seq so far, and
    a load's chunk is a sorted run of seqs that falls between the jobs claims
    read now and the ones pushed since.  They go in :attr:`run`, a sorted list
    read from :attr:`start` (an append, or one slice insert per chunk; a claim
    moves ``start`` on, and a spill cuts its jobs' slice out).  The few that do
    not fit there (a job put back with its old seq, a delayed job coming due, a
    held one) go in :attr:`heap`.  The head is the smaller of the two fronts, so
    a deep queue's claims, pushes, loads and spills compare no tuples, where a
    heap of the same entries compares about twenty per claim.
    """

    __slots__ = ("heap", "run", "start")

    def __init__(self, run: list[ReadyEntry] | None = None) -> None:
        #: sorted; ``run[:start]`` are taken (cut once they are many)
        self.run: list[ReadyEntry] = [] if run is None else run
        self.start = 0
        self.heap: list[ReadyEntry] = []

    def __len__(self) -> int:
        return len(self.run) - self.start + len(self.heap)

    def __iter__(self) -> Iterator[ReadyEntry]:
        return iter(self.entries())

    def entries(self) -> list[ReadyEntry]:
        """Every entry, the run's in order, then the heap's (in no order), in a
        list of its own (a slice and a concatenation: no generator to step
        through per entry)."""
        run, start = self.run, self.start
        out = run[start:] if start else run[:]
        if self.heap:
            out += self.heap
        return out

    def copy(self) -> Ready:
        new = Ready(self.run[self.start :])
        new.heap = list(self.heap)
        return new

    def push(self, entry: ReadyEntry) -> None:
        run = self.run
        if not run or entry > run[-1]:
            run.append(entry)
        else:
            heapq.heappush(self.heap, entry)

    def extend(self, entries: list[ReadyEntry]) -> None:
        """Add ``entries``, sorted (a load's chunk): where they fall in the run, as
        one slice, if nothing of the run lies between them."""
        if not entries:
            return
        run, start, first = self.run, self.start, entries[0]
        if start == len(run) or first > run[-1]:
            run.extend(entries)
            return
        at = bisect_left(run, first, start)
        if at < len(run) and run[at] < entries[-1]:  # interleaved: one by one
            for entry in entries:
                heapq.heappush(self.heap, entry)
        elif at == start and start >= len(entries):  # before the front: reuse taken slots
            self.start = start - len(entries)
            run[self.start : start] = entries
        else:
            run[at:at] = entries

    def pop(self) -> None:
        """Drop the smallest entry (the one :meth:`Index.head` looked at)."""
        run, heap, start = self.run, self.heap, self.start
        if start < len(run) and not (heap and heap[0] < run[start]):
            start += 1
            if start == len(run):  # all taken: nothing to keep
                run.clear()
                start = 0
            elif start >= _RUN_SLACK and 2 * start >= len(run):
                del run[:start]
                start = 0
            self.start = start
        else:
            heapq.heappop(heap)

    def one_priority(self) -> int | None:
        """The priority of every entry, when they share one and the heap is empty
        (the run alone, in order, holds them all); else None."""
        run, start = self.run, self.start
        if self.heap or start == len(run) or run[start][0] != run[-1][0]:
            return None
        return run[-1][0]

    def before(self, bound: Barrier) -> list[ReadyEntry]:
        """The entries below ``bound`` (the run's in order, then the heap's)."""
        run, start = self.run, self.start
        out = run[start : bisect_left(run, bound, start)]
        if self.heap:
            out += [e for e in self.heap if e < bound]
        return out

    def after(self, bound: Barrier) -> list[ReadyEntry]:
        """The entries above ``bound``, sorted."""
        run = self.run
        out = run[bisect_left(run, bound, self.start) :]
        if self.heap:
            out = sorted(out + [e for e in self.heap if e > bound])
        return out

    def discard(self, lo: ReadyEntry, hi: ReadyEntry, ids: set[str]) -> None:
        """Drop the entries of ``ids``, which lie from ``lo`` to ``hi`` (a spill's
        jobs: one slice of the run, and whatever the heap holds of them)."""
        run, start = self.run, self.start
        i = bisect_left(run, lo, start)
        j = bisect_right(run, hi, i)
        if i < j:
            run[i:j] = [e for e in run[i:j] if e[2] not in ids]
        heap = self.heap
        if heap and any(e[2] in ids for e in heap):
            heap[:] = [e for e in heap if e[2] not in ids]
            heapq.heapify(heap)


@dataclass(slots=True)
class Index:
    ready: dict[str, Ready] = field(default_factory=dict)
    delayed: list[DelayedEntry] = field(default_factory=list)
    keys: dict[str, str] = field(default_factory=dict)
    claimed: set[str] = field(default_factory=set)
    done: set[str] = field(default_factory=set)
    counts: dict[tuple[str, str], int] = field(default_factory=dict)
    heartbeat_floor: datetime | None = None
    queued: int = 0
    #: dead jobs in the document (the dead spill's one check: broker/cold/dead.py)
    dead: int = 0
    group_claimed: dict[tuple[str, str], int] = field(default_factory=dict)
    held: dict[tuple[str, str], list[ReadyEntry]] = field(default_factory=dict)
    children: dict[str, dict[str, None]] = field(default_factory=dict)

    @classmethod
    def build(cls, jobs: Iterable[StoredJob]) -> Index:
        index = cls()
        for job in jobs:
            index._count(job, 1)
            if job.group is not None or job.status == "waiting":
                index._extend(job, 1)
            if job.status == "queued":
                index.queued += 1
                if job.run_at is None:
                    index.ready_of(job.queue).run.append((job.priority, job.seq, job.id))
                else:
                    index.delayed.append((job.run_at.timestamp(), job.seq, job.id))
                if job.key is not None:
                    index.keys[job.key] = job.id
            elif job.status == "claimed":
                index.claimed.add(job.id)
                index._lower_floor(job)
                if job.key is not None:
                    index.keys[job.key] = job.id
            elif job.status == "done":
                index.done.add(job.id)
            elif job.status == "dead":
                index.dead += 1
        for ready in index.ready.values():
            ready.run.sort()
        heapq.heapify(index.delayed)
        return index

    def copy(self) -> Index:
        return Index(
            ready={q: r.copy() for q, r in self.ready.items()},
            delayed=list(self.delayed),
            keys=dict(self.keys),
            claimed=set(self.claimed),
            done=set(self.done),
            counts=dict(self.counts),
            heartbeat_floor=self.heartbeat_floor,
            queued=self.queued,
            dead=self.dead,
            group_claimed=dict(self.group_claimed),
            held={k: list(h) for k, h in self.held.items()},
            children={k: dict(v) for k, v in self.children.items()},
        )

    def _extend(self, job: StoredJob, delta: int) -> None:
        """Keep the scheduling lookups in step as ``job`` joins (+1) or leaves (-1)."""
        if job.status == "waiting":
            if job.key is not None:
                if delta > 0:
                    self.keys[job.key] = job.id
                elif self.keys.get(job.key) == job.id:
                    del self.keys[job.key]
            for parent in job.after:
                kids = self.children.get(parent)
                if delta > 0:
                    if kids is None:
                        kids = self.children[parent] = {}
                    kids[job.id] = None
                elif kids is not None:
                    kids.pop(job.id, None)
                    if not kids:
                        del self.children[parent]
        elif job.status == "claimed" and job.group is not None:
            k = (job.queue, job.group)
            n = self.group_claimed.get(k, 0) + delta
            if n > 0:
                self.group_claimed[k] = n
            else:
                self.group_claimed.pop(k, None)

    def _lower_floor(self, job: StoredJob) -> None:
        """Keep ``heartbeat_floor`` a lower bound after ``job`` joined ``claimed``."""
        claim = job.claim
        if claim is None:  # a claimed job without its claim: the decoder refuses these
            self.heartbeat_floor = None
            return
        floor = self.heartbeat_floor
        if floor is None:
            if len(self.claimed) == 1:  # the only claimed job: its heartbeat is the floor
                self.heartbeat_floor = claim.heartbeat_at
        elif claim.heartbeat_at < floor:
            self.heartbeat_floor = claim.heartbeat_at

    def _count(self, job: StoredJob, delta: int) -> None:
        k = (job.queue, job.status)
        n = self.counts.get(k, 0) + delta
        if n:
            self.counts[k] = n
        else:
            self.counts.pop(k, None)

    def remove(self, job: StoredJob) -> None:
        """Forget ``job`` (heap entries go stale and are dropped lazily)."""
        status = job.status
        counts = self.counts
        k = (job.queue, status)
        n = counts.get(k, 0) - 1
        if n:
            counts[k] = n
        else:
            del counts[k]
        if status == "queued":
            self.queued -= 1
        elif status == "claimed":
            self.claimed.discard(job.id)
        elif status == "done":
            self.done.discard(job.id)
        elif status == "dead":
            self.dead -= 1
        key = job.key
        if key is not None and self.keys.get(key) == job.id:
            del self.keys[key]
        if job.group is not None or status == "waiting":
            self._extend(job, -1)

    def remove_queued(self, jobs: Sequence[StoredJob]) -> None:
        """Forget many queued jobs at once (a spill's; each as :meth:`remove` would)."""
        counts = self.counts
        by_queue: dict[str, int] = {}
        keys = self.keys
        for job in jobs:
            by_queue[job.queue] = by_queue.get(job.queue, 0) + 1
            key = job.key
            if key is not None and keys.get(key) == job.id:
                del keys[key]
            if job.group is not None:
                self._extend(job, -1)
        for queue, n in by_queue.items():
            k = (queue, "queued")
            left = counts.get(k, 0) - n
            if left:
                counts[k] = left
            else:
                del counts[k]
        self.queued -= len(jobs)

    def add(self, job: StoredJob, now_s: float) -> None:
        status = job.status
        counts = self.counts
        k = (job.queue, status)
        counts[k] = counts.get(k, 0) + 1
        if status == "queued":
            self.queued += 1
            run_at = job.run_at
            if run_at is None or run_at.timestamp() <= now_s:
                ready = self.ready.get(job.queue)
                if ready is None:
                    ready = self.ready[job.queue] = Ready()
                entry = (job.priority, job.seq, job.id)
                run = ready.run  # (ready_of and Ready.push, inline: the per-push path)
                if not run or entry > run[-1]:
                    run.append(entry)
                else:
                    heapq.heappush(ready.heap, entry)
            else:
                heapq.heappush(self.delayed, (run_at.timestamp(), job.seq, job.id))
            if job.key is not None:
                self.keys[job.key] = job.id
        elif status == "claimed":
            self.claimed.add(job.id)
            self._lower_floor(job)
            if job.key is not None:
                self.keys[job.key] = job.id
        elif status == "done":
            self.done.add(job.id)
        elif status == "dead":
            self.dead += 1
        if job.group is not None or status == "waiting":
            self._extend(job, 1)

    def add_ready(self, jobs: Sequence[StoredJob]) -> None:
        """Index many ready queued jobs of one queue at once (a load's; each as
        :meth:`add` would)."""
        if not jobs:
            return
        k = (jobs[0].queue, "queued")
        self.counts[k] = self.counts.get(k, 0) + len(jobs)
        self.queued += len(jobs)
        ready = self.ready_of(k[0])
        entries = [(job.priority, job.seq, job.id) for job in jobs]
        if all(map(lt, entries, entries[1:])):  # (a load's chunk is in seq order)
            ready.extend(entries)
        else:
            for entry in entries:
                ready.push(entry)
        keys = self.keys
        for job in jobs:
            if job.key is not None:
                keys[job.key] = job.id

    def promote_due(self, jobs: dict[str, StoredJob], now_s: float) -> None:
        """Move delayed jobs whose time has come into their ready heaps."""
        delayed = self.delayed
        while delayed and delayed[0][0] <= now_s:
            _, seq, job_id = heapq.heappop(delayed)
            job = jobs.get(job_id)
            if job is not None and job.status == "queued" and job.seq == seq:
                self.ready_of(job.queue).push((job.priority, seq, job_id))

    def ready_of(self, queue: str) -> Ready:
        """``queue``'s ready entries (made empty if it has none yet)."""
        ready = self.ready.get(queue)
        if ready is None:
            ready = self.ready[queue] = Ready()
        return ready

    def head(self, queue: str, jobs: dict[str, StoredJob]) -> ReadyEntry | None:
        """The next claimable entry of ``queue``, dropping stale ones."""
        ready = self.ready.get(queue)
        if ready is None:
            return None
        run, heap = ready.run, ready.heap
        while True:  # the smaller of the two fronts (inline: the per-claim path)
            if ready.start < len(run):
                entry = run[ready.start]
                if heap and heap[0] < entry:
                    entry = heap[0]
            elif heap:
                entry = heap[0]
            else:
                return None
            job = jobs.get(entry[2])
            if job is not None and job.status == "queued" and job.seq == entry[1]:
                return entry
            ready.pop()

    def compact(self, queue: str, gone: Sequence[StoredJob]) -> None:
        """Drop the entries of ``gone`` (a spill's jobs, out of the document now, in
        seq order) from ``queue``'s ready entries at once.  They would otherwise
        stay, stale, until the claims reach their seqs: a deep backlog's worth of
        memory."""
        ready = self.ready.get(queue)
        if ready and gone:
            first, last = gone[0], gone[-1]
            ready.discard(
                (first.priority, first.seq, ""),
                (last.priority, last.seq, last.id),
                {job.id for job in gone},
            )

    def defer(self, job: StoredJob) -> None:
        """A queued job that is not due yet waits among the delayed (a duplicate is harmless)."""
        assert job.run_at is not None
        heapq.heappush(self.delayed, (job.run_at.timestamp(), job.seq, job.id))

    def next_due(self, jobs: dict[str, StoredJob]) -> float | None:
        """When the earliest delayed job becomes claimable (broker clock seconds)."""
        delayed = self.delayed
        while delayed:
            run_at, seq, job_id = delayed[0]
            job = jobs.get(job_id)
            if job is not None and job.status == "queued" and job.seq == seq:
                return run_at
            heapq.heappop(delayed)
        return None

    def count(self, queue: str, status: str) -> int:
        return self.counts.get((queue, status), 0)

    def queues(self) -> list[str]:
        return sorted({q for q, _ in self.counts})
