"""A live queue for the dashboard tests: a broker with its gRPC server (token
required) on a ``file://`` queue, seeded through the remote client, and a
dashboard in this process on a free loopback port."""

from __future__ import annotations

from collections.abc import AsyncIterator
from dataclasses import dataclass
from pathlib import Path

import pytest

from osqueue.api import NewJob
from osqueue.broker import BrokerConfig
from osqueue.client.remote import RemoteClient, connect
from osqueue.dashboard.web import Dashboard, DashboardConfig
from osqueue.server.runner import BrokerServer
from osqueue.state import DOCUMENT_KEY, Document, decode

TOKEN = "admin-token-for-tests"


@dataclass(frozen=True)
class Seeded:
    """What the queue holds: 5 on ``emails`` (2 of them claimed by ``worker-1``),
    1 delayed on ``reports``, 1 dead on ``reports``, 3 completed on ``done``."""

    url: str
    directory: Path
    emails: list[str]
    claimed: list[str]
    delayed: str
    dead: str
    completed: list[str]

    def document(self) -> Document:
        return decode((self.directory / DOCUMENT_KEY).read_bytes())


@pytest.fixture
def queue_dir(tmp_path: Path) -> Path:
    path = tmp_path / "queue"
    path.mkdir()
    return path


@pytest.fixture
async def broker_server(queue_dir: Path) -> AsyncIterator[BrokerServer]:
    config = BrokerConfig(lease_s=3600.0, heartbeat_timeout_s=600.0)
    server = BrokerServer(
        queue_dir.as_uri(), listen="127.0.0.1:0", token=TOKEN, broker_config=config
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


def dashboard_config(url: str, **overrides: object) -> DashboardConfig:
    values: dict[str, object] = {
        "url": url,
        "listen": "127.0.0.1:0",
        "token": TOKEN,
        "refresh_s": 0.2,
        "poll_s": 0.3,
        "history_resolution_s": 0.2,
    }
    values.update(overrides)
    return DashboardConfig(**values)  # type: ignore[arg-type]


@pytest.fixture
async def board(seeded: Seeded) -> AsyncIterator[Dashboard]:
    dashboard = Dashboard(dashboard_config(seeded.url))
    await dashboard.start()
    try:
        yield dashboard
    finally:
        await dashboard.stop()
