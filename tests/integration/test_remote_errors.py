"""Status codes that mean something, per item and per call; admission backpressure."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator

import grpc
import pytest
from remote_helpers import FakeCalls, fast_config

from osqueue import errors
from osqueue.client.remote import RemoteClient
from osqueue.server.limits import Limits
from osqueue.server.runner import BrokerServer
from osqueue.server.server import RunningServer, ServerConfig, serve
from osqueue.storage import MemoryStorage
from osqueue.wire._pb import queue_pb2 as pb
from osqueue.wire._pb import queue_pb2_grpc as pb_grpc
from osqueue.wire.status import BROKER_ADDRESS_TRAILER, from_trailers

#: Separate channels get separate connections (gRPC shares them by default).
OWN_CONNECTION = [("grpc.use_local_subchannel_pool", 1)]


@pytest.fixture
async def fake() -> FakeCalls:
    return FakeCalls()


@pytest.fixture
async def fake_server(fake: FakeCalls) -> AsyncIterator[RunningServer]:
    server = await serve(fake, ServerConfig(listen="127.0.0.1:0"))
    try:
        yield server
    finally:
        await server.stop(0)


@pytest.fixture
async def stub(fake_server: RunningServer) -> AsyncIterator[pb_grpc.QueueAsyncStub]:
    async with grpc.aio.insecure_channel(fake_server.address, options=OWN_CONNECTION) as channel:
        yield pb_grpc.QueueStub(channel)  # type: ignore[misc]


# (error the broker's client raises, code of the item's Status, reason, extra check)
ITEM_ERRORS = [
    (errors.InvalidInput("bad", field="job_id"), pb.CODE_INVALID_ARGUMENT, pb.REASON_INVALID_INPUT),
    (errors.LeaseLost(), pb.CODE_FAILED_PRECONDITION, pb.REASON_LEASE_LOST),
    (errors.JobNotFound(), pb.CODE_NOT_FOUND, pb.REASON_JOB_NOT_FOUND),
    (errors.DuplicateKey(existing_id="j-0"), pb.CODE_ALREADY_EXISTS, pb.REASON_DUPLICATE_KEY),
    (errors.QueueFull(), pb.CODE_RESOURCE_EXHAUSTED, pb.REASON_QUEUE_FULL),
    (errors.MaybeCommitted(), pb.CODE_UNKNOWN, pb.REASON_MAYBE_COMMITTED),
    (errors.DocumentGone(), pb.CODE_DATA_LOSS, pb.REASON_DOCUMENT_GONE),
]


@pytest.mark.parametrize(("error", "code", "reason"), ITEM_ERRORS)
async def test_item_errors_keep_their_meaning(
    fake: FakeCalls,
    stub: pb_grpc.QueueAsyncStub,
    fake_server: RunningServer,
    error: errors.OsqueueError,
    code: int,
    reason: int,
) -> None:
    fake.error = error
    response = await stub.Cancel(pb.CancelRequest(ids=["job-1"]))
    [status] = response.results
    assert (status.code, status.reason) == (code, reason)
    if isinstance(error, errors.InvalidInput):
        assert status.field == "ids[0].job_id"
        assert status.message.startswith("ids[0].job_id: ")
    if isinstance(error, errors.DuplicateKey):
        assert status.existing_id == "j-0"
    # The remote client raises the same class the in-process client would.
    client = RemoteClient(MemoryStorage(), fast_config(address=fake_server.address))
    try:
        with pytest.raises(type(error)) as caught:
            await client.cancel("job-1")
        assert type(caught.value) is type(error)
    finally:
        await client.close()


CALL_ERRORS = [
    (errors.NotBroker(address="10.1.2.3:7070"), grpc.StatusCode.UNAVAILABLE),
    (errors.ShuttingDown(), grpc.StatusCode.UNAVAILABLE),
    (errors.BrokerUnavailable(), grpc.StatusCode.UNAVAILABLE),
    (errors.ResourceExhausted(), grpc.StatusCode.RESOURCE_EXHAUSTED),
    (errors.Unauthenticated(), grpc.StatusCode.UNAUTHENTICATED),
]


@pytest.mark.parametrize(("error", "code"), CALL_ERRORS)
async def test_broker_level_errors_fail_the_whole_call(
    fake: FakeCalls, stub: pb_grpc.QueueAsyncStub, error: errors.OsqueueError, code: object
) -> None:
    fake.error = error
    for call in (
        stub.Complete(pb.JobRefsRequest(jobs=[pb.JobRef(id="a", token=1)] * 3)),
        stub.Stats(pb.StatsRequest()),
        stub.Claim(pb.ClaimRequest(worker="w", queues=["q"], max_jobs=1)),
    ):
        with pytest.raises(grpc.aio.AioRpcError) as caught:
            await call
        assert caught.value.code() == code
        status = from_trailers(caught.value.trailing_metadata())
        assert status is not None
        assert type(errors_from(status)) is type(error)
        trailers = dict(caught.value.trailing_metadata())
        if isinstance(error, errors.NotBroker):
            assert trailers[BROKER_ADDRESS_TRAILER] == "10.1.2.3:7070"
            assert status.broker_address == "10.1.2.3:7070"
        else:
            assert BROKER_ADDRESS_TRAILER not in trailers


def errors_from(status: pb.Status) -> errors.OsqueueError:
    from osqueue.wire.status import from_status

    return from_status(status)


async def test_undecodable_request_is_invalid_argument_naming_request(
    fake_server: RunningServer, fake: FakeCalls
) -> None:
    async with grpc.aio.insecure_channel(fake_server.address) as channel:
        raw = channel.unary_unary("/osqueue.v1.Queue/Push")
        with pytest.raises(grpc.aio.AioRpcError) as caught:
            await raw(b"\x0a\xff\xff\xff\x0f truncated")
    assert caught.value.code() == grpc.StatusCode.INVALID_ARGUMENT
    assert caught.value.details().startswith("request: ")
    assert fake.entered == 0


async def test_a_server_without_a_client_answers_unavailable() -> None:
    server = await serve(None, ServerConfig(listen="127.0.0.1:0"))
    try:
        async with grpc.aio.insecure_channel(server.address) as channel:
            with pytest.raises(grpc.aio.AioRpcError) as caught:
                await pb_grpc.QueueStub(channel).Stats(pb.StatsRequest())  # type: ignore[misc]
        assert caught.value.code() == grpc.StatusCode.UNAVAILABLE
        status = from_trailers(caught.value.trailing_metadata())
        assert status is not None
        assert status.reason == pb.REASON_BROKER_UNAVAILABLE
    finally:
        await server.stop(0)


async def test_remote_client_follows_the_address_a_stepped_down_broker_gives() -> None:
    old, new = FakeCalls(), FakeCalls()
    new_server = await serve(new, ServerConfig(listen="127.0.0.1:0"))
    old.error = errors.NotBroker(address=new_server.address)
    old_server = await serve(old, ServerConfig(listen="127.0.0.1:0"))
    client = RemoteClient(MemoryStorage(), fast_config(address=old_server.address))
    try:
        job_id = await client.push(b"x", id="follow-me")
        assert job_id == "follow-me"
        assert new.pushed == ["follow-me"]
        assert old.entered == 1
        assert client.address == new_server.address
    finally:
        await client.close()
        await old_server.stop(0)
        await new_server.stop(0)


# ---------------------------------------------------------------------- the real broker


async def test_real_broker_statuses_name_fields_and_lease_lost(
    broker_server: BrokerServer,
) -> None:
    async with grpc.aio.insecure_channel(broker_server.address) as channel:
        stub = pb_grpc.QueueStub(channel)  # type: ignore[misc]
        pushed = await stub.Push(
            pb.PushRequest(
                jobs=[
                    pb.NewJob(id="ok-1", queue="q", payload=b"1"),
                    pb.NewJob(id="bad-1", queue="bad queue", payload=b"2"),
                    pb.NewJob(id="no/slash", queue="q", payload=b"3"),
                ]
            )
        )
        codes = [r.status.code for r in pushed.results]
        assert codes == [pb.CODE_OK, pb.CODE_INVALID_ARGUMENT, pb.CODE_INVALID_ARGUMENT]
        assert [r.status.field for r in pushed.results] == ["", "jobs[1].queue", "jobs[2].id"]
        assert "jobs[1].queue" in pushed.results[1].status.message
        claimed = await stub.Claim(pb.ClaimRequest(worker="w", queues=["q"], max_jobs=5))
        [job] = claimed.jobs
        assert job.id == "ok-1"
        done = await stub.Complete(
            pb.JobRefsRequest(
                jobs=[
                    pb.JobRef(id=job.id, token=job.token + 1),
                    pb.JobRef(id=job.id, token=job.token),
                ]
            )
        )
        assert [s.code for s in done.results] == [pb.CODE_FAILED_PRECONDITION, pb.CODE_OK]
        assert done.results[0].reason == pb.REASON_LEASE_LOST
        with pytest.raises(grpc.aio.AioRpcError) as caught:
            await stub.Claim(pb.ClaimRequest(worker="w", queues=["q"], max_jobs=0))
        assert caught.value.code() == grpc.StatusCode.INVALID_ARGUMENT
        assert caught.value.details().startswith("max_jobs: ")


# ---------------------------------------------------------------------- admission


async def test_a_flooding_connection_is_pushed_back_while_others_are_served(
    fake: FakeCalls,
) -> None:
    limits = Limits(max_in_flight_per_connection=2)
    server = await serve(fake, ServerConfig(listen="127.0.0.1:0", limits=limits))
    fake.gate.clear()
    try:
        async with (
            grpc.aio.insecure_channel(server.address, options=OWN_CONNECTION) as flood,
            grpc.aio.insecure_channel(server.address, options=OWN_CONNECTION) as polite,
        ):
            flooder = pb_grpc.QueueStub(flood)  # type: ignore[misc]
            claim = pb.ClaimRequest(worker="w", queues=["q"], max_jobs=1)  # held at the gate
            held = [asyncio.ensure_future(flooder.Claim(claim)) for _ in range(2)]
            await fake.wait_entered(2)
            with pytest.raises(grpc.aio.AioRpcError) as caught:
                await flooder.Claim(claim)
            assert caught.value.code() == grpc.StatusCode.RESOURCE_EXHAUSTED
            status = from_trailers(caught.value.trailing_metadata())
            assert status is not None
            assert status.reason == pb.REASON_RESOURCE_EXHAUSTED
            served = asyncio.ensure_future(pb_grpc.QueueStub(polite).Claim(claim))  # type: ignore[misc]
            await fake.wait_entered(3)  # the other connection got in
            fake.gate.set()
            assert [j.id for j in (await served).jobs] == ["job-1"]
            assert [len(r.jobs) for r in await asyncio.gather(*held)] == [1, 1]
        assert server.service.admission.calls == 0
    finally:
        fake.gate.set()
        await server.stop(0)


async def test_remote_client_backs_off_and_retries_when_pushed_back(
    fake: FakeCalls, monkeypatch: pytest.MonkeyPatch
) -> None:
    limits = Limits(max_in_flight_per_connection=1)
    server = await serve(fake, ServerConfig(listen="127.0.0.1:0", limits=limits))
    admission = server.service.admission
    refused = asyncio.Event()
    check = admission._check

    def spy(peer: str, size: int) -> None:
        try:
            check(peer, size)
        except errors.ResourceExhausted:
            refused.set()
            raise

    monkeypatch.setattr(admission, "_check", spy)
    client = RemoteClient(MemoryStorage(), fast_config(address=server.address))
    fake.gate.clear()
    try:
        first = asyncio.ensure_future(client.claim("w"))  # held at the gate
        await fake.wait_entered(1)
        second = asyncio.ensure_future(client.claim("w"))
        await asyncio.wait_for(refused.wait(), 10)  # pushed back with RESOURCE_EXHAUSTED...
        fake.gate.set()
        # ...and retried after a backoff, not surfaced to the caller.
        assert [len(jobs) for jobs in await asyncio.gather(first, second)] == [1, 1]
        assert fake.entered == 2
    finally:
        fake.gate.set()
        await client.close()
        await server.stop(0)
