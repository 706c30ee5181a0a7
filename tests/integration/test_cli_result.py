"""``osqueue result URL ID``: JSON by default, raw bytes with --raw, exit codes."""

from __future__ import annotations

import asyncio
import base64
import json
import logging
from collections.abc import Iterator
from pathlib import Path

import pytest
from typer.testing import CliRunner, Result

from osqueue.broker import Broker, BrokerConfig
from osqueue.cli.app import app
from osqueue.cli.result import NOT_FINISHED


@pytest.fixture(autouse=True)
def _restore_logging() -> Iterator[None]:
    """The CLI configures the root logger (its job); undo it after each test."""
    root = logging.getLogger()
    handlers, level = list(root.handlers), root.level
    yield
    root.handlers[:] = handlers
    root.setLevel(level)


@pytest.fixture
def qdir(tmp_path: Path) -> Path:
    path = tmp_path / "queue"
    path.mkdir()
    return path


def url_of(path: Path) -> str:
    return f"file://{path}"


def invoke(*args: str) -> Result:
    return CliRunner().invoke(app, list(args))


def seed(path: Path) -> dict[str, str]:
    """A stopped queue with jobs that finished every way, and one still queued."""

    async def build() -> dict[str, str]:
        async with Broker(url_of(path), BrokerConfig(address="127.0.0.1:1")) as broker:
            q = broker.client()
            ids = {
                name: await q.push(name.encode(), max_attempts=1, result_ttl_s=600.0)
                for name in ("json", "text", "bytes", "none", "dead")
            }
            jobs = {j.payload.decode(): j for j in await q.claim("w", max_jobs=5)}
            await q.complete(jobs["json"], result={"rows": 3, "ok": True})
            await q.complete(jobs["text"], result="héllo")
            await q.complete(jobs["bytes"], result=b"\x00\xffraw")
            await q.complete(jobs["none"])
            await q.fail(jobs["dead"], error="it broke")
            ids["queued"] = await q.push(b"later")
            return ids

    return asyncio.run(build())


def test_result_prints_one_json_object_per_answer(qdir: Path) -> None:
    ids = seed(qdir)
    url = url_of(qdir)
    out = invoke("result", url, ids["json"], "--embedded")
    assert out.exit_code == 0, out.stderr
    answer = json.loads(out.stdout)
    assert answer["id"] == ids["json"]
    assert (answer["status"], answer["value"], answer["attempts"]) == (
        "done",
        {"rows": 3, "ok": True},
        1,
    )
    assert answer["error"] is None
    assert isinstance(answer["finished_at"], float)
    raw = json.loads(invoke("result", url, ids["bytes"], "--embedded").stdout)
    assert (raw["value"], raw["encoding"]) == (base64.b64encode(b"\x00\xffraw").decode(), "base64")
    dead = json.loads(invoke("result", url, ids["dead"], "--embedded").stdout)
    assert (dead["status"], dead["error"], dead["value"]) == ("dead", "it broke", None)


def test_raw_prints_the_value_bytes(qdir: Path) -> None:
    ids = seed(qdir)
    url = url_of(qdir)
    assert invoke("result", url, ids["text"], "--raw", "--embedded").stdout_bytes == (
        "héllo".encode()
    )
    assert invoke("result", url, ids["bytes"], "--raw", "--embedded").stdout_bytes == (
        b"\x00\xffraw"
    )
    assert json.loads(invoke("result", url, ids["json"], "--raw", "--embedded").stdout) == {
        "rows": 3,
        "ok": True,
    }
    none = invoke("result", url, ids["none"], "--raw", "--embedded")
    assert (none.exit_code, none.stdout_bytes) == (0, b"")
    dead = invoke("result", url, ids["dead"], "--raw", "--embedded")
    assert dead.exit_code == 1
    assert dead.stdout_bytes == b""
    assert "it broke" in dead.stderr


def test_exit_codes_for_unknown_and_unfinished_jobs(qdir: Path) -> None:
    ids = seed(qdir)
    url = url_of(qdir)
    missing = invoke("result", url, "01JD0000000000000000000000", "--embedded")
    assert missing.exit_code == 5
    assert "JobNotFound" in missing.stderr
    pending = invoke("result", url, ids["queued"], "--wait", "0.05", "--embedded")
    assert pending.exit_code == NOT_FINISHED
    assert json.loads(pending.stdout)["status"] == "queued"
    bad = invoke("result", url, "not an id", "--embedded")
    assert bad.exit_code == 3
    assert "job_id" in bad.stderr


def test_push_result_ttl_s_then_result(qdir: Path) -> None:
    """Issue 26: a result given is kept unless ``push --result-ttl-s 0`` says not."""
    url = url_of(qdir)
    help_text = invoke("push", "--help").stdout
    assert "--result-ttl-s" in help_text
    assert "OSQUEUE_PUSH_RESULT_TTL_S" in help_text
    ids = {}
    for name, extra in (
        ("plain", ()),
        ("none", ("--result-ttl-s", "0")),
        ("two", ("--result-ttl-s", "120")),
    ):
        out = invoke("push", url, "--embedded", "--data", name, *extra)
        assert out.exit_code == 0, out.stderr
        ids[name] = out.stdout.strip()

    async def work() -> dict[str, float | None]:
        async with Broker(url_of(qdir), BrokerConfig(address="127.0.0.1:1")) as broker:
            q = broker.client()
            for job in await q.claim("w", max_jobs=3):
                await q.complete(job, result="42")
            kept = {n: broker.document.finished.get(i) for n, i in ids.items()}
            return {n: e.ttl_s if e is not None else None for n, e in kept.items()}

    assert asyncio.run(work()) == {"plain": 3600.0, "none": None, "two": 120.0}
    plain = json.loads(invoke("result", url, ids["plain"], "--embedded").stdout)
    assert (plain["status"], plain["value"]) == ("done", "42")
    assert invoke("result", url, ids["two"], "--raw", "--embedded").stdout == "42"
    none = invoke("result", url, ids["none"], "--embedded")  # archived, keeping nothing
    assert none.exit_code == 5
    assert "result_ttl_s set on its push, its queue or the broker; 0 keeps none" in " ".join(
        none.stderr.split()
    )


def test_queue_result_ttl_s_is_shown_and_kept(qdir: Path) -> None:
    url = url_of(qdir)
    out = invoke("queue", url, "img", "--result-ttl-s", "600", "--embedded")
    assert out.exit_code == 0, out.stderr
    assert out.stdout.strip() == "img: running, no limits, results kept 600s"
    shown = json.loads(invoke("queue", url, "img", "--json").stdout)
    assert shown["result_ttl_s"] == 600.0
