"""The CLI in a small terminal (80x24, tmux): ``osqueue top``'s worker table that
does not fit says how many workers it left out; a worker's failure warnings
stand on their own lines, above its line of counters."""

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


FAILING = """
def handle(job):
    raise ValueError("cannot handle " + job.payload.decode())
"""


def test_a_failure_warning_is_not_written_on_the_workers_counter_line(
    tmp_path: Path, tmux: Tmux
) -> None:
    queue = tmp_path / "queue"
    queue.mkdir()
    (tmp_path / "failing_handlers.py").write_text(FAILING)

    async def push() -> None:
        async with Broker(queue.as_uri(), BrokerConfig(address="127.0.0.1:1")) as broker:
            await broker.client().push(b"p-1", queue="q", max_attempts=1)

    asyncio.run(push())
    work = shlex.join(
        ["env", f"PYTHONPATH={SRC}:{tmp_path}", sys.executable, "-m", "osqueue.cli", "work",
         queue.as_uri(), "-H", "failing_handlers:handle", "-q", "q", "--embedded"]
    )  # fmt: skip
    tmux("new-session", "-d", "-s", "top", "-x", "80", "-y", "24", work)
    screen = tmux.wait("the failure and the counters", lambda s: "failed 1" in s and "p-1" in s)
    lines = screen.rstrip("\n").splitlines()
    warning = next(i for i, line in enumerate(lines) if "WARNING" in line)
    assert "failed:" in lines[warning]
    assert "Traceback (most recent call last):" in "\n".join(lines[warning + 1 : warning + 3])
    counters = [line for line in lines if "processed" in line]
    assert len(counters) == 1
    assert counters[0].startswith("running 0  processed 0")
    assert "WARNING" not in counters[0]
    assert lines[-1] == counters[0]  # the live line stays below the log
