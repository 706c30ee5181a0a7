"""A cancel that reads a segment just before a compaction swaps it for the merged
one looks again, in the references there are now, and finds the job there
(``SegmentCache.locate``); before, it answered that the job was nowhere."""

from __future__ import annotations

from test_compaction import compact_op, trickle

from osqueue.broker import BrokerConfig
from osqueue.broker.cold.cache import SegmentCache
from osqueue.broker.core.retry import StorageRetry
from osqueue.clock import ManualClock
from osqueue.state import Cancel, Document, encode_segment
from osqueue.storage import MemoryStorage


async def test_a_cancel_that_meets_a_merge_finds_the_job_in_the_merged_segment() -> None:
    d = trickle(8)
    storage = MemoryStorage()
    for key, jobs in d.objects.items():  # the parts, as the broker wrote them
        await storage.put(key, encode_segment(jobs))
    before = d.doc
    op = compact_op(d)
    await storage.put(op.ref.key, encode_segment(d.objects[op.ref.key]))
    d.run(op)
    after = d.doc
    victim = d.objects[op.refs[1].key][1]
    docs = iter([before])  # the first look sees the parts; then the merge has landed

    def document() -> Document:
        return next(docs, after)

    cache = SegmentCache(storage, 1 << 20, StorageRetry(BrokerConfig(), ManualClock()))
    found = await cache.locate(victim.id, document, lambda key, why: None)
    assert found == Cancel(victim.id, segment=op.ref.key, seq=victim.seq)
