"""One push that names an id twice (issue 23, weak spot 10): the same job twice is a
repeat, applied once; two different jobs under one id are both refused, naming it."""

from __future__ import annotations

from pathlib import Path

import pytest
from remote_helpers import fast_config, quiet_broker_config

import osqueue
from osqueue.client.remote import RemoteClient, connect
from osqueue.errors import InvalidInput
from osqueue.server.runner import BrokerServer
from osqueue.server.server import ServerConfig
from osqueue.storage import MemoryStorage


def config() -> osqueue.BrokerConfig:
    return osqueue.BrokerConfig(lease_s=10.0, heartbeat_timeout_s=30.0)


@pytest.mark.parametrize(
    "other",
    [
        osqueue.NewJob(b"second", id="dup"),  # another payload
        osqueue.NewJob(b"first", id="dup", priority=3),  # another option
        osqueue.NewJob(b"first", id="dup", queue="elsewhere"),
    ],
)
async def test_two_jobs_under_one_id_in_one_push_are_refused_naming_the_id(
    other: osqueue.NewJob,
) -> None:
    async with osqueue.Broker(MemoryStorage(), config()) as broker:
        q = broker.client()
        jobs = [osqueue.NewJob(b"first", id="dup"), osqueue.NewJob(b"x", id="fine"), other]
        results = await q.push_results(jobs)
        assert results[1] == "fine"
        for refused in (results[0], results[2]):
            assert isinstance(refused, InvalidInput)
            assert refused.field == "id"
            assert "'dup'" in str(refused)
            assert "twice" in str(refused)
        assert "dup" not in broker.document.jobs  # neither payload was taken
        with pytest.raises(InvalidInput, match="'dup'"):
            await q.push_many(jobs)
        assert (await q.stats()).queues["default"].depth == 1


async def test_the_same_job_twice_in_one_push_is_applied_once() -> None:
    async with osqueue.Broker(MemoryStorage(), config()) as broker:
        q = broker.client()
        job = osqueue.NewJob(b"same", id="twice")
        assert await q.push_many([job, osqueue.NewJob(b"same", id="twice")]) == ["twice"] * 2
        assert broker.document.jobs["twice"].payload == b"same"
        assert (await q.stats()).queues["default"].depth == 1


async def test_over_grpc_two_jobs_under_one_id_are_refused_naming_the_id(tmp_path: Path) -> None:
    url = tmp_path.as_uri()
    async with BrokerServer(url, ServerConfig(listen="127.0.0.1:0"), quiet_broker_config()):
        client = await connect(url, config=fast_config())
        assert isinstance(client, RemoteClient)
        try:
            jobs = [osqueue.NewJob(b"one", id="dup"), osqueue.NewJob(b"two", id="dup")]
            results = await client.push_results(jobs)
            for refused in results:
                assert isinstance(refused, InvalidInput)
                assert "'dup'" in str(refused)
            assert await client.push_many([osqueue.NewJob(b"one", id="dup")] * 2) == ["dup"] * 2
            (job,) = await client.claim("w", max_jobs=2)
            assert job.payload == b"one"
        finally:
            await client.close()
