"""Retry and purge of dead jobs by filter over a real gRPC server: the queue, error
and time-of-death filters (and a page of dead segments) reach the dead jobs in
the document and in dead segments, as they do in process; ``osqueue dead``'s
own path (:func:`osqueue.inspect.admin.on_dead`) takes them through the remote
client; a bad filter is ``InvalidInput`` naming it."""

from __future__ import annotations

from collections.abc import AsyncIterator
from pathlib import Path

import pytest
from remote_helpers import fast_config, quiet_broker_config

from osqueue.client.remote import RemoteClient, connect
from osqueue.client.remote import dead as remote_dead
from osqueue.errors import InvalidInput
from osqueue.inspect.admin import DeadAction, DeadFilters, on_dead
from osqueue.server.runner import BrokerServer
from osqueue.server.server import ServerConfig
from osqueue.state.cold_dead import died_at
from osqueue.state.dead_letters import DeadRef
from osqueue.state.model import StoredJob
from osqueue.wire._pb import queue_pb2 as pb

QUEUES = ("a", "b")


@pytest.fixture
async def served(tmp_path: Path) -> AsyncIterator[tuple[BrokerServer, RemoteClient]]:
    """A gRPC server whose queues a and b hold 12 dead jobs each (errors e0, e1,
    e2 in turn), most in dead segments; and a remote client."""
    url = tmp_path.as_uri()
    settings = quiet_broker_config(
        dead_keep_jobs=2, dead_spill_jobs=2, segment_jobs=4, spill_above_jobs=None
    )
    server = BrokerServer(url, ServerConfig(listen="127.0.0.1:0"), settings)
    await server.start()
    try:
        remote = await connect(url, config=fast_config())
        try:
            for queue in QUEUES:
                for i in range(12):
                    await remote.push(b"p", queue=queue, max_attempts=1)
                    (job,) = await remote.claim("w", queues=[queue])
                    await remote.fail(job, error=f"e{i % 3}")
            await server.broker.segments.settled()
            assert server.broker.document.dead  # most of them in dead segments
            yield server, remote
        finally:
            await remote.close()
    finally:
        await server.stop()


async def depths(remote: RemoteClient) -> dict[str, tuple[int, int]]:
    stats = await remote.stats()
    return {q: (stats.queues[q].dead, stats.queues[q].depth) for q in QUEUES}


async def test_a_retry_by_queue_and_error_takes_exactly_those(
    served: tuple[BrokerServer, RemoteClient],
) -> None:
    server, remote = served
    assert await remote.retry_dead(queue="a", error="e1") == 4
    await server.broker.segments.settled()
    assert await depths(remote) == {"a": (8, 4), "b": (12, 0)}
    got = []
    for _ in range(4):
        (job,) = await remote.claim("w", queues=["a"], wait_s=10.0)
        got.append(job.id)
        await remote.complete(job)
    assert len(set(got)) == 4
    left = await server.broker.client().dead_jobs("a")
    assert sorted(j.last_error or "" for j in left) == ["e0"] * 4 + ["e2"] * 4


async def test_a_purge_by_time_of_death_and_queue_over_grpc(
    served: tuple[BrokerServer, RemoteClient],
) -> None:
    server, remote = served
    dead = await server.broker.client().dead_jobs("b")
    times = sorted(died_at(j).timestamp() for j in dead)
    cut = times[6]  # the first six deaths of b are before it
    assert await remote.purge_dead(queue="b", until=cut) == sum(t < cut for t in times)
    assert await remote.purge_dead(queue="b", since=cut) == sum(t >= cut for t in times)
    assert await depths(remote) == {"a": (12, 0), "b": (0, 0)}


async def test_the_cli_path_filters_through_the_remote_client(
    served: tuple[BrokerServer, RemoteClient],
) -> None:
    _, remote = served
    heard: list[tuple[int, int]] = []
    n = await on_dead(
        remote, DeadAction.retry, None, DeadFilters(queue="b"), progress=lambda *a: heard.append(a)
    )
    assert n == 12
    assert heard[-1] == (12, 0)  # a line per page of segments
    assert [left for _, left in heard] == sorted((left for _, left in heard), reverse=True)
    assert await depths(remote) == {"a": (12, 0), "b": (0, 12)}


async def test_a_page_of_dead_segments_then_the_rest(
    served: tuple[BrokerServer, RemoteClient],
) -> None:
    _, remote = served
    first = await remote.retry_dead(queue="a", max_segments=1)
    assert 0 < first < 12
    assert first + await remote.retry_dead(queue="a") == 12
    assert await depths(remote) == {"a": (0, 12), "b": (12, 0)}


@pytest.mark.parametrize(
    ("options", "field"),
    [({"queue": ""}, "queue"), ({"since": -1.0}, "since"), ({"max_segments": 0}, "max_segments")],
)
async def test_a_bad_filter_is_refused_naming_it(
    served: tuple[BrokerServer, RemoteClient], options: dict[str, object], field: str
) -> None:
    _, remote = served
    with pytest.raises(InvalidInput) as caught:
        await remote.retry_dead(**options)  # type: ignore[arg-type]
    assert caught.value.field == field
    assert (await remote.stats()).dead == 24


@pytest.mark.parametrize(
    ("request_", "field"),
    [
        (pb.DeadRequest(ids=["x"], all=True), "ids"),
        (pb.DeadRequest(queue=""), "queue"),
        (pb.DeadRequest(until=float("nan")), "until"),
        (pb.DeadRequest(max_segments=-1), "max_segments"),
    ],
)
async def test_the_server_checks_what_the_wire_carries(
    served: tuple[BrokerServer, RemoteClient], request_: pb.DeadRequest, field: str
) -> None:
    _, remote = served
    with pytest.raises(InvalidInput) as caught:
        await remote._rpc("RetryDead", request_)
    assert caught.value.field == field
    assert (await remote.stats()).dead == 24


async def test_no_ids_no_all_and_no_filter_takes_no_job(
    served: tuple[BrokerServer, RemoteClient],
) -> None:
    _, remote = served  # what a client sends with an empty list of ids
    assert (await remote._rpc("RetryDead", pb.DeadRequest())).count == 0
    assert (await remote.stats()).dead == 24


async def test_a_whole_run_goes_a_page_of_segments_per_call_each_segment_once(
    served: tuple[BrokerServer, RemoteClient], monkeypatch: pytest.MonkeyPatch
) -> None:
    server, remote = served
    monkeypatch.setattr(remote_dead, "PAGE_SEGMENTS", 1)
    reads: list[str] = []
    dead = server.broker.segments.dead
    read = dead.read

    async def counted(ref: DeadRef) -> list[StoredJob]:
        reads.append(ref.key)
        return await read(ref)

    monkeypatch.setattr(dead, "read", counted)
    segments = [r.key for r in server.broker.document.dead if r.queue == "a"]
    assert len(segments) >= 3
    heard: list[tuple[int, int]] = []
    n = await remote.retry_dead(queue="a", error="e1", progress=lambda *a: heard.append(a))
    assert n == 4
    assert sorted(reads) == sorted(segments)  # each once: the kept ones are passed over
    assert [left for _, left in heard] == list(range(len(segments) - 1, -1, -1))
    assert heard[-1] == (4, 0)
    assert await depths(remote) == {"a": (8, 4), "b": (12, 0)}
    assert await remote.purge_dead(queue="b") == 12  # every segment dropped: nothing passed
