"""Schedules, queue settings and dependencies over gRPC, and what older peers see."""

from __future__ import annotations

import grpc
import pytest
from remote_helpers import read_document

from osqueue.api import NewJob, QueueSettings, Scheduling
from osqueue.client.remote import RemoteClient
from osqueue.errors import InvalidInput, JobNotFound
from osqueue.server.runner import BrokerServer
from osqueue.wire._pb import queue_pb2 as pb
from osqueue.wire._pb import queue_pb2_grpc as pb_grpc


async def test_schedules_round_trip(remote: RemoteClient, queue_url: str) -> None:
    assert isinstance(remote, Scheduling)
    info = await remote.schedule(
        "nightly",
        queue="reports",
        cron="0 3 * * *",
        tz="Europe/Paris",
        payload=b'{"kind": "nightly"}',
        priority=2,
        max_attempts=3,
        catch_up="skip",
    )
    assert (info.cron, info.tz, info.catch_up, info.priority) == (
        "0 3 * * *",
        "Europe/Paris",
        "skip",
        2,
    )
    assert info.next_run_at > 0
    await remote.schedule("beat", queue="q", every_s=30)
    listed = await remote.schedules()
    assert [s.name for s in listed] == ["beat", "nightly"]
    assert listed[1] == info
    doc = await read_document(queue_url)
    assert sorted(s.name for s in doc.schedules) == ["beat", "nightly"]
    assert await remote.unschedule("beat") is True
    assert await remote.unschedule("beat") is False
    assert [s.name for s in await remote.schedules()] == ["nightly"]


async def test_a_schedule_is_paused_and_resumed_over_the_wire(
    remote: RemoteClient, queue_url: str
) -> None:
    paused = await remote.schedule("beat", queue="q", every_s=60.0, paused=True)
    assert paused.paused
    assert [s.paused for s in await remote.schedules()] == [True]
    stored = (await read_document(queue_url)).schedules.get("beat")
    assert stored is not None
    assert stored.paused
    resumed = await remote.schedule("beat", queue="q", every_s=60.0)
    assert not resumed.paused
    assert [s.paused for s in await remote.schedules()] == [False]
    with pytest.raises(InvalidInput) as err:  # the client's own check
        await remote.schedule("beat", queue="q", every_s=60.0, paused="yes")  # type: ignore[arg-type]
    assert err.value.field == "paused"


async def test_schedule_errors_name_the_field_before_and_after_sending(
    remote: RemoteClient, broker_server: BrokerServer
) -> None:
    with pytest.raises(InvalidInput) as err:  # the client's own check
        await remote.schedule("beat", queue="q", cron="* * *")
    assert err.value.field == "cron"
    channel = grpc.aio.insecure_channel(broker_server.address or "")
    try:
        stub = pb_grpc.QueueStub(channel)
        bad = pb.ScheduleRequest(schedule=pb.Schedule(name="beat", queue="q", cron="* * *"))
        with pytest.raises(grpc.aio.AioRpcError) as rpc:
            await stub.Schedule(bad)
        assert rpc.value.code() == grpc.StatusCode.INVALID_ARGUMENT
        assert "cron" in (rpc.value.details() or "")
        with pytest.raises(grpc.aio.AioRpcError) as rpc:
            await stub.Schedule(pb.ScheduleRequest())
        assert "schedule: is missing" in (rpc.value.details() or "")
    finally:
        await channel.close()


async def test_set_queue_round_trip_and_limits_hold_for_remote_workers(
    remote: RemoteClient, queue_url: str
) -> None:
    settings = await remote.set_queue("q", max_claimed=2, rate_per_s=100.0, burst=10)
    assert settings == QueueSettings("q", rate_per_s=100.0, burst=10, max_claimed=2)
    await remote.push_many([NewJob(b"x", queue="q") for _ in range(5)])
    assert len(await remote.claim("w", ["q"], max_jobs=5)) == 2
    paused = await remote.set_queue("q", paused=True, max_claimed=0)
    assert paused == QueueSettings("q", paused=True, rate_per_s=100.0, burst=10)
    assert (await remote.stats()).queues["q"].paused
    assert await remote.claim("w", ["q"], max_jobs=5) == []
    with pytest.raises(InvalidInput) as err:
        await remote.set_queue("q", burst=-1)
    assert err.value.field == "burst"
    doc = await read_document(queue_url)
    assert doc.queue_settings["q"].paused


async def test_a_queue_is_removed_over_the_wire_once_it_holds_nothing(
    remote: RemoteClient, queue_url: str
) -> None:
    await remote.push(b"x", queue="old")
    with pytest.raises(InvalidInput, match="queue 'old' still holds 1 live job") as err:
        await remote.set_queue("old", remove=True)
    assert err.value.field == "queue"
    (job,) = await remote.claim("w", ["old"])
    await remote.complete(job)
    stats = await remote.stats()
    assert (stats.queues["old"].depth, stats.queues["old"].completed_total) == (0, 1)
    assert await remote.set_queue("old", remove=True) == QueueSettings("old")
    assert "old" not in (await remote.stats()).queues
    assert "old" not in (await read_document(queue_url)).queue_totals


async def test_groups_and_parents_over_the_wire(remote: RemoteClient) -> None:
    await remote.set_queue("q", max_claimed_per_group=1)
    first = await remote.push(b"1", queue="q", group="tenant-7")
    second = await remote.push(b"2", queue="q", group="tenant-7")
    child = await remote.push(b"c", queue="q", after=[first, second], on_parent_failure="run")
    other = await remote.push(b"3", queue="q", group="tenant-8")
    jobs = await remote.claim("w", ["q"], max_jobs=10)
    assert [(j.id, j.group) for j in jobs] == [(first, "tenant-7"), (other, "tenant-8")]
    stats = await remote.stats()
    assert stats.queues["q"].waiting == 1
    await remote.complete(jobs[0])
    (nxt,) = await remote.claim("w", ["q"], max_jobs=10)
    assert nxt.id == second
    await remote.fail(nxt, error="boom", retry_after_s=0)  # attempt 1 of 5: back in the queue
    (again,) = await remote.claim("w", ["q"], max_jobs=10)
    await remote.cancel(again.id)  # a cancelled parent: the child runs anyway ("run")
    (last,) = await remote.claim("w", ["q"], max_jobs=10)
    assert last.id == child
    with pytest.raises(JobNotFound):
        await remote.push(b"x", queue="q", after=["01ARZ3NDEKTSV4RRFFQ69G5FAV"])
    with pytest.raises(InvalidInput) as err:
        await remote.push(b"x", queue="q", after=["no spaces"])
    assert err.value.field == "after[0]"


async def test_an_old_client_message_without_the_new_fields_is_a_plain_push(
    broker_server: BrokerServer, queue_url: str
) -> None:
    """What an older client sends (no group, no parents): a plain queued job."""
    channel = grpc.aio.insecure_channel(broker_server.address or "")
    try:
        stub = pb_grpc.QueueStub(channel)
        job = pb.NewJob(id="01ARZ3NDEKTSV4RRFFQ69G5FAV", queue="q", payload=b"old")
        response = await stub.Push(pb.PushRequest(jobs=[job]))
        assert response.results[0].status.code == 0
        bad = pb.NewJob(id="01ARZ3NDEKTSV4RRFFQ69G5FAW", queue="q", on_parent_failure="maybe")
        response = await stub.Push(pb.PushRequest(jobs=[bad]))
        assert response.results[0].status.field == "jobs[0].on_parent_failure"
    finally:
        await channel.close()
    stored = (await read_document(queue_url)).jobs["01ARZ3NDEKTSV4RRFFQ69G5FAV"]
    assert (stored.status, stored.group, stored.after) == ("queued", None, ())
