"""Lookup structures over a document's jobs, so no operation scans them all.

* ``ready[queue]``: a heap of ``(priority, seq, id)`` of queued jobs that may
  run; a claim pops from the heads of the heaps it asks for.
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

Heaps are lazy: an entry whose job changed (claimed, cancelled, delayed again)
is dropped when it reaches the top, so every update is O(log n).
"""

from __future__ import annotations

import heapq
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from datetime import datetime

from osqueue.state.model import StoredJob

ReadyEntry = tuple[int, int, str]
DelayedEntry = tuple[float, int, str]


@dataclass(slots=True)
class Index:
    ready: dict[str, list[ReadyEntry]] = field(default_factory=dict)
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
                    index.ready.setdefault(job.queue, []).append((job.priority, job.seq, job.id))
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
        for heap in index.ready.values():
            heapq.heapify(heap)
        heapq.heapify(index.delayed)
        return index

    def copy(self) -> Index:
        return Index(
            ready={q: list(h) for q, h in self.ready.items()},
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
                    ready = self.ready[job.queue] = []
                heapq.heappush(ready, (job.priority, job.seq, job.id))
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
        heap = self.ready.get(k[0])
        if heap is None:
            heap = self.ready[k[0]] = []
        push, keys = heapq.heappush, self.keys
        for job in jobs:
            push(heap, (job.priority, job.seq, job.id))
            if job.key is not None:
                keys[job.key] = job.id

    def promote_due(self, jobs: dict[str, StoredJob], now_s: float) -> None:
        """Move delayed jobs whose time has come into their ready heaps."""
        delayed = self.delayed
        while delayed and delayed[0][0] <= now_s:
            _, seq, job_id = heapq.heappop(delayed)
            job = jobs.get(job_id)
            if job is not None and job.status == "queued" and job.seq == seq:
                heapq.heappush(self.ready.setdefault(job.queue, []), (job.priority, seq, job_id))

    def head(self, queue: str, jobs: dict[str, StoredJob]) -> ReadyEntry | None:
        """The next claimable entry of ``queue``, dropping stale ones."""
        heap = self.ready.get(queue)
        while heap:
            entry = heap[0]
            job = jobs.get(entry[2])
            if job is not None and job.status == "queued" and job.seq == entry[1]:
                return entry
            heapq.heappop(heap)
        return None

    def compact(self, queue: str, gone: Sequence[StoredJob]) -> None:
        """Drop the entries of ``gone`` (a spill's jobs, out of the document now)
        from ``queue``'s ready heap at once.  They would otherwise stay, stale,
        until the claims reach their seqs: a deep backlog's worth of memory."""
        heap = self.ready.get(queue)
        if heap:
            ids = {job.id for job in gone}
            heap[:] = [e for e in heap if e[2] not in ids]
            heapq.heapify(heap)

    def pop(self, queue: str) -> None:
        heapq.heappop(self.ready[queue])

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
