"""The security options of the command line: the plaintext rule, pins, token levels."""

from __future__ import annotations

import asyncio
import json
import logging
import socket
from collections.abc import Iterator
from pathlib import Path

import pytest
from remote_helpers import non_loopback_ip
from typer.testing import CliRunner, Result

from osqueue.broker import Broker, BrokerConfig
from osqueue.cli import exits
from osqueue.cli.app import app
from osqueue.errors import BrokerUnavailable, InvalidInput, UntrustedBroker
from osqueue.state import DOCUMENT_KEY

#: TEST-NET-3: not loopback; no broker there.
NOWHERE = "203.0.113.7:7070"


@pytest.fixture(autouse=True)
def _restore_logging() -> Iterator[None]:
    """The CLI configures the root logger (its job); undo it after each test."""
    root = logging.getLogger()
    handlers, level = list(root.handlers), root.level
    yield
    root.handlers[:] = handlers
    root.setLevel(level)


def rewrite(directory: Path, address: str) -> str:
    """A queue whose document someone rewrote to name a broker at ``address``."""
    directory.mkdir()
    url = directory.as_uri()

    async def create() -> None:
        async with Broker(url, BrokerConfig(address="127.0.0.1:1")):
            pass

    asyncio.run(create())
    path = directory / DOCUMENT_KEY
    doc = json.loads(path.read_bytes())
    doc["broker"]["address"] = address
    path.write_text(json.dumps(doc))
    return url


@pytest.fixture
def rewritten(tmp_path: Path) -> str:
    return rewrite(tmp_path / "queue", NOWHERE)


def closed_port_of_this_machine() -> str:
    """A non-loopback ``host:port`` of this machine where nothing listens (refused at once)."""
    ip = non_loopback_ip()
    with socket.socket() as probe:
        probe.bind((ip, 0))
        port = probe.getsockname()[1]
    return f"{ip}:{port}"


def invoke(*args: str, env: dict[str, str] | None = None) -> Result:
    return CliRunner().invoke(app, list(args), env=env)


def error_line(result: Result, code: int) -> str:
    assert result.exit_code == code, (result.stdout, result.stderr)
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1, result.stderr
    return lines[0]


def test_push_refuses_to_send_a_token_in_plaintext_off_loopback(rewritten: str) -> None:
    result = invoke("push", rewritten, "--token", "t0ken", "--data", "x")
    line = error_line(result, exits.EXIT_CODES[UntrustedBroker])
    assert "UntrustedBroker" in line
    assert NOWHERE in line
    assert "--allow-plaintext-token" in line
    assert "--tls-fingerprint" in line


@pytest.mark.parametrize("how", ["flag", "env"])
def test_allow_plaintext_token_lets_the_push_try(tmp_path: Path, how: str) -> None:
    address = closed_port_of_this_machine()
    url = rewrite(tmp_path / "queue", address)
    args = ["push", url, "--token", "t0ken", "--data", "x", "--retry-for-s", "0.3"]
    env = None
    if how == "flag":
        args.append("--allow-plaintext-token")
    else:
        env = {"OSQUEUE_ALLOW_PLAINTEXT_TOKEN": "1"}
    result = invoke(*args, env=env)
    # It warned, then tried (nothing listens there) instead of refusing.
    assert result.exit_code == exits.EXIT_CODES[BrokerUnavailable], result.stderr
    assert "SENDING THE BEARER TOKEN IN PLAINTEXT" in result.stderr
    assert address in result.stderr
    assert "UntrustedBroker" not in result.stderr


def test_a_bad_fingerprint_names_the_field(rewritten: str) -> None:
    result = invoke("push", rewritten, "--tls-fingerprint", "12:34", "--data", "x")
    line = error_line(result, exits.EXIT_CODES[InvalidInput])
    assert "tls_fingerprint" in line


def test_broker_refuses_a_read_token_without_the_admin_token(tmp_path: Path) -> None:
    url = tmp_path.as_uri()
    result = invoke("broker", url, "--listen", "127.0.0.1:0", "--read-token", "r")
    line = error_line(result, exits.EXIT_CODES[InvalidInput])
    assert "read_token" in line
    assert not (tmp_path / DOCUMENT_KEY).exists()  # refused before touching the queue


def test_broker_refuses_a_write_token_equal_to_the_admin_token(tmp_path: Path) -> None:
    args = ["broker", tmp_path.as_uri(), "--listen", "127.0.0.1:0", "--token", "same"]
    result = invoke(*args, env={"OSQUEUE_WRITE_TOKEN": "same"})
    line = error_line(result, exits.EXIT_CODES[InvalidInput])
    assert "write_token" in line
    assert "differ" in line
