"""``osqueue top`` the way a person uses it: in a terminal (tmux), reading the
screen, typing ``q``.

Each test runs its own tmux server on a private socket and kills only that
server.  Waiting is on what the screen shows (polled with a deadline), never a
fixed sleep.
"""

from __future__ import annotations

import io
import re
import shlex
import shutil
import subprocess
import sys
import time
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest
from dashboard_helpers import SRC, seed_stopped
from rich.console import Console

from osqueue.cli.top import RateMeter, render
from osqueue.inspect.snapshot import Snapshot
from osqueue.state import Claimed, ClaimOp, Complete, Document, Push, SetQueue, apply

DEADLINE_S = 45.0


class Tmux:
    def __init__(self, tmp_path: Path) -> None:
        tmux = shutil.which("tmux")
        assert tmux is not None, "tmux is missing: run make setup (apt: tmux)"
        config = tmp_path / "tmux.conf"
        config.write_text("set -g remain-on-exit on\nset -g status off\n")
        self.base = [tmux, "-L", f"osqueue-test-{uuid.uuid4().hex[:12]}", "-f", str(config)]

    def __call__(self, *args: str) -> str:
        done = subprocess.run(
            [*self.base, *args], capture_output=True, text=True, timeout=30, check=True
        )
        return done.stdout

    def screen(self, *, history: bool = False) -> str:
        """The pane as shown (with ``history``: and the lines scrolled off it)."""
        return self("capture-pane", "-p", "-t", "top", *(["-S", "-"] if history else []))

    def wait(self, what: str, ready: Callable[[str], bool], *, history: bool = False) -> str:
        deadline = time.monotonic() + DEADLINE_S
        shown = ""
        while time.monotonic() < deadline:
            shown = self.screen(history=history)
            if ready(shown):
                return shown
            time.sleep(0.1)  # poll the screen: tmux has no "screen changed" event
        raise AssertionError(f"waited {DEADLINE_S}s for {what}; the screen:\n{shown}")

    def kill(self) -> None:
        subprocess.run([*self.base, "kill-server"], capture_output=True, timeout=30, check=False)


@pytest.fixture
def tmux(tmp_path: Path) -> Iterator[Tmux]:
    session = Tmux(tmp_path)
    try:
        yield session
    finally:
        session.kill()


def row(screen: str, name: str) -> list[str]:
    for line in screen.splitlines():
        cells = [c for c in line.split() if c.strip("│┃")]  # without the column rules
        if cells and cells[0] == name:
            return cells
    raise AssertionError(f"no row {name!r} on the screen:\n{screen}")


def test_top_shows_the_queue_and_quits_on_q(tmp_path: Path, tmux: Tmux) -> None:
    queue = tmp_path / "queue"
    queue.mkdir()
    seed_stopped(queue)
    top = " ".join(
        shlex.quote(part)
        for part in [
            "env",
            f"PYTHONPATH={SRC}",
            sys.executable,
            "-m",
            "osqueue.cli",
            "top",
            queue.as_uri(),
            "--interval-s",
            "0.5",
        ]
    )
    command = f'{top}; echo "top exited with $?"'
    tmux("new-session", "-d", "-s", "top", "-x", "120", "-y", "32", command)
    # the second read gives rates (counter deltas): the total row then shows 0.0 push/s
    screen = tmux.wait("the queues and their rates", lambda s: "total" in s and "0.0" in s)
    (tmp_path / "screen.txt").write_text(screen)
    assert "q quits" in screen
    header = ["queue", "depth", "ready", "claimed", "dead", "push/s", "complete/s", "oldest"]
    assert row(screen, "queue") == header
    emails = row(screen, "emails")
    assert emails[1:5] == ["3", "3", "2", "0"]
    assert emails[5:7] == ["0.0", "0.0"]  # per-queue rates, with two queues too
    assert re.fullmatch(r"\d+(\.\d)?[smh]", emails[7])
    assert row(screen, "reports")[1:5] == ["1", "0", "0", "1"]
    total = row(screen, "total")
    assert total[1:4] == ["4", "2", "1"]
    assert total[4:6] == ["0.0", "0.0"]
    worker = row(screen, "worker-1")
    assert worker[1:3] == ["2", "emails"]
    assert "commits/s" in screen

    tmux("send-keys", "-t", "top", "q")
    # the shell around top prints its exit status once it has exited; when the pane
    # dies tmux may scroll that line off the screen, so look in the history too
    screen = tmux.wait("top to exit", lambda s: "top exited with" in s, history=True)
    assert "top exited with 0" in screen
    assert "q quits" not in screen  # the live view is gone with its alternate screen


def test_top_names_a_missing_queue_in_one_line(tmp_path: Path) -> None:
    done = subprocess.run(
        [sys.executable, "-m", "osqueue.cli", "top", (tmp_path / "nothing").as_uri()],
        capture_output=True,
        text=True,
        timeout=60,
        env={"PYTHONPATH": str(SRC), "PATH": "/usr/bin:/bin"},
        check=False,
    )
    assert done.returncode == 4, done.stderr
    assert "no queue at" in done.stderr


def snap(doc: Document, t: float) -> Snapshot:
    return Snapshot("memory://t", doc, str(doc.version), t, 0.0, 0)


def test_rate_meter_rates_are_counter_deltas_per_queue_and_in_total() -> None:
    doc, _ = apply(
        Document.empty(), [Push(id=f"a{i}", payload=b"x", queue="only") for i in range(4)], 0
    )
    more, _ = apply(doc, [Push(id=f"b{i}", payload=b"x", queue="only") for i in range(10)], 1)
    meter = RateMeter()
    assert meter.update(snap(doc, 100.0)).total is None  # one read: no rate yet
    rates = meter.update(snap(more, 102.0))
    assert rates.total == {"pushed": 5.0, "completed": 0.0, "failed": 0.0, "dead": 0.0}
    assert rates.per_queue == {"only": rates.total}
    two, _ = apply(more, [Push(id="c", payload=b"x", queue="other")], 2)
    # two queues: each has its own rates, from the document's per-queue counts
    assert meter.update(snap(two, 103.0)).per_queue == {
        "only": {"pushed": 0.0, "completed": 0.0, "failed": 0.0, "dead": 0.0},
        "other": {"pushed": 1.0, "completed": 0.0, "failed": 0.0, "dead": 0.0},
    }


def test_top_lists_a_drained_queue_with_its_rates_and_marks_a_paused_one() -> None:
    doc, _ = apply(
        Document.empty(),
        [Push(id=f"e{i}", payload=b"x", queue="emails") for i in range(4)]
        + [Push(id="r", payload=b"x", queue="reports"), SetQueue("reports", paused=True)],
        0,
    )
    held, (claimed,) = apply(doc, [ClaimOp("w", ("emails",), 4)], 1)
    assert isinstance(claimed, Claimed)
    done, _ = apply(
        held, [Complete(j.id, j.claim.token) for j in claimed.jobs if j.claim is not None], 2
    )
    meter = RateMeter()
    meter.update(snap(doc, 100.0))
    rates = meter.update(snap(done, 102.0))
    console = Console(width=120, record=True, file=io.StringIO())
    console.print(render(snap(done, 102.0), rates, None, None, 102.0))
    screen = console.export_text()
    assert row(screen, "emails")[1:7] == ["0", "0", "0", "0", "0.0", "2.0"]
    assert row(screen, "reports")[1:3] == ["paused", "1"]
