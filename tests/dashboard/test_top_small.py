"""``osqueue top`` in a small terminal (80x24, tmux): the worker table that does not
fit says how many workers it left out, on the screen."""

from __future__ import annotations

import asyncio
import re
import shlex
import sys
from pathlib import Path

from dashboard_helpers import SRC
from test_top import Tmux, row, tmux

from osqueue.api import NewJob
from osqueue.broker import Broker, BrokerConfig

__all__ = ["tmux"]  # the fixture, imported for its use here

WORKERS = 30


def seed_workers(directory: Path) -> None:
    """A stopped queue where ``WORKERS`` workers hold one job each."""

    async def build() -> None:
        async with Broker(directory.as_uri(), BrokerConfig(address="127.0.0.1:1")) as broker:
            q = broker.client()
            await q.push_many([NewJob(b"j", queue="work") for _ in range(WORKERS)])
            for i in range(WORKERS):
                await q.claim(f"worker-{i:02d}", ["work"])

    asyncio.run(build())


def test_top_at_80x24_says_how_many_workers_it_cut(tmp_path: Path, tmux: Tmux) -> None:
    queue = tmp_path / "queue"
    queue.mkdir()
    seed_workers(queue)
    top = shlex.join(
        ["env", f"PYTHONPATH={SRC}", sys.executable, "-m", "osqueue.cli", "top", queue.as_uri()]
    )
    tmux("new-session", "-d", "-s", "top", "-x", "80", "-y", "24", top)
    screen = tmux.wait("the worker table", lambda s: "more" in s and "worker-00" in s)
    lines = screen.rstrip("\n").splitlines()
    assert len(lines) <= 24
    listed = [line for line in lines if re.search(r"\bworker-\d\d\b", line)]
    cut = re.search(r"… (\d+) more", screen)
    assert cut is not None, screen
    assert len(listed) + int(cut[1]) == WORKERS
    assert row(screen, "worker-00")[1:3] == ["1", "work"]
    assert "… " in lines[-1]  # the sign is the last line shown, not cut off itself
    tmux("send-keys", "-t", "top", "q")
