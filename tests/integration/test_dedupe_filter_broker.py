"""Dedupe of spilled jobs through a real broker on every backend (memory, file,
moto S3, Azurite): pushes with ids spill without tombstones, the same ids
pushed again after they spilled are applied once (the broker reads the
segment to confirm), and an id a filter only may hold is a new job."""

from __future__ import annotations

from segment_helpers import config, filter_false_positive
from test_segments_broker import drain, url

import osqueue
from osqueue.broker import Broker

__all__ = ["url"]  # the backends fixture


async def test_the_same_ids_pushed_after_they_spilled_are_applied_once(url: str) -> None:
    async with Broker(url, config()) as broker:
        q = broker.client()
        ids = [f"w7-0-{i:03d}" for i in range(30)]
        for job_id in ids:  # one commit each: they spill as they come
            assert await q.push(b"first", id=job_id) == job_id
        await broker.segments.settled()
        doc = broker.document
        assert doc.segments
        assert doc.recent == {}  # no tombstone: the references' filters answer
        assert all(ref.id_filter for ref in doc.segments)
        again = await q.push_many([osqueue.NewJob(b"again", id=i) for i in ids])
        assert again == ids
        assert await q.push(b"once more", id=ids[15]) == ids[15]
        assert (await q.stats()).queues["default"].depth == 30
        got = await drain(broker)
        assert sorted(got) == ids  # each once


async def test_a_filter_false_positive_is_read_and_the_new_job_applied(url: str) -> None:
    async with Broker(url, config()) as broker:
        q = broker.client()
        ids = [f"w8-0-{i:03d}" for i in range(30)]
        for job_id in ids:
            await q.push(b"p", id=job_id)
        await broker.segments.settled()
        refs = list(broker.document.segments)
        fake = filter_false_positive(ids, refs)  # not pushed
        assert await q.push(b"new", id=fake) == fake
        assert (await q.stats()).queues["default"].depth == 31
        got = await drain(broker)
        assert sorted(got) == sorted([*ids, fake])
