"""Every RPC through the remote client, against a real broker on memory:// and file://."""

from __future__ import annotations

import asyncio

import grpc
import msgspec
import pytest
from remote_helpers import fast_config, read_document

import osqueue
import osqueue.sync
from osqueue.api import NewJob, QueueClient
from osqueue.broker import BrokerConfig
from osqueue.client.remote import RemoteClient, connect
from osqueue.errors import DuplicateKey, InvalidInput, JobNotFound, LeaseLost
from osqueue.server.runner import BrokerServer
from osqueue.server.server import ServerConfig
from osqueue.wire._pb import queue_pb2 as pb
from osqueue.wire._pb import queue_pb2_grpc as pb_grpc


async def test_connect_finds_the_broker_from_the_document(
    remote: RemoteClient, broker_server: BrokerServer
) -> None:
    assert isinstance(remote, QueueClient)
    stats = await remote.stats()
    assert remote.address == broker_server.address
    assert stats.broker_address == broker_server.address
    assert stats.broker_id == broker_server.broker.id  # type: ignore[union-attr]


async def test_remote_workers_learn_the_broker_heartbeat_timeout(
    remote: RemoteClient, broker_server: BrokerServer
) -> None:
    broker = broker_server.broker
    assert broker is not None
    assert remote.heartbeat_timeout_s == broker.config.heartbeat_timeout_s
    worker = osqueue.Worker(remote, lambda job: None)
    assert worker.heartbeat_interval_s == broker.config.heartbeat_timeout_s / 3


async def test_push_claim_complete_round_trip(remote: RemoteClient, queue_url: str) -> None:
    job_id = await remote.push(b"hello", queue="mail", priority=3, key="k-1", max_attempts=7)
    [job] = await remote.claim("w1", ["mail"], max_jobs=5)
    assert (job.id, job.payload, job.queue, job.priority, job.key) == (
        job_id,
        b"hello",
        "mail",
        3,
        "k-1",
    )
    assert (job.attempts, job.max_attempts) == (1, 7)
    assert job.token > 0
    assert job.created_at > 0
    await remote.heartbeat(job)
    await remote.complete(job)
    stats = await remote.stats()
    assert stats.completed == 1
    assert stats.depth == 0
    doc = await read_document(queue_url)
    assert doc.stats.completed == 1


async def test_complete_and_claim_is_one_call_and_one_commit(
    remote: RemoteClient, queue_url: str
) -> None:
    ids = await remote.push_many([NewJob(b"%d" % i) for i in range(3)])
    held = await remote.claim("w1", max_jobs=2)
    stale = msgspec.structs.replace(held[1], token=held[1].token + 100)
    before = (await read_document(queue_url)).version
    errors, claimed = await remote.complete_and_claim([held[0], stale], "w1", max_jobs=5)
    assert errors[0] is None
    assert isinstance(errors[1], LeaseLost)  # the stale token fails alone
    assert [j.id for j in claimed] == [ids[2]]
    doc = await read_document(queue_url)
    assert doc.version == before + 1
    assert doc.stats.completed == 1
    assert doc.jobs[ids[1]].status == "claimed"


async def test_complete_and_claim_sends_completions_beyond_one_batch_beside_it(
    queue_url: str, broker_server: BrokerServer
) -> None:
    async with connect(queue_url, config=fast_config(max_batch=2)) as client:
        assert isinstance(client, RemoteClient)
        await client.push_many([NewJob(b"%d" % i) for i in range(4)])
        held = await client.claim("w1", max_jobs=3)
        errors, claimed = await client.complete_and_claim(held, "w1", max_jobs=3)
        assert errors == [None, None, None]
        assert len(claimed) == 1
        assert (await client.stats()).completed == 3


async def test_complete_and_claim_refuses_a_wait(broker_server: BrokerServer) -> None:
    async with grpc.aio.insecure_channel(broker_server.address) as channel:
        stub = pb_grpc.QueueStub(channel)  # type: ignore[misc]
        request = pb.ClaimRequest(
            worker="w", queues=["q"], max_jobs=1, wait_s=1.0, complete=[pb.JobRef(id="j", token=1)]
        )
        with pytest.raises(grpc.aio.AioRpcError) as caught:
            await stub.Claim(request)
        assert caught.value.code() == grpc.StatusCode.INVALID_ARGUMENT
        assert caught.value.details().startswith("wait_s: ")
        with pytest.raises(grpc.aio.AioRpcError) as caught:
            async for _ in stub.ClaimStream(request):
                pass
        assert caught.value.code() == grpc.StatusCode.INVALID_ARGUMENT
        assert caught.value.details().startswith("complete: ")
        del request.complete[:]
        request.complete.append(pb.JobRef(id="no/slash", token=1))
        request.wait_s = 0
        answer = await stub.Claim(request)  # a bad ref fails alone; the claim runs
        assert [s.field for s in answer.completed] == ["complete[0].id"]
        assert list(answer.jobs) == []


async def test_client_chosen_id_and_push_many(remote: RemoteClient) -> None:
    ids = await remote.push_many(
        [NewJob(b"a", id="job-a"), NewJob(b"b", queue="other"), NewJob(b"c", delay_s=3600)]
    )
    assert ids[0] == "job-a"
    assert len(set(ids)) == 3
    stats = await remote.stats()
    assert stats.queues["default"].depth == 2
    assert stats.queues["default"].delayed == 1
    assert stats.queues["other"].depth == 1


async def test_concurrent_pushes_coalesce_into_one_rpc(remote: RemoteClient) -> None:
    ids = await asyncio.gather(*(remote.push(b"%d" % i) for i in range(200)))
    assert len(set(ids)) == 200
    assert remote.pushes.batches == 1
    assert remote.pushes.items == 200
    jobs = await remote.claim("w", max_jobs=200)
    await asyncio.gather(*(remote.complete(job) for job in jobs))
    assert remote.completions.batches == 1
    assert (await remote.stats()).completed == 200


async def test_fail_retries_then_dead_letters_and_dead_admin(remote: RemoteClient) -> None:
    job_id = await remote.push(b"poison", max_attempts=2)
    [job] = await remote.claim("w")
    await remote.fail(job, error="boom", retry_after_s=0)
    [again] = await remote.claim("w")
    assert again.id == job_id
    assert again.attempts == 2
    assert again.token != job.token
    await remote.fail(again, error="boom again")
    stats = await remote.stats()
    assert stats.dead == 1
    assert await remote.retry_dead([job_id]) == 1
    stats = await remote.stats()
    assert (stats.dead, stats.depth) == (0, 1)
    for _ in range(2):  # its attempts start over: two more failures make it dead again
        [job] = await remote.claim("w")
        await remote.fail(job, error="still", retry_after_s=0)
    assert (await remote.stats()).dead == 1
    assert await remote.purge_dead() == 1
    stats = await remote.stats()
    assert (stats.dead, stats.depth) == (0, 0)


async def test_release_gives_the_job_back_without_an_attempt(remote: RemoteClient) -> None:
    await remote.push(b"x")
    [job] = await remote.claim("w")
    await remote.release(job)
    [again] = await remote.claim("w2")
    assert again.id == job.id
    assert again.attempts == 1
    with pytest.raises(LeaseLost):
        await remote.complete(job)


async def test_cancel_and_its_errors(remote: RemoteClient) -> None:
    job_id = await remote.push(b"x")
    await remote.cancel(job_id)
    assert (await remote.stats()).depth == 0
    with pytest.raises(JobNotFound):
        await remote.cancel(job_id)


async def test_duplicate_key_names_the_holder(remote: RemoteClient) -> None:
    first = await remote.push(b"x", key="only-one")
    with pytest.raises(DuplicateKey) as caught:
        await remote.push(b"y", key="only-one")
    assert caught.value.existing_id == first


async def test_long_poll_claim_gets_a_job_pushed_while_it_waits(remote: RemoteClient) -> None:
    waiting = asyncio.create_task(remote.claim("w", ["slow"], max_jobs=1, wait_s=30))
    job_id = await remote.push(b"late", queue="slow")
    [job] = await asyncio.wait_for(waiting, 20)
    assert job.id == job_id


async def test_claim_stream_sends_jobs_as_they_come(remote: RemoteClient) -> None:
    first = await remote.push(b"1", queue="s")
    received: list[str] = []
    stream = remote.claim_stream("w", ["s"], max_jobs=2, wait_s=30)
    async for jobs in stream:
        received.extend(job.id for job in jobs)
        if len(received) == 1:
            second = await remote.push(b"2", queue="s")
    assert received == [first, second]


async def test_claim_stream_ends_when_the_wait_ends(remote: RemoteClient) -> None:
    batches = [jobs async for jobs in remote.claim_stream("w", ["empty"], max_jobs=5, wait_s=0.2)]
    assert batches == []


async def test_bad_input_is_refused_before_sending(remote: RemoteClient) -> None:
    with pytest.raises(InvalidInput) as caught:
        await remote.push("text")  # type: ignore[arg-type]
    assert caught.value.field == "payload"
    with pytest.raises(InvalidInput) as caught:
        await remote.push(b"x", queue="")
    assert caught.value.field == "queue"
    with pytest.raises(InvalidInput) as caught:
        await remote.claim("w", max_jobs=0)
    assert caught.value.field == "max_jobs"
    assert remote.pushes.batches == 0


async def test_push_many_reports_each_bad_item_and_pushes_the_rest(remote: RemoteClient) -> None:
    results = await remote.push_results(
        [NewJob(b"ok", id="good-1"), NewJob(b"bad", queue="no spaces"), NewJob(b"ok2")]
    )
    assert results[0] == "good-1"
    assert isinstance(results[1], InvalidInput)
    assert results[1].field == "queue"
    assert isinstance(results[2], str)
    assert (await remote.stats()).depth == 2


async def test_osqueue_connect_is_the_public_entry_point(
    queue_url: str, broker_server: BrokerServer
) -> None:
    async with osqueue.connect(queue_url, config=fast_config()) as q:
        assert isinstance(q, RemoteClient)
        await q.push(b"via osqueue.connect")
        assert (await q.stats()).depth == 1


async def test_embedded_starts_a_broker_only_when_none_is_live(queue_url: str) -> None:
    async with connect(queue_url, embedded=True, config=fast_config()) as q:
        assert not isinstance(q, RemoteClient)
        await q.push(b"x")
        [job] = await q.claim("w")
        await q.complete(job)
        doc = await read_document(queue_url)
        assert doc.broker is not None
        assert doc.broker.address is None
    doc = await read_document(queue_url)  # closing stopped the broker: the lease is released
    assert doc.stats.completed == 1
    # a live broker is told by a new version (it renews every third of its lease)
    server = BrokerServer(queue_url, ServerConfig(listen="127.0.0.1:0"), BrokerConfig(lease_s=1.0))
    async with server, connect(queue_url, embedded=True, config=fast_config()) as q:
        assert isinstance(q, RemoteClient)
        assert (await q.stats()).broker_address == server.address


def test_sync_twin_from_several_threads(queue_url: str) -> None:
    """The blocking client, with the broker running on another loop thread."""
    from concurrent.futures import ThreadPoolExecutor

    from osqueue.client.loop_thread import LoopThread

    broker_loop = LoopThread("test-broker")
    server = BrokerServer(queue_url, ServerConfig(listen="127.0.0.1:0"))
    broker_loop.run(server.start())
    try:
        with osqueue.sync.connect(queue_url, config=fast_config()) as q:
            with ThreadPoolExecutor(8) as pool:
                ids = list(pool.map(lambda i: q.push(b"%d" % i), range(64)))
            assert len(set(ids)) == 64
            jobs = q.claim("w", max_jobs=63)
            assert len(jobs) == 63
            for job in jobs[1:]:
                q.complete(job)
            errors, [last] = q.complete_and_claim(jobs[:1], "w", max_jobs=5)
            assert errors == [None]
            assert sorted([last.id, *(job.id for job in jobs)]) == sorted(ids)
            q.complete(last)
            assert q.stats().completed == 64
    finally:
        broker_loop.run(server.stop())
        broker_loop.close()
