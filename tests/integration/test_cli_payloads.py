"""``osqueue jobs URL --payload ID``: a job's payload, read through the one checked
read every payload reader uses; a payload object that fails its check is an error
naming the job and the object, and none of its bytes are written."""

from __future__ import annotations

import asyncio
import sys
from pathlib import Path

import pytest
from typer.testing import CliRunner, Result

from osqueue.broker import Broker, BrokerConfig
from osqueue.cli.app import app
from osqueue.cli.jobs import _write_payload
from osqueue.state import DOCUMENT_KEY, decode

BIG = b"payload object " * 10


def seed(directory: Path) -> tuple[str, str, Path]:
    """A stopped queue with an inline job and one whose payload is an object; returns
    their ids and the object's file."""

    async def build() -> tuple[str, str]:
        config = BrokerConfig(address="127.0.0.1:1", inline_payload_max_bytes=16)
        async with Broker(directory.as_uri(), config) as broker:
            q = broker.client()
            return await q.push(b"inline"), await q.push(BIG)

    inline, stored = asyncio.run(build())
    ref = decode((directory / DOCUMENT_KEY).read_bytes()).jobs[stored].payload_ref
    assert ref is not None
    return inline, stored, directory / ref


def payload(directory: Path, job_id: str) -> Result:
    return CliRunner().invoke(app, ["jobs", directory.as_uri(), "--payload", job_id])


def test_a_jobs_payload_is_written_as_it_was_pushed(tmp_path: Path) -> None:
    inline, stored, _ = seed(tmp_path)
    for job_id, expected in [(inline, b"inline"), (stored, BIG)]:
        result = payload(tmp_path, job_id)
        assert result.exit_code == 0, result.stderr
        assert result.stdout_bytes == expected
    missing = payload(tmp_path, "no-such-job")
    assert missing.exit_code == 5, missing.stderr
    assert "JobNotFound" in missing.stderr
    assert "'no-such-job'" in missing.stderr


@pytest.mark.parametrize("tamper", ["rewritten with the same size", "a link out of the store"])
def test_a_payload_object_that_fails_its_check_is_an_error_naming_job_and_key(
    tmp_path: Path, tamper: str
) -> None:
    store = tmp_path / "queue"
    store.mkdir()
    _, stored, path = seed(store)
    secret = b"S" * len(BIG)
    if tamper == "a link out of the store":
        (tmp_path / "outside").write_bytes(secret)
        path.unlink()
        path.symlink_to(tmp_path / "outside")
    else:
        path.write_bytes(secret)
    result = payload(store, stored)
    assert result.exit_code == 1, (result.stdout, result.stderr)
    assert result.stdout_bytes == b""
    (line,) = result.stderr.strip().splitlines()
    assert line.startswith("error: BadPayload: ")
    key = f"payloads/{path.name}"
    assert f"payload object {key} of job {stored} failed its check" in line
    if tamper == "a link out of the store":
        assert "symbolic link" in line


def test_on_a_terminal_control_characters_are_escaped(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.setattr(sys.stdout, "isatty", lambda: True)
    _write_payload(b"\x1b]8;;http://evil.example\x07link\x1b[2J ok\n\xc2\x9b1m\xff")
    shown = capsys.readouterr().out
    assert shown == "\\x1b]8;;http://evil.example\\x07link\\x1b[2J ok\n\\x9b1m\\xff\n"
