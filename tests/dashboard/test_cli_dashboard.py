"""``osqueue dashboard`` as a command: the listen rule, the missing extra, and a
real process that announces itself, serves, and stops on SIGTERM."""

from __future__ import annotations

import json
import re
import signal
import subprocess
import sys
import urllib.error
import urllib.request
from pathlib import Path

import pytest
from dashboard_helpers import SRC, TOKEN, seed_stopped
from typer.testing import CliRunner

import osqueue.dashboard
from osqueue.cli import dashboard as dashboard_command
from osqueue.cli import exits
from osqueue.cli.app import app
from osqueue.cli.options import CONNECTION
from osqueue.errors import InvalidInput, MissingExtra
from osqueue.inspect.options import ClientOptions


def test_a_public_listen_without_a_token_is_refused(tmp_path: Path) -> None:
    result = CliRunner().invoke(
        app, ["dashboard", tmp_path.as_uri(), "--listen", "0.0.0.0:8080"], env={}
    )
    assert result.exit_code == 3, result.output
    assert "not a loopback address" in result.stderr
    assert "--insecure" in result.stderr


def test_a_bad_allowed_host_is_refused_naming_the_option(tmp_path: Path) -> None:
    result = CliRunner().invoke(
        app, ["dashboard", tmp_path.as_uri(), "--allowed-host", "http://dash.example/"], env={}
    )
    assert result.exit_code == 3, result.output
    assert "allowed_hosts" in result.stderr
    assert "'http://dash.example/' is not a host name" in result.stderr


def test_help_lists_every_connection_option() -> None:
    result = CliRunner().invoke(app, ["dashboard", "--help"], env={"COLUMNS": "200"})
    assert result.exit_code == 0, result.output
    for option in CONNECTION:
        info = option.annotation.__metadata__[0]
        assert info.default in result.stdout, info.default
        assert info.envvar in result.stdout, info.envvar


@pytest.fixture
def boards(monkeypatch: pytest.MonkeyPatch) -> list[object]:
    """The boards ``osqueue dashboard`` builds, which then return at once instead
    of serving."""
    built: list[object] = []

    async def served(board: object, url: str) -> None:
        built.append(board)

    monkeypatch.setattr(dashboard_command, "_serve", served)
    return built


def test_the_connection_options_reach_the_client_of_the_actions(
    tmp_path: Path, boards: list[object]
) -> None:
    """A pinned fingerprint and the plaintext consent reach the client the actions
    open, and the token file is read once, as the admin login's token too."""
    token_file = tmp_path / "token"
    token_file.write_text(TOKEN + "\n")
    pin = ":".join(["AB"] * 32)
    url = tmp_path.as_uri()
    result = CliRunner().invoke(
        app,
        ["dashboard", url, "--tls-fingerprint", pin, "--allow-plaintext-token"],
        env={"OSQUEUE_TOKEN_FILE": str(token_file), "OSQUEUE_TLS_CA": "/ca.pem"},
    )
    assert result.exit_code == 0, (result.stdout, result.stderr)
    (board,) = boards
    assert board.actions.options == ClientOptions(  # type: ignore[attr-defined]
        url,
        token=TOKEN,
        tls_ca="/ca.pem",
        tls_fingerprint=pin,
        allow_plaintext_token=True,
        timeout_s=15.0,
    )
    assert board.access.token == TOKEN  # type: ignore[attr-defined]


def test_a_malformed_fingerprint_is_refused_at_start_naming_it(
    tmp_path: Path, boards: list[object]
) -> None:
    result = CliRunner().invoke(
        app, ["dashboard", tmp_path.as_uri(), "--tls-fingerprint", "12:34"], env={}
    )
    assert result.exit_code == exits.EXIT_CODES[InvalidInput], (result.stdout, result.stderr)
    assert "tls_fingerprint" in result.stderr
    assert boards == []


def test_without_the_extra_the_error_names_the_install_line(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setitem(sys.modules, "aiohttp", None)  # import aiohttp -> ImportError
    monkeypatch.delitem(sys.modules, "osqueue.dashboard.web", raising=False)
    monkeypatch.delitem(sys.modules, "osqueue.dashboard.pages", raising=False)
    monkeypatch.delitem(sys.modules, "osqueue.dashboard.board", raising=False)
    monkeypatch.delattr(osqueue.dashboard, "web", raising=False)
    with pytest.raises(MissingExtra, match=re.escape("pip install 'osqueue[dashboard]'")):
        dashboard_command._import_web()


def test_the_command_serves_until_sigterm(tmp_path: Path) -> None:
    queue = tmp_path / "queue"
    queue.mkdir()
    seed_stopped(queue)
    process = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "osqueue.cli",
            "dashboard",
            queue.as_uri(),
            "--listen",
            "127.0.0.1:0",
        ],
        stderr=subprocess.PIPE,
        text=True,
        env={
            "PYTHONPATH": str(SRC),
            "PATH": "/usr/bin:/bin",
            "OSQUEUE_DASHBOARD_ALLOWED_HOSTS": "dash.example other.example:1,third.example",
        },
    )
    try:
        assert process.stderr is not None
        lines = []
        for line in process.stderr:  # blocks until the next line: no sleeping
            lines.append(line)
            match = re.search(r"dashboard for \S+ at (http://127\.0\.0\.1:\d+)", line)
            if match:
                break
        else:
            raise AssertionError("no readiness line: " + "".join(lines))
        # no token, on loopback: actions need no login while the broker is on loopback
        assert any("actions need no login while the broker is on loopback" in x for x in lines)
        with urllib.request.urlopen(match[1] + "/api/overview", timeout=30) as response:
            data = json.load(response)
        assert data["status"]["queues"]["emails"]["claimed"] == 2
        for host in ("dash.example", "third.example:80"):
            request = urllib.request.Request(match[1] + "/api/overview", headers={"Host": host})
            with urllib.request.urlopen(request, timeout=30) as response:
                assert response.status == 200, host
        foreign = urllib.request.Request(match[1] + "/", headers={"Host": "evil.example"})
        with pytest.raises(urllib.error.HTTPError, match="421"):
            urllib.request.urlopen(foreign, timeout=30)
        process.send_signal(signal.SIGTERM)
        rest = process.stderr.read()
        assert process.wait(timeout=30) == 0, rest
        assert "dashboard stopped" in rest
    finally:
        if process.poll() is None:
            process.kill()
            process.wait()
        if process.stderr is not None:
            process.stderr.close()
