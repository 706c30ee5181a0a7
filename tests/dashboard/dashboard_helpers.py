"""Helpers shared by the dashboard tests (fixtures live in conftest.py): the
token, the seeded queue's shape, the dashboard's test settings, and a queue
seeded by an in-process broker for the tests that run ``osqueue`` processes."""

from __future__ import annotations

import asyncio
from dataclasses import dataclass
from pathlib import Path

import osqueue
from osqueue.api import NewJob
from osqueue.broker import Broker, BrokerConfig
from osqueue.dashboard.board import DashboardConfig
from osqueue.inspect.options import ClientOptions
from osqueue.state import DOCUMENT_KEY, Document, decode

TOKEN = "admin-token-for-tests"
#: the source tree under test, for ``osqueue`` processes (PYTHONPATH)
SRC = Path(osqueue.__file__).resolve().parents[1]


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


def dashboard_config(url: str, token: str | None = TOKEN, **overrides: object) -> DashboardConfig:
    values: dict[str, object] = {
        "client": ClientOptions(url, token=token),
        "listen": "127.0.0.1:0",
        "refresh_s": 0.2,
        "poll_s": 0.3,
        "history_resolution_s": 0.2,
    }
    values.update(overrides)
    return DashboardConfig(**values)  # type: ignore[arg-type]


def seed_stopped(directory: Path) -> dict[str, str]:
    """A stopped queue: emails 5 jobs, 2 claimed by worker-1; reports 1 delayed, 1 dead."""

    async def build() -> dict[str, str]:
        async with Broker(directory.as_uri(), BrokerConfig(address="127.0.0.1:1")) as broker:
            q = broker.client()
            await q.push_many([NewJob(b"e", queue="emails") for _ in range(5)])
            await q.claim("worker-1", ["emails"], max_jobs=2)
            await q.push(b"later", queue="reports", delay_s=3600)
            dead = await q.push(b"bad", queue="reports", max_attempts=1)
            (job,) = await q.claim("worker-2", ["reports"])
            await q.fail(job, error="boom")
            return {"dead": dead}

    return asyncio.run(build())
