"""Results over gRPC: completions carrying results, the Result long poll, its errors,
compatibility with clients and brokers that predate results, failover, the sync twin."""

from __future__ import annotations

import asyncio
from typing import Any

import grpc
import pytest
from remote_helpers import fast_config, quiet_broker_config, read_document

import osqueue
import osqueue.sync
from osqueue.api import EncodedResult, JobResult, NewJob
from osqueue.client.remote import RemoteClient, connect
from osqueue.errors import InvalidInput, JobNotFound
from osqueue.server.runner import BrokerServer
from osqueue.server.server import ServerConfig
from osqueue.wire._pb import queue_pb2 as pb
from osqueue.wire._pb import queue_pb2_grpc as pb_grpc


@pytest.mark.parametrize(
    "value", [b"\x00bytes", "text", {"rows": [1, 2], "ok": True}, None, "x" * 5000]
)
async def test_a_result_completed_remotely_reads_back_the_same(
    remote: RemoteClient, queue_url: str, value: object
) -> None:
    job_id = await remote.push(b"p", result_ttl_s=600.0)
    (job,) = await remote.claim("w")
    await remote.complete(job, result=value)
    answer = await remote.result(job_id)
    assert (answer.status, answer.value, answer.attempts) == ("done", value, 1)
    assert answer.finished_at is not None
    entry = (await read_document(queue_url)).finished.get(job_id)
    assert entry is not None
    assert entry.ttl_s == 600.0
    assert (entry.result is None) == (value is None)


async def test_the_long_poll_answers_when_the_job_completes(
    remote: RemoteClient, broker_server: BrokerServer
) -> None:
    job_id = await remote.push(b"p", result_ttl_s=600.0)
    entered = watch_parking(broker_server)
    waiting = asyncio.ensure_future(remote.result(job_id, wait_s=30.0))
    (job,) = await remote.claim("w")
    await entered.wait()
    assert broker_server.broker is not None
    assert job_id in broker_server.broker._waiters.results
    await remote.complete(job, result=[1, 2, 3])
    answer = await asyncio.wait_for(waiting, 10.0)
    assert answer.value == [1, 2, 3]


def watch_parking(server: BrokerServer) -> asyncio.Event:
    """An event set once a ``result()`` call has reached the broker's waiters (it
    parks before it next yields, if its job has not finished)."""
    broker = server.broker
    assert broker is not None
    entered = asyncio.Event()
    waiters = broker._waiters
    original = waiters.finished

    async def watched(*args: Any, **kwargs: Any) -> Any:
        call = original(*args, **kwargs)
        entered.set()
        return await call

    waiters.finished = watched  # type: ignore[method-assign]
    return entered


async def test_a_wait_that_runs_out_answers_the_live_status(remote: RemoteClient) -> None:
    job_id = await remote.push(b"p", result_ttl_s=600.0)
    assert await remote.result(job_id, wait_s=0.2) == JobResult("queued")


async def test_dead_and_cancelled_over_the_wire(remote: RemoteClient) -> None:
    dead = await remote.push(b"p", max_attempts=1, result_ttl_s=600.0)
    (job,) = await remote.claim("w")
    await remote.fail(job, error="no luck")
    cancelled = await remote.push(b"q", result_ttl_s=600.0)
    await remote.cancel(cancelled)
    assert await remote.result(dead) == JobResult(
        "dead", None, "no luck", 1, (await remote.result(dead)).finished_at
    )
    assert (await remote.result(cancelled)).status == "cancelled"


async def test_unknown_ids_and_bad_input_name_the_field(remote: RemoteClient) -> None:
    with pytest.raises(JobNotFound):
        await remote.result("01JD0000000000000000000000")
    with pytest.raises(InvalidInput) as info:
        await remote.result("not an id!")
    assert info.value.field == "job_id"
    with pytest.raises(InvalidInput) as info:
        await remote.push(b"x", result_ttl_s=-1.0)
    assert info.value.field == "result_ttl_s"
    await remote.push(b"x")
    (job,) = await remote.claim("w")
    with pytest.raises(InvalidInput) as info:
        await remote.complete(job, result=object())
    assert info.value.field == "result"


async def test_the_service_checks_what_the_client_would(broker_server: BrokerServer) -> None:
    """A client that skips the checks gets INVALID_ARGUMENT naming the field."""
    async with grpc.aio.insecure_channel(broker_server.address) as channel:
        stub = pb_grpc.QueueStub(channel)  # type: ignore[misc]
        response = await stub.Push(
            pb.PushRequest(jobs=[pb.NewJob(id="a1", queue="q", result_ttl_s=-3.0)])
        )
        assert response.results[0].status.field == "jobs[0].result_ttl_s"
        await stub.Push(pb.PushRequest(jobs=[pb.NewJob(id="a2", queue="q")]))
        claimed = await stub.Claim(pb.ClaimRequest(worker="w", queues=["q"], max_jobs=1))
        ref = pb.JobRef(id="a2", token=claimed.jobs[0].token)
        ref.result.CopyFrom(pb.ResultValue(kind=pb.RESULT_KIND_JSON, data=b"{nope"))
        done = await stub.Complete(pb.JobRefsRequest(jobs=[ref]))
        assert done.results[0].field == "jobs[0].result.value"
        ref.result.kind = pb.RESULT_KIND_UNSPECIFIED
        done = await stub.Complete(pb.JobRefsRequest(jobs=[ref]))
        assert done.results[0].field == "jobs[0].result.kind"
        with pytest.raises(grpc.aio.AioRpcError) as info:
            await stub.Result(pb.ResultRequest(id="a2", wait_s=-1.0))
        assert info.value.code() == grpc.StatusCode.INVALID_ARGUMENT
        with pytest.raises(grpc.aio.AioRpcError) as info:
            await stub.Result(pb.ResultRequest(id="nope"))
        assert info.value.code() == grpc.StatusCode.NOT_FOUND
        # a completion without a result (what an older client sends) still completes
        ref.ClearField("result")
        done = await stub.Complete(pb.JobRefsRequest(jobs=[ref]))
        assert done.results[0].code == pb.CODE_OK
        answer = await stub.Result(pb.ResultRequest(id="a2"))
        assert (answer.status, answer.HasField("value")) == ("done", False)


async def test_results_ride_with_complete_and_claim(remote: RemoteClient, queue_url: str) -> None:
    ids = await remote.push_many([NewJob(b"%d" % i, result_ttl_s=600.0) for i in range(3)])
    held = await remote.claim("w", max_jobs=2)
    before = (await read_document(queue_url)).version
    errors, claimed = await remote.complete_and_claim(
        held, "w", max_jobs=5, results=[EncodedResult("text", b"one"), {"two": 2}]
    )
    assert errors == [None, None]
    assert [j.id for j in claimed] == [ids[2]]
    assert (await read_document(queue_url)).version == before + 1
    assert (await remote.result(ids[0])).value == "one"
    assert (await remote.result(ids[1])).value == {"two": 2}
    assert await remote.complete_many(claimed, [b"three"]) == [None]
    assert (await remote.result(ids[2])).value == b"three"


async def test_a_worker_over_grpc_keeps_its_handlers_results(remote: RemoteClient) -> None:
    ids = await remote.push_many([NewJob(b"%d" % i, result_ttl_s=600.0) for i in range(6)])
    worker = osqueue.Worker(remote, lambda job: {"n": int(job.payload)}, concurrency=3)
    worker_task = asyncio.create_task(worker.run())
    try:
        answers = await asyncio.gather(*(remote.result(i, wait_s=20.0) for i in ids))
    finally:
        worker_task.cancel()
        await asyncio.gather(worker_task, return_exceptions=True)
    assert [a.value for a in answers] == [{"n": i} for i in range(6)]


async def test_a_result_survives_a_failover(queue_url: str) -> None:
    first = BrokerServer(queue_url, ServerConfig(listen="127.0.0.1:0"), quiet_broker_config())
    await first.start()
    client = await connect(queue_url, config=fast_config())
    try:
        job_id = await client.push(b"p", result_ttl_s=600.0)
        waiting = asyncio.ensure_future(client.result(job_id, wait_s=30.0))
        (job,) = await client.claim("w")
        await client.complete(job, result="before the failover")
        assert (await waiting).value == "before the failover"
        other = await client.push(b"q", result_ttl_s=600.0)
        entered = watch_parking(first)
        parked = asyncio.ensure_future(client.result(other, wait_s=30.0))
        await entered.wait()
        await first.stop()  # the parked call is told to find the broker again
        async with BrokerServer(
            queue_url, ServerConfig(listen="127.0.0.1:0"), quiet_broker_config()
        ):
            assert (await client.result(job_id)).value == "before the failover"
            (job,) = await client.claim("w")
            await client.complete(job, result="after")
            assert (await asyncio.wait_for(parked, 20.0)).value == "after"
    finally:
        await client.close()


def test_the_sync_twin_reads_results(queue_url: str) -> None:
    from osqueue.client.loop_thread import LoopThread

    broker_loop = LoopThread("test-broker")
    server = BrokerServer(queue_url, ServerConfig(listen="127.0.0.1:0"))
    broker_loop.run(server.start())
    try:
        with osqueue.sync.connect(queue_url, config=fast_config()) as q:
            job_id = q.push(b"x", result_ttl_s=60)
            (job,) = q.claim("w")
            q.complete(job, result={"sync": True})
            assert q.result(job_id, wait_s=1.0).value == {"sync": True}
    finally:
        broker_loop.run(server.stop())
        broker_loop.close()


async def test_a_result_given_without_a_ttl_is_kept_an_hour(
    remote: RemoteClient, queue_url: str
) -> None:
    """Issue 26: a result given over gRPC, no TTL set anywhere, is kept (an hour)."""
    job_id = await remote.push(b"p")
    (job,) = await remote.claim("w")
    await remote.complete(job, result=b"42")
    answer = await remote.result(job_id)
    assert (answer.status, answer.value) == ("done", b"42")
    entry = (await read_document(queue_url)).finished.get(job_id)
    assert entry is not None
    assert entry.ttl_s == 3600.0


async def test_a_queue_result_ttl_is_set_over_the_wire(
    remote: RemoteClient, queue_url: str
) -> None:
    settings = await remote.set_queue("img", result_ttl_s=120.0)
    assert settings.result_ttl_s == 120.0
    job_id = await remote.push(b"p", queue="img")
    (job,) = await remote.claim("w", ["img"])
    await remote.complete(job)  # no result: the queue's TTL keeps how it finished
    entry = (await read_document(queue_url)).finished.get(job_id)
    assert entry is not None
    assert entry.ttl_s == 120.0
    with pytest.raises(InvalidInput) as info:
        await remote.set_queue("img", result_ttl_s=-1.0)
    assert info.value.field == "result_ttl_s"
    assert (await remote.set_queue("img", result_ttl_s=0.0)).result_ttl_s is None
