"""Stored strings reach the terminal escaped (issue 23, weak spot 9): a worker's
error text, a worker's name and a broker's address carry ANSI and OSC
sequences, Rich markup and C1 controls; ``osqueue jobs``, ``status`` and
``top`` show them as visible escapes, on a terminal and off one, while
``--json`` stays JSON."""

from __future__ import annotations

import asyncio
import io
import json
import logging
import sys
from pathlib import Path

import pytest
from typer.testing import CliRunner, Result

from osqueue.api import NewJob
from osqueue.broker import Broker, BrokerConfig
from osqueue.cli import top
from osqueue.cli.app import app
from osqueue.cli.console import log_handler, printable, stdout
from osqueue.inspect.snapshot import SnapshotSource
from osqueue.state import DOCUMENT_KEY

HOSTILE_ERROR = (
    "boom\x1b[2J\x1b[31mred\x1b]8;;http://x.example\x07click\x1b]8;;\x07"
    "\rover\x08\x08written\x9b2Jc1 [link=http://markup.example]markup[/link] \u202eevil"
)
HOSTILE_WORKER = "w-[link=http://worker.example]x[/link]-[bold]b[/bold]"
RAW = ("\x1b[2J", "\x1b]8", "\x07", "\r", "\x08", "\x9b", "\u202e")


def seeded(directory: Path) -> str:
    """A stopped queue: one dead job on ``mail`` that failed with HOSTILE_ERROR,
    one job claimed by HOSTILE_WORKER."""
    url = directory.as_uri()

    async def build() -> None:
        async with Broker(url, BrokerConfig(address="127.0.0.1:1")) as broker:
            q = broker.client()
            await q.push_many([NewJob(b"x", queue="mail", max_attempts=1), NewJob(b"y")])
            (job,) = await q.claim("w-seed", ["mail"])
            await q.fail(job, error=HOSTILE_ERROR)
            await q.claim(HOSTILE_WORKER, ["default"])

    asyncio.run(build())
    return url


def invoke(*args: str, terminal: bool) -> Result:
    env = {"FORCE_COLOR": "1", "TERM": "xterm-256color"} if terminal else {"NO_COLOR": "1"}
    env["COLUMNS"] = "400"
    result = CliRunner().invoke(app, list(args), env=env)
    assert result.exit_code == 0, (result.stdout, result.stderr)
    return result


def assert_escaped(text: str) -> None:
    for raw in RAW:
        assert raw not in text, (raw, text)
    assert "\\x1b[2J" in text
    assert "\\x9b2J" in text
    assert "\\x07" in text


@pytest.mark.parametrize("terminal", [True, False], ids=["tty", "pipe"])
def test_jobs_shows_a_hostile_error_and_worker_escaped(tmp_path: Path, terminal: bool) -> None:
    url = seeded(tmp_path / "q")
    result = invoke("jobs", url, terminal=terminal)
    assert_escaped(result.stdout)
    assert "\x1b]8;" not in result.stdout  # no hyperlink from markup either
    assert "[link=http://markup.example]markup[/link]" in result.stdout
    assert HOSTILE_WORKER in result.stdout  # shown as typed, not read as markup
    assert "\\u202eevil" in result.stdout


def test_jobs_json_stays_json(tmp_path: Path) -> None:
    url = seeded(tmp_path / "q")
    result = invoke("jobs", url, "--status", "dead", "--json", terminal=True)
    (line,) = result.stdout.splitlines()
    assert json.loads(line)["last_error"] == HOSTILE_ERROR


@pytest.mark.parametrize("terminal", [True, False], ids=["tty", "pipe"])
def test_status_shows_a_tampered_broker_address_escaped(tmp_path: Path, terminal: bool) -> None:
    """Whoever can write the bucket chooses the broker's address in the document."""
    url = seeded(tmp_path / "q")
    path = tmp_path / "q" / DOCUMENT_KEY
    doc = json.loads(path.read_bytes())
    doc["broker"]["address"] = "10.0.0.1:7070" + HOSTILE_ERROR
    path.write_text(json.dumps(doc))
    result = invoke("status", url, terminal=terminal)
    assert_escaped(result.stdout)
    assert "10.0.0.1:7070boom\\x1b[2J" in result.stdout
    assert (
        json.loads(invoke("status", url, "--json", terminal=terminal).stdout)["broker"]["address"]
        == "10.0.0.1:7070" + HOSTILE_ERROR
    )


def test_top_shows_a_hostile_worker_and_address_escaped(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    url = seeded(tmp_path / "q")
    path = tmp_path / "q" / DOCUMENT_KEY
    doc = json.loads(path.read_bytes())
    doc["broker"]["address"] = HOSTILE_ERROR
    path.write_text(json.dumps(doc))

    async def snapshot() -> object:
        source = SnapshotSource(url, refresh_s=1.0)
        try:
            return await source.refresh()
        finally:
            await source.close()

    snap = asyncio.run(snapshot())
    frame = top.render(snap, top.Rates(), None, None, 0.0, problem="read failed\x1b[2J")  # type: ignore[arg-type]
    screen = io.StringIO()
    monkeypatch.setattr(sys, "stdout", screen)
    monkeypatch.setenv("FORCE_COLOR", "1")
    monkeypatch.setenv("COLUMNS", "400")
    console = stdout()
    assert console.is_terminal
    console.print(frame)
    shown = screen.getvalue()
    assert_escaped(shown)
    assert "\x1b]8;" not in shown
    assert HOSTILE_WORKER in shown
    assert "read failed\\x1b[2J" in shown


def test_printable_escapes_controls_and_keeps_text() -> None:
    assert printable("a\x1b[2Jb\x00\x7f\x9b\t\u2066z\nnext") == (
        "a\\x1b[2Jb\\x00\\x7f\\x9b\\x09\\u2066z\nnext"
    )
    assert printable("naïve 日本 [b]x[/b]") == "naïve 日本 [b]x[/b]"


def test_log_lines_quote_stored_strings_escaped(monkeypatch: pytest.MonkeyPatch) -> None:
    err = io.StringIO()
    monkeypatch.setattr(sys, "stderr", err)
    monkeypatch.setenv("FORCE_COLOR", "1")
    monkeypatch.setenv("COLUMNS", "400")
    record = logging.LogRecord(
        "osqueue.broker",
        logging.WARNING,
        __file__,
        1,
        "segment %s unreadable",
        (HOSTILE_ERROR,),
        None,
    )
    log_handler().emit(record)
    logged = err.getvalue()
    for raw in RAW:  # rich highlights the escapes' brackets, so look for the parts
        assert raw not in logged, (raw, logged)
    assert "\x1b]8;" not in logged
    assert "boom\\x1b" in logged
    assert "\\x9b" in logged
