"""``result(job_id)`` of a retried dead job answers the live job it is again, through
the public client (``osqueue.connect``, an embedded broker) on memory and file:
a dead job kept in the document and one spilled to a dead segment, each with a
``dead`` entry in the record of finished jobs (``result_ttl_s`` set), answer
``dead``, then ``queued`` once retried, then ``done`` once they ran."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest
from backends import backend_url
from segment_helpers import config

import osqueue
from osqueue.broker.inproc.client import LocalClient


@pytest.fixture(params=["memory", "file"])
def url(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[str]:
    with backend_url(request, request.param, tmp_path, "retry-result") as found:
        yield found


async def statuses(q: LocalClient, ids: list[str]) -> list[str]:
    return [(await q.result(job_id)).status for job_id in ids]


@pytest.mark.parametrize("how", ["all", "by-error", "by-ids"])
async def test_a_retried_dead_job_answers_as_live_again(url: str, how: str) -> None:
    cfg = config(dead_keep_jobs=2, dead_spill_jobs=2, spill_above_jobs=None)
    async with osqueue.connect(url, embedded=True, broker_config=cfg) as q:
        assert isinstance(q, LocalClient)
        broker = q.broker
        ids = [await q.push(b"p%d" % i, max_attempts=1, result_ttl_s=600.0) for i in range(8)]
        for _ in ids:
            for job in await q.claim("w", max_jobs=1):
                await q.fail(job, error="boom")
        await broker.segments.settled()
        doc = broker.document
        in_segments = [i for i in ids if i not in doc.jobs]
        assert in_segments
        assert len(in_segments) < len(ids)
        assert await statuses(q, ids) == ["dead"] * len(ids)

        if how == "all":
            assert await q.retry_dead() == len(ids)
        elif how == "by-error":
            assert await q.retry_dead(error="boom") == len(ids)
        else:
            assert await q.retry_dead(ids) == len(ids)
        assert await statuses(q, ids) == ["queued"] * len(ids)

        done: list[str] = []
        while len(done) < len(ids):
            jobs = await q.claim("w", max_jobs=len(ids), wait_s=30.0)
            for job in jobs:
                await q.complete(job, result="ok")
            done.extend(job.id for job in jobs)
        assert sorted(done) == sorted(ids)
        assert await statuses(q, ids) == ["done"] * len(ids)
