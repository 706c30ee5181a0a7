"""Deep backlogs through a real broker on every backend (memory, file, moto S3,
Azurite): spill and load, claim order across them, dedupe and keys of spilled
jobs, cancel, the orphan sweep, takeover, and the size the broker counts.

Thresholds are tiny (a segment holds a few jobs), so every test spills and
loads many times.  Tests wait for the broker's segment work with
``broker.segments.settled()`` (no sleeps).
"""

from __future__ import annotations

import asyncio
from collections.abc import Iterator
from pathlib import Path

import pytest
from backends import BACKENDS, Counting, backend_url
from segment_helpers import SMALL, config

import osqueue
from osqueue.broker import Broker
from osqueue.clock import ManualClock
from osqueue.errors import DuplicateKey, JobNotFound
from osqueue.state import DOCUMENT_KEY, SEGMENT_PREFIX, Document, decode, decode_segment
from osqueue.storage import from_url
from osqueue.storage.port import Storage


@pytest.fixture(params=BACKENDS)
def url(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[str]:
    with backend_url(request, request.param, tmp_path, "segments") as found:
        yield found


async def stored(storage: Storage) -> Document:
    return decode((await storage.read(DOCUMENT_KEY)).data)


async def segment_keys(storage: Storage) -> set[str]:
    return set(await storage.list(SEGMENT_PREFIX))


async def push_spilled(broker: Broker, n: int, **options: object) -> list[str]:
    """Push ``n`` jobs one commit at a time and wait until the spills settled."""
    q = broker.client()
    ids = [await q.push(b"p%d" % i, **options) for i in range(n)]  # type: ignore[arg-type]
    await broker.segments.settled()
    return ids


async def drain(broker: Broker) -> list[str]:
    """Claim and complete until the queue is empty (claims wait for loads)."""
    q = broker.client()
    got: list[str] = []
    while (await q.stats()).depth:
        jobs = await q.claim("w", max_jobs=3, wait_s=30.0)
        for job in jobs:
            await q.complete(job)
        got.extend(job.id for job in jobs)
    return got


async def test_spilled_jobs_load_back_in_claim_order_across_priorities(url: str) -> None:
    storage = from_url(url)
    async with Broker(url, config()) as broker:
        q = broker.client()
        ids = [await q.push(b"p%d" % i, priority=i % 2) for i in range(24)]
        await broker.segments.settled()
        doc = broker.document
        refs = list(doc.segments)
        assert {ref.priority for ref in refs} == {0, 1}
        assert len(doc.jobs) < 24
        assert await segment_keys(storage) == {ref.key for ref in refs}
        assert (await stored(storage)).segments == doc.segments
        for ref in refs:  # each object holds exactly what its reference says
            header, jobs = decode_segment(await storage.get(ref.key), ref.key)
            assert (header.first_seq, header.last_seq, header.count) == (
                ref.first_seq,
                ref.last_seq,
                ref.count,
            )
            assert all(job.id not in doc.jobs for job in jobs)
        stats = await q.stats()
        assert stats.queues["default"].depth == 24
        assert stats.queues["default"].spilled == 24 - len(doc.jobs)
        got = await drain(broker)
        assert got == ids[0::2] + ids[1::2]  # priority 0 first, each in push order
        await broker.segments.settled()
        assert broker.segments.counters.loads >= 4
        assert not broker.document.segments
        assert await segment_keys(storage) == set()  # every loaded object deleted
    await storage.close()


async def test_a_retried_push_of_a_spilled_id_is_applied_once_and_its_key_stays_held(
    url: str,
) -> None:
    async with Broker(url, config()) as broker:
        q = broker.client()
        await push_spilled(broker, 3)
        assert await q.push(b"keyed", id="job-a", key="k-a") == "job-a"
        await push_spilled(broker, 6)
        assert "job-a" not in broker.document.jobs  # it sits in a segment
        assert broker.document.segments.keys == {"k-a": "job-a"}
        assert await q.push(b"again", id="job-a", key="k-a") == "job-a"  # a retry
        with pytest.raises(DuplicateKey) as caught:
            await q.push(b"other", key="k-a")
        assert caught.value.existing_id == "job-a"
        assert (await q.stats()).queues["default"].depth == 10
        q_jobs = []
        while len(q_jobs) < 10:
            q_jobs.extend(await q.claim("w", max_jobs=10, wait_s=30.0))
        assert [j.id for j in q_jobs].count("job-a") == 1
        assert next(j.payload for j in q_jobs if j.id == "job-a") == b"keyed"


async def test_cancel_of_a_spilled_job_reads_its_segment_and_strikes_it(url: str) -> None:
    async with Broker(url, config()) as broker:
        q = broker.client()
        await push_spilled(broker, 2)
        await q.push(b"keyed", id="job-k", key="k-1")
        ids = await push_spilled(broker, 8)
        spilled = [i for i in ids if i not in broker.document.jobs]
        victim = spilled[len(spilled) // 2]
        await q.cancel(victim)
        await q.cancel("job-k")  # its key is free again
        assert await q.push(b"new", key="k-1")
        with pytest.raises(JobNotFound):
            await q.cancel(victim)
        with pytest.raises(JobNotFound):
            await q.cancel("no-such-job")
        assert (await q.stats()).queues["default"].depth == 2 + 8 + 1 - 1
        got = await drain(broker)
        assert victim not in got
        assert "job-k" not in got
        assert len(got) == 10
        assert (await q.stats()).pushed == 12


async def test_the_orphan_sweep_deletes_only_what_two_sweeps_found_unreferenced(url: str) -> None:
    storage = from_url(url)
    orphan = "segments/default/p0/00000000000000000001=never-referenced.jsonl"
    async with Broker(url, config()) as broker:
        # written by a broker that died between the put and the commit
        await storage.put(orphan, b'{"format":1}\n')
        await push_spilled(broker, 12)
        referenced = {ref.key for ref in broker.document.segments}
        assert referenced
        segments = broker.segments
        suspects = await segments.sweep(set())
        assert suspects == {orphan}
        await broker.client().push(b"a commit")
        await segments.settled()
        assert orphan in await segment_keys(storage)  # seen once: kept
        suspects = await segments.sweep(suspects)
        await broker.client().push(b"the next commit deletes it")
        await segments.settled()
        left = await segment_keys(storage)
        assert orphan not in left
        assert referenced <= left  # the referenced objects stay
        assert segments.counters.swept == 1
        assert len(await drain(broker)) == 14
    await storage.close()


async def test_a_takeover_reads_no_segment_and_serves_the_spilled_jobs_in_order(url: str) -> None:
    first = Broker(url, config())
    await first.start()
    ids = await push_spilled(first, 14)
    doc = first.document
    assert doc.segments
    for task in first.tasks():  # it dies where it stands
        task.cancel()
    await asyncio.gather(*first.tasks(), return_exceptions=True)
    storage = Counting(from_url(url))
    clock = ManualClock()  # a claim no commit wakes would hang: nothing advances this clock
    async with Broker(storage, config(), clock=clock) as second:
        assert [key for key in storage.gets if key.startswith(SEGMENT_PREFIX)] == []
        assert second.document.segments == doc.segments
        q = second.client()
        head = await q.claim("w", max_jobs=20, wait_s=30.0)
        assert [j.id for j in head] == [i for i in ids if i in doc.jobs][: len(head)]
        commits = second.commits
        more = await q.claim("w", max_jobs=1, wait_s=30.0)  # waits for one load at most
        assert [j.id for j in more] == [ids[len(head)]]
        assert second.commits - commits <= 3  # its claim, the load, its claim again
        for job in [*head, *more]:
            await q.complete(job)
        assert await drain(second) == ids[len(head) + 1 :]
    await storage.close()


async def test_document_bytes_is_the_size_of_queue_json_with_segments(url: str) -> None:
    storage = from_url(url)
    async with Broker(url, config()) as broker:
        q = broker.client()
        await push_spilled(broker, 15, key=None)
        await q.push(b"x" * 50, id="with-id")
        for _ in range(2):
            await q.claim("w", max_jobs=4, wait_s=30.0)
            await broker.segments.settled()
            await q.push(b"a commit after the segment work")
            await broker.segments.settled()  # and the commits it made
            blob = await storage.read(DOCUMENT_KEY)
            stats = await q.stats()
            assert stats.version == decode(blob.data).version
            assert broker.document.segments
            assert stats.document_bytes == len(blob.data)
    await storage.close()


async def test_cancel_of_a_spilled_job_over_grpc(tmp_path: Path) -> None:
    from remote_helpers import fast_config, quiet_broker_config

    from osqueue.client.remote import connect
    from osqueue.server.runner import BrokerServer
    from osqueue.server.server import ServerConfig

    url = (tmp_path / "q").as_uri()
    (tmp_path / "q").mkdir()
    settings = {k: v for k, v in SMALL.items() if k != "lease_s"}
    server = BrokerServer(url, ServerConfig(listen="127.0.0.1:0"), quiet_broker_config(**settings))
    await server.start()
    try:
        client = await connect(url, config=fast_config())
        try:
            ids = [await client.push(b"r%d" % i, id=f"r-{i}") for i in range(10)]
            broker = server.broker
            assert broker is not None
            await broker.segments.settled()
            spilled = [i for i in ids if i not in broker.document.jobs]
            assert spilled
            await client.cancel(spilled[0])
            with pytest.raises(JobNotFound):
                await client.cancel(spilled[0])
            assert (await client.stats()).queues["default"].depth == 9
            assert isinstance(await client.stats(), osqueue.Stats)
            assert (await client.stats()).queues["default"].spilled == len(spilled) - 1
        finally:
            await client.close()
    finally:
        await server.stop()


async def test_a_tampered_segment_is_set_aside_and_readmitted_once_restored(url: str) -> None:
    storage = from_url(url)
    async with Broker(storage, config()) as broker:
        ids = await push_spilled(broker, 12)
        first = next(iter(broker.document.segments))
        original = await storage.get(first.key)
        _, inside = decode_segment(original, first.key)
        broker.segments.cache.evict(first.key)
        await storage.put(first.key, original.replace(b'"payload":"cD', b'"payload":"SE', 1))
        got = await drain(broker)
        assert got == [i for i in ids if i not in {job.id for job in inside}]
        doc = await stored(storage)
        assert first.key in doc.segments.aside
        assert first.key in await segment_keys(storage)  # never an orphan
        stats = (await broker.client().stats()).queues["default"]
        assert (stats.depth, stats.set_aside) == (0, len(inside))
        await storage.put(first.key, original)
        assert await broker.client().readmit_segment(first.key) == len(inside)
        assert await drain(broker) == [job.id for job in inside]


async def test_readmit_over_grpc_needs_the_admin_token_and_checks_the_object(
    tmp_path: Path,
) -> None:
    from remote_helpers import fast_config, quiet_broker_config

    from osqueue.client.remote import connect
    from osqueue.errors import InvalidInput, Unauthenticated
    from osqueue.server.runner import BrokerServer
    from osqueue.server.server import ServerConfig

    url = (tmp_path / "q").as_uri()
    (tmp_path / "q").mkdir()
    settings = {k: v for k, v in SMALL.items() if k != "lease_s"}
    server = BrokerServer(
        url,
        ServerConfig(listen="127.0.0.1:0", token="admin-t", write_token="write-t"),
        quiet_broker_config(**settings),
    )
    await server.start()
    storage = from_url(url)
    try:
        admin = await connect(url, config=fast_config(token="admin-t"))
        writer = await connect(url, config=fast_config(token="write-t"))
        try:
            for i in range(10):
                await admin.push(b"r%d" % i, id=f"r-{i}")
            broker = server.broker
            assert broker is not None
            await broker.segments.settled()
            first = next(iter(broker.document.segments))
            original = await storage.get(first.key)
            broker.segments.cache.evict(first.key)
            await storage.delete(first.key)
            while await admin.claim("w", max_jobs=5):
                await broker.segments.settled()
            assert first.key in broker.document.segments.aside
            with pytest.raises(InvalidInput, match="still missing"):
                await admin.readmit_segment(first.key)
            await storage.put(first.key, original)
            with pytest.raises(Unauthenticated):
                await writer.readmit_segment(first.key)
            assert await admin.readmit_segment(first.key) == first.count
            assert (await admin.stats()).queues["default"].set_aside == 0
        finally:
            await admin.close()
            await writer.close()
    finally:
        await server.stop()
