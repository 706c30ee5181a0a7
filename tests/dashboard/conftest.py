"""A live queue for the dashboard tests: a broker with its gRPC server (token
required) on a ``file://`` queue, seeded through the remote client, and a
dashboard in this process on a free loopback port."""

from __future__ import annotations

from collections.abc import AsyncIterator
from pathlib import Path

import pytest
from dashboard_helpers import TOKEN, Seeded, dashboard_config

from osqueue.api import NewJob
from osqueue.broker import BrokerConfig
from osqueue.client.remote import RemoteClient, connect
from osqueue.dashboard.web import Dashboard
from osqueue.server.runner import BrokerServer
from osqueue.server.server import ServerConfig


@pytest.fixture
def queue_dir(tmp_path: Path) -> Path:
    path = tmp_path / "queue"
    path.mkdir()
    return path


@pytest.fixture
async def broker_server(queue_dir: Path) -> AsyncIterator[BrokerServer]:
    config = BrokerConfig(lease_s=3600.0, heartbeat_timeout_s=600.0)
    server = BrokerServer(
        queue_dir.as_uri(), ServerConfig(listen="127.0.0.1:0", token=TOKEN), config
    )
    await server.start()
    try:
        yield server
    finally:
        await server.stop()


@pytest.fixture
async def client(queue_dir: Path, broker_server: BrokerServer) -> AsyncIterator[RemoteClient]:
    remote = await connect(queue_dir.as_uri(), token=TOKEN, timeout_s=20.0)
    assert isinstance(remote, RemoteClient)
    try:
        yield remote
    finally:
        await remote.close()


@pytest.fixture
async def seeded(queue_dir: Path, client: RemoteClient) -> Seeded:
    emails = await client.push_many(
        [
            NewJob(f'{{"to": "user{i}@example.com", "n": {i}}}'.encode(), queue="emails")
            for i in range(5)
        ]
    )
    claimed = [j.id for j in await client.claim("worker-1", ["emails"], max_jobs=2)]
    delayed = await client.push(b"nightly", queue="reports", delay_s=3600)
    dead = await client.push(b"broken report", queue="reports", max_attempts=1)
    (job,) = await client.claim("worker-2", ["reports"])
    await client.fail(job, error="ValueError: the report is broken\n  in render()")
    completed = await client.push_many([NewJob(b"ok", queue="done") for _ in range(3)])
    for done in await client.claim("worker-3", ["done"], max_jobs=3):
        await client.complete(done)
    return Seeded(queue_dir.as_uri(), queue_dir, emails, claimed, delayed, dead, completed)


@pytest.fixture
async def board(seeded: Seeded) -> AsyncIterator[Dashboard]:
    dashboard = Dashboard(dashboard_config(seeded.url))
    await dashboard.start()
    try:
        yield dashboard
    finally:
        await dashboard.stop()
