"""Queue statistics from a document: pure, no broker needed (``osqueue status`` reads
the document and calls this; a broker calls it on the document it holds)."""

from __future__ import annotations

from datetime import datetime

from osqueue.api import QueueStats, Stats
from osqueue.state.document import Document
from osqueue.state.limits import held_count
from osqueue.state.model import QueueTotals


def stats_of(doc: Document, now: float) -> Stats:
    """Counts per queue and for the whole document, as of ``doc.version``.

    Jobs in segments count from their references (``depth`` includes them,
    ``spilled`` counts them), so no segment object is read.  Jobs in segments
    set aside are counted apart (``set_aside``), not in ``depth``.  Every known
    queue is listed (:attr:`Document.queue_totals`), with zeros when it holds no job."""
    index, segments = doc.index, doc.segments
    # (a queue's done jobs wait only for their archive object: they keep no queue listed)
    names = {q for q, status in index.counts if status != "done"}
    names |= set(doc.queue_settings) | set(doc.queue_totals) | set(doc.dead.counts)
    names |= {e.ref.queue for e in doc.dead.aside.values()}  # (dead segments set aside)
    if segments:
        names |= segments.queues() | {e.ref.queue for e in segments.aside.values()}
    cold = doc.waiting_cold  # waiting children in objects: counted from the references
    names |= {ref.queue for ref in cold} | {e.ref.queue for e in cold.aside.values()}
    delayed_cold = doc.delayed  # delayed jobs in objects: counted from their references
    if delayed_cold:
        names |= delayed_cold.queues()
    queues: dict[str, QueueStats] = {}
    no_totals = QueueTotals()
    for q in sorted(names):
        totals = doc.queue_totals.get(q, no_totals)
        queued = index.count(q, "queued")
        ready = len(index.ready.get(q, ())) + held_count(index, q)
        spilled = segments.spilled(q) if segments else 0
        cold_delayed = delayed_cold.spilled(q) if delayed_cold else 0
        queues[q] = QueueStats(
            depth=queued + spilled + cold_delayed,
            claimed=index.count(q, "claimed"),
            dead=index.count(q, "dead") + doc.dead.count(q),  # (in dead segments too)
            delayed=max(0, queued - ready) + cold_delayed,
            oldest_age_s=_oldest_age_s(doc, q, now),
            spilled=spilled,
            waiting=index.count(q, "waiting") + (cold.jobs(q) if cold else 0),
            paused=_paused(doc, q),
            pushed_total=totals.pushed,
            completed_total=totals.completed,
            failed_total=totals.failed,
            dead_total=totals.dead,
            set_aside=(segments.set_aside_jobs(q) if segments.aside else 0)
            + (delayed_cold.set_aside_jobs(q) if delayed_cold.aside else 0)
            + (doc.dead.set_aside_jobs(q) if doc.dead.aside else 0)
            + (cold.set_aside_jobs(q) if cold.aside else 0),
            set_aside_segments=(len(segments.set_aside_of(q)) if segments.aside else 0)
            + (delayed_cold.set_aside_of(q) if delayed_cold.aside else 0)
            + (doc.dead.set_aside_of(q) if doc.dead.aside else 0)
            + (cold.set_aside_of(q) if cold.aside else 0),
        )
    owner = doc.broker
    return Stats(
        version=doc.version,
        queues=queues,
        pushed=doc.stats.pushed,
        completed=doc.stats.completed,
        dead=sum(s.dead for s in queues.values()),
        claimed=sum(s.claimed for s in queues.values()),
        broker_id=owner.id if owner else None,
        broker_address=owner.address if owner else None,
        broker_epoch=owner.epoch if owner else 0,
        lease_until=owner.lease_until.timestamp() if owner else None,
        document_bytes=doc.size_bytes(),
        tombstones=len(doc.recent),
        finished=len(doc.finished) + doc.finished.sealed.entries(),  # sealed ones too
        finished_evicted=doc.stats.finished_evicted,
    )


def _paused(doc: Document, queue: str) -> bool:
    settings = doc.queue_settings.get(queue)
    return settings is not None and settings.paused


def depths(doc: Document) -> dict[str, int]:
    """Jobs waiting per queue (queued, delayed and spilled), queues with none left out."""
    index, segments = doc.index, doc.segments
    out: dict[str, int] = {}
    cold = doc.delayed
    for q in sorted(
        set(index.queues())
        | (segments.queues() if segments else set())
        | (cold.queues() if cold else set())
    ):
        n = index.count(q, "queued") + (segments.spilled(q) if segments else 0)
        n += cold.spilled(q) if cold else 0
        if n:
            out[q] = n
    return out


def _oldest_age_s(doc: Document, queue: str, now: float) -> float | None:
    """The age of the next job in claim order (in the document or a segment)."""
    created: datetime | None = None
    head = doc.index.head(queue, doc.jobs)
    if head is not None:
        created = doc.jobs[head[2]].created_at
    barrier = doc.segments.barriers.get(queue)
    if barrier is not None and (head is None or head > barrier):
        ref = doc.segments.first((queue, barrier[0]))
        if ref is not None:
            created = ref.next_created_at
    return None if created is None else max(0.0, now - created.timestamp())
