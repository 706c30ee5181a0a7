"""Queue statistics from a document: pure, no broker needed (``osqueue status`` reads
the document and calls this; a broker calls it on the document it holds)."""

from __future__ import annotations

from osqueue.api import QueueStats, Stats
from osqueue.state.document import Document


def stats_of(doc: Document, now: float) -> Stats:
    """Counts per queue and for the whole document, as of ``doc.version``."""
    index = doc.index
    queues: dict[str, QueueStats] = {}
    for q in index.queues():
        oldest: float | None = None
        head = index.head(q, doc.jobs)
        if head is not None:
            oldest = max(0.0, now - doc.jobs[head[2]].created_at.timestamp())
        queued = index.count(q, "queued")
        ready = len(index.ready.get(q, ()))
        queues[q] = QueueStats(
            depth=queued,
            claimed=index.count(q, "claimed"),
            dead=index.count(q, "dead"),
            delayed=max(0, queued - ready),
            oldest_age_s=oldest,
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
    )
