"""A queue with dead jobs in dead segments and waiting children in objects, made
through a real broker with tiny thresholds (a queue keeps 2 dead jobs; an
object holds 4 waiting children): the listings' tests (``osqueue jobs``, the
dashboard, the Spark reader) read them back."""

from __future__ import annotations

from segment_helpers import config

from osqueue.broker import Broker, BrokerConfig

COLD = {
    "dead_keep_jobs": 2,
    "dead_spill_jobs": 2,
    "spill_above_jobs": None,
    "waiting_spill_above_jobs": 5,
    "waiting_object_jobs": 4,
    "waiting_load_below_queued": 6,
}


def cold_config(**kw: object) -> BrokerConfig:
    return config(**{**COLD, **kw})


async def kill(broker: Broker, n: int) -> list[str]:
    """``n`` jobs of ``default`` (ids ``d00``...; payloads ``dead-<i>``; mixed
    priorities) that die at their first failure; the dead spills settled."""
    q = broker.client()
    ids = [
        await q.push(b"dead-%d" % i, max_attempts=1, priority=i % 3, id=f"d{i:02d}")
        for i in range(n)
    ]
    for i in range(n):
        for job in await q.claim("w", max_jobs=1):
            await q.fail(job, error=f"error {i}")
    await broker.segments.settled()
    return ids


async def fan_in(broker: Broker, n: int) -> tuple[str, list[str]]:
    """A parent left queued on ``kids``, and ``n`` children waiting for it (ids
    ``c00``...; payloads ``child-<i>``; most in objects)."""
    q = broker.client()
    parent = await q.push(b"parent", queue="kids", id="parent")
    children = [
        await q.push(b"child-%d" % i, queue="kids", after=[parent], id=f"c{i:02d}")
        for i in range(n)
    ]
    await broker.segments.settled()
    return parent, children
