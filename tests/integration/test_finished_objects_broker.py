"""The record of finished jobs sealed into objects, through a real broker on every
backend: results come back from the objects (also after a takeover that read
none), large results' objects are kept while a sealed entry names them, and
the orphan sweep keeps referenced objects and deletes orphans."""

from __future__ import annotations

import asyncio
from collections.abc import Iterator
from pathlib import Path

import pytest
from backends import BACKENDS, Counting, backend_url
from segment_helpers import config

from osqueue.broker import Broker, BrokerConfig
from osqueue.state.finished_refs import FINISHED_PREFIX
from osqueue.storage import from_url


def sealing(**kw: object) -> BrokerConfig:
    return config(
        finished_seal_above_entries=4,
        finished_object_entries=5,
        result_inline_max_bytes=64,
        result_sweep_interval_s=None,
        **kw,
    )


@pytest.fixture(params=BACKENDS)
def url(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[str]:
    with backend_url(request, request.param, tmp_path, "finished") as found:
        yield found


async def run(broker: Broker, n: int) -> dict[str, object]:
    """Push, claim and complete ``n`` jobs, each with a result (every third large)."""
    q = broker.client()
    given: dict[str, object] = {}
    for i in range(n):
        job_id = await q.push(b"p%d" % i)
        (job,) = await q.claim("w", wait_s=30.0)
        value: object = {"i": i, "pad": "x" * (200 if i % 3 == 0 else 1)}
        await q.complete(job, result=value)
        given[job_id] = value
    await broker.segments.settled()
    return given


async def test_results_are_read_back_from_sealed_objects_also_after_a_takeover(url: str) -> None:
    first = Broker(url, sealing())
    await first.start()
    given = await run(first, 12)
    doc = first.document
    assert doc.finished.sealed
    sealed_entries = doc.finished.sealed.entries()
    assert sealed_entries >= 4
    assert len(doc.finished) + sealed_entries == 12
    for job_id, value in given.items():
        assert (await first.client().result(job_id)).value == value
    assert first.segments.finished.counters.reads >= 1
    for task in first.tasks():  # it dies where it stands
        task.cancel()
    await asyncio.gather(*first.tasks(), return_exceptions=True)
    storage = Counting(from_url(url))
    async with Broker(storage, sealing()) as second:
        assert [k for k in storage.gets if k.startswith(FINISHED_PREFIX)] == []
        for job_id, value in given.items():
            assert (await second.client().result(job_id)).value == value
    await storage.close()


async def test_the_sweeps_keep_what_sealed_entries_name(url: str) -> None:
    storage = from_url(url)
    orphan = f"{FINISHED_PREFIX}never-referenced.jsonl"
    async with Broker(url, sealing()) as broker:
        await storage.put(orphan, b"{}\n")
        given = await run(broker, 10)
        referenced = {ref.key for ref in broker.document.finished.sealed}
        result_objects = set(broker.document.finished.sealed.results)
        assert referenced
        assert result_objects  # large results of sealed entries live in results/
        segments = broker.segments
        suspects = await segments.sweep(set())
        assert suspects == {orphan}
        await broker.client().push(b"a commit")
        suspects = await segments.sweep(suspects)
        await broker.client().push(b"the next commit deletes it")
        await segments.settled()
        left = set(await storage.list(FINISHED_PREFIX))
        assert orphan not in left
        assert referenced <= left
        results = broker.results
        for key in result_objects:
            assert not results.orphan(key, broker.document)
        for job_id, value in given.items():
            assert (await broker.client().result(job_id)).value == value
    await storage.close()
