"""A commit pays for the cold state only when the queue uses it: with no cold reference,
nothing in flight and the document below every spill and seal threshold, the
segment manager calls into none of its parts (one look, :meth:`_untouched`);
past a threshold the part runs as before (each of the four: dead letters, delayed
jobs, waiting children, the record of finished jobs).  And the index's count of dead jobs
(that look's check for the dead spill) follows every way a job dies or leaves."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest
from segment_helpers import COLD_THRESHOLDS, cross_cold_threshold

from osqueue.broker import Broker, BrokerConfig
from osqueue.state import StoredJob
from osqueue.state.index import Index
from osqueue.state.model import to_datetime
from osqueue.storage import MemoryStorage

T0 = to_datetime(1_764_000_000.0)


def _job(n: int, status: str) -> StoredJob:
    return StoredJob(f"j{n}", "q", n, status, T0)  # type: ignore[arg-type]


def _recount(index: Index) -> int:
    return sum(n for (_, status), n in index.counts.items() if status == "dead")


def test_the_index_counts_dead_jobs_as_they_come_and_go() -> None:
    jobs = [_job(n, status) for n, status in enumerate(["dead", "queued", "dead", "done"])]
    index = Index.build(jobs)
    assert index.dead == 2 == _recount(index)
    index.add(_job(9, "dead"), 0.0)
    index.remove(jobs[0])
    index.remove(jobs[1])  # not dead: the count stays
    assert index.dead == 2 == _recount(index)
    copy = index.copy()
    index.remove(jobs[2])
    assert (index.dead, copy.dead) == (1, 2)


def _calls(broker: Broker) -> dict[str, int]:
    """Count each cold part's ``committed`` calls on ``broker``."""
    seen: dict[str, int] = {}
    manager = broker.segments
    for name in ("dead", "waiting", "finished", "delayed"):
        part = getattr(manager, name)
        seen[name] = 0

        def counting(original: Callable[..., Any], name: str = name) -> Callable[..., Any]:
            def wrapper(*args: Any) -> Any:
                seen[name] += 1
                return original(*args)

            return wrapper

        part.committed = counting(part.committed)
    return seen


async def test_a_queue_without_cold_state_calls_no_cold_part_after_its_commits() -> None:
    async with Broker(MemoryStorage()) as broker:
        calls = _calls(broker)
        q = broker.client()
        for n in range(20):
            await q.push(b"x", id=f"p{n}")
            (job,) = await q.claim("w", ["default"])
            await q.complete(job)
        assert calls == {"dead": 0, "waiting": 0, "finished": 0, "delayed": 0}
        assert broker.commits > 40


@pytest.mark.parametrize(("part", "config"), COLD_THRESHOLDS.items())
async def test_past_a_threshold_the_part_runs_and_spills(part: str, config: dict[str, int]) -> None:
    async with Broker(MemoryStorage(), BrokerConfig(**config)) as broker:  # type: ignore[arg-type]
        calls = _calls(broker)
        q = broker.client()
        await cross_cold_threshold(q, part)
        await broker.segments.settled()
        assert calls[part] > 0
        doc = broker.document
        spilled = {
            "dead": doc.dead,
            "delayed": doc.delayed,
            "waiting": doc.waiting_cold.refs,
            "finished": doc.finished.sealed.refs,
        }[part]
        assert spilled, f"no {part} object after crossing the threshold"


async def test_objects_of_children_still_waiting_cost_another_queues_commits_nothing() -> None:
    """Waiting objects whose parents still run have nothing to plan: commits on
    another queue call no cold part; once a parent ends the waiting part loads."""
    config = BrokerConfig(waiting_spill_above_jobs=3, waiting_object_jobs=5)
    async with Broker(MemoryStorage(), config) as broker:
        q = broker.client()
        await q.push(b"parent", id="par", queue="parents")
        for n in range(6):
            await q.push(b"child", id=f"c{n}", queue="kids", after=["par"])
        await broker.segments.settled()
        assert broker.document.waiting_cold.refs
        assert not broker.document.waiting_cold.due
        calls = _calls(broker)
        for n in range(10):
            await q.push(b"x", id=f"o{n}", result_ttl_s=0)
            (job,) = await q.claim("w", ["default"])
            await q.complete(job)
        assert calls == {"dead": 0, "waiting": 0, "finished": 0, "delayed": 0}
        (parent,) = await q.claim("w", ["parents"])
        await q.complete(parent)
        await broker.segments.settled()
        assert calls["waiting"] > 0
        assert not broker.document.waiting_cold.refs  # loaded back
