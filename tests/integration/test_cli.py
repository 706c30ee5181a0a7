"""The ``osqueue`` command: in-process through typer's CliRunner, and as real processes.

Real-process tests run a broker on ``file://`` with ``--listen 127.0.0.1:0``
(a free port) and wait for its readiness line; producers and workers are
separate processes.  Nothing sleeps: tests wait on output lines (with
timeouts) and on process exits.
"""

from __future__ import annotations

import asyncio
import json
import logging
import os
import queue
import re
import signal
import subprocess
import sys
import textwrap
import threading
import urllib.error
import urllib.request
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import IO, Any

import msgspec
import pytest
from corrupt_archive import QUEUE_ID
from typer.main import get_command
from typer.testing import CliRunner, Result

from osqueue.api import NewJob
from osqueue.broker import Broker, BrokerConfig
from osqueue.cli import exits
from osqueue.cli.app import _import_extra, app
from osqueue.cli.push import _no_live_broker
from osqueue.errors import BrokerUnavailable, MissingExtra, NotBroker, NotFound
from osqueue.state import DOCUMENT_KEY, Document, decode
from osqueue.state.model import BrokerInfo

OSQUEUE = [sys.executable, "-m", "osqueue.cli"]
TIMEOUT_S = 60.0

HANDLERS = """
import sys, threading

async def ok(job):
    if job.payload.startswith(b"bad"):
        raise ValueError(f"cannot handle {job.payload.decode()}")

def blocking(job):
    print(f"started {job.id}", flush=True)
    threading.Event().wait()

def crash_on_import():
    pass

handlers = {"a": ok, "b": ok}
"""


# --------------------------------------------------------------------------- helpers


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


@pytest.fixture
def handlers_dir(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    path = tmp_path / "handlers"
    path.mkdir()
    (path / "cli_handlers.py").write_text(textwrap.dedent(HANDLERS))
    monkeypatch.chdir(path)
    monkeypatch.syspath_prepend(str(path))
    return path


def url_of(path: Path) -> str:
    return f"file://{path}"


def read_doc(path: Path) -> Document:
    return decode((path / DOCUMENT_KEY).read_bytes())


def seed(path: Path) -> dict[str, Any]:
    """A stopped queue: 3 jobs on a (one claimed), 1 delayed on b, 1 dead on c."""

    async def build() -> dict[str, Any]:
        config = BrokerConfig(address="127.0.0.1:1")
        async with Broker(url_of(path), config) as broker:
            q = broker.client()
            a_ids = await q.push_many([NewJob(f"a{i}".encode(), queue="a") for i in range(3)])
            b_id = await q.push(b"later", queue="b", delay_s=3600)
            await q.claim("w-seed", ["a"])
            c_id = await q.push(b"c", queue="c", max_attempts=1)
            (c_job,) = await q.claim("w-seed", ["c"])
            await q.fail(c_job, error="boom\nsecond line")
            return {"a": a_ids, "b": b_id, "c": c_id}

    return asyncio.run(build())


def invoke(*args: str, input: str | None = None) -> Result:
    return CliRunner().invoke(app, list(args), input=input)


def assert_one_error_line(result: Result, code: int, *fragments: str) -> None:
    assert result.exit_code == code, (result.stdout, result.stderr)
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1, result.stderr
    assert lines[0].startswith("error: ")
    assert "Traceback" not in result.stderr
    for fragment in fragments:
        assert fragment in lines[0]


# --------------------------------------------------------------------------- in-process


def test_every_option_has_an_osqueue_env_var_shown_in_help() -> None:
    group = get_command(app)
    lazy = {"pipeline", "demo"}
    # a destructive action is never taken from the environment (a variable left set
    # would remove a queue the user only meant to look at)
    no_env = {("queue", "remove")}
    checked = 0
    leaves = [
        ((name, *((sub,) if sub else ())), leaf)
        for name, command in group.commands.items()  # type: ignore[attr-defined]
        if name not in lazy
        for sub, leaf in (getattr(command, "commands", None) or {"": command}).items()
    ]
    for path, command in leaves:
        name = " ".join(path)
        for param in command.params:
            if param.name == "help" or param.param_type_name != "option":
                continue
            if (name, param.name) in no_env:
                assert not getattr(param, "envvar", None), (name, param.name)
                continue
            envvar = getattr(param, "envvar", None)
            assert isinstance(envvar, str), f"{name} {param.name} has no env var"
            assert envvar.startswith("OSQUEUE_"), (name, param.name, envvar)
            checked += 1
        result = invoke(*path, "--help")
        assert result.exit_code == 0
        assert "OSQUEUE_" in result.stdout
    for param in group.params:
        if param.name != "help":
            assert str(getattr(param, "envvar", "")).startswith("OSQUEUE_")
    assert checked > 40


def test_env_vars_feed_the_options(qdir: Path) -> None:
    seed(qdir)
    result = CliRunner().invoke(
        app,
        ["jobs"],
        env={"OSQUEUE_URL": url_of(qdir), "OSQUEUE_STATUS": "dead", "OSQUEUE_JSON": "1"},
    )
    assert result.exit_code == 0, result.stderr
    (line,) = result.stdout.splitlines()
    assert json.loads(line)["status"] == "dead"


def test_exit_codes_are_distinct_per_error_class() -> None:
    codes = list(exits.EXIT_CODES.values())
    assert len(codes) == len(set(codes))
    assert not set(codes) & {exits.OK, exits.USAGE, exits.INTERNAL, exits.INTERRUPTED}


def test_status_table_and_json_read_storage_without_a_broker(qdir: Path) -> None:
    ids = seed(qdir)
    result = invoke("status", url_of(qdir), "--json")
    assert result.exit_code == 0, result.stderr
    status = json.loads(result.stdout)
    assert status["version"] == read_doc(qdir).version
    assert status["broker"]["address"] is None  # the broker stopped and cleared it
    assert status["broker"]["live"] is False
    assert status["queues"]["a"] == {
        "depth": 2,
        "ready": 2,
        "delayed": 0,
        "spilled": 0,
        "claimed": 1,
        "dead": 0,
        "oldest_age_s": status["queues"]["a"]["oldest_age_s"],
        "waiting": 0,
        "paused": False,
        "set_aside": 0,
        "pushed_total": 3,
        "completed_total": 0,
        "failed_total": 0,
        "dead_total": 0,
    }
    assert status["queues"]["a"]["oldest_age_s"] >= 0
    assert status["queues"]["b"]["delayed"] == 1
    assert status["queues"]["c"]["dead"] == 1
    assert (status["depth"], status["claimed"], status["dead"]) == (3, 1, 1)
    assert status["tombstones"] == 0  # the seed's ids were made up by the client
    assert status["document_bytes"] >= (qdir / DOCUMENT_KEY).stat().st_size
    assert ids["b"]  # seeded

    table = invoke("status", url_of(qdir))
    assert table.exit_code == 0
    assert "version" in table.stdout
    assert re.search(r"^c\s.*\b1\b", table.stdout, re.MULTILINE)


def test_status_of_a_missing_queue_is_one_line_with_its_exit_code(tmp_path: Path) -> None:
    result = invoke("status", url_of(tmp_path / "nothing"))
    assert_one_error_line(result, exits.EXIT_CODES[NotFound], "NotFound", "queue.json")


def test_bad_url_is_invalid_input(tmp_path: Path) -> None:
    result = invoke("status", "nope")
    assert_one_error_line(result, 3, "InvalidInput", "url")


def test_jobs_filters_and_json(qdir: Path) -> None:
    ids = seed(qdir)
    result = invoke("jobs", url_of(qdir), "--queue", "a", "--json")
    assert result.exit_code == 0, result.stderr
    rows = [json.loads(line) for line in result.stdout.splitlines()]
    assert sorted(r["id"] for r in rows) == sorted(ids["a"])
    assert sorted(r["status"] for r in rows) == ["claimed", "queued", "queued"]
    claimed = next(r for r in rows if r["status"] == "claimed")
    assert claimed["worker"] == "w-seed"

    dead = invoke("jobs", url_of(qdir), "--status", "dead")
    assert dead.exit_code == 0
    assert ids["c"] in dead.stdout
    assert "boom | second line" in dead.stdout
    assert ids["a"][0] not in dead.stdout


def test_dead_retry_and_purge_through_an_embedded_broker(qdir: Path) -> None:
    ids = seed(qdir)
    result = invoke("dead", url_of(qdir), "retry", "--embedded")
    assert result.exit_code == 0, result.stderr
    assert result.stdout.strip() == "retried 1 dead job"
    assert read_doc(qdir).jobs[ids["c"]].status == "queued"

    missing = invoke("dead", url_of(qdir), "purge", "--id", "no-such-job", "--embedded")
    assert_one_error_line(missing, 5, "JobNotFound")


def test_cancel_takes_live_jobs_out_and_names_the_ids_it_could_not(qdir: Path) -> None:
    ids = seed(qdir)
    queued, claimed = ids["a"][1], ids["a"][0]  # a's first job is the claimed one
    assert read_doc(qdir).jobs[claimed].status == "claimed"
    result = invoke(
        "cancel", url_of(qdir), "--embedded", "--id", queued, "--id", claimed, "--id", ids["c"]
    )
    assert result.exit_code == 0, result.stderr
    assert result.stdout.strip() == "cancelled 3 jobs"
    jobs = read_doc(qdir).jobs
    assert not {queued, claimed, ids["c"]} & set(jobs)
    assert ids["b"] in jobs  # untouched

    again = invoke("cancel", url_of(qdir), "--embedded", "--id", ids["b"], "--id", queued)
    assert again.stdout.strip() == "cancelled 1 job"
    assert_one_error_line(again, 5, "JobNotFound", queued)
    assert ids["b"] not in read_doc(qdir).jobs

    bad = invoke("cancel", url_of(qdir), "--embedded", "--id", "not an id")
    assert_one_error_line(bad, 3, "InvalidInput", "job_id")


def test_archive_lists_days_and_deletes_only_those_past_the_cut_off(qdir: Path) -> None:
    today = datetime.now(UTC).date()
    days = [(today - timedelta(days=n)).isoformat() for n in (0, 5, 40, 41)]
    archive = qdir / "archive"
    for i, day in enumerate(days):
        for hour in ("03", "17"):
            path = archive / f"date={day}" / f"hour={hour}" / f"{i:020d}-{QUEUE_ID}.jsonl"
            path.parent.mkdir(parents=True, exist_ok=True)
            path.write_text('{"id": "x"}\n')
    (archive / "README").write_text("not an archive object")

    listed = invoke("archive", url_of(qdir), "--older-than-days", "30", "--json")
    assert listed.exit_code == 0, listed.stderr
    report = json.loads(listed.stdout)
    assert [(d["date"], d["objects"], d["old"]) for d in report["days"]] == [
        (days[3], 2, True),
        (days[2], 2, True),
        (days[1], 2, False),
        (days[0], 2, False),
    ]
    assert report["deleted_objects"] == 0
    assert len(list(archive.rglob("*.jsonl"))) == 8  # marking deletes nothing

    deleted = invoke("archive", url_of(qdir), "--older-than-days", "30", "--delete")
    assert deleted.exit_code == 0, deleted.stderr
    assert "deleted 4 objects of 2 days" in deleted.stdout
    left = sorted(p.parent.parent.name for p in archive.rglob("*.jsonl"))
    assert left == [f"date={days[1]}"] * 2 + [f"date={days[0]}"] * 2
    assert (archive / "README").exists()

    unbounded = invoke("archive", url_of(qdir), "--delete")
    assert_one_error_line(unbounded, 3, "InvalidInput", "older_than_days")
    mistyped = invoke("archive", url_of(qdir.parent / "no-such-queue"))
    assert_one_error_line(mistyped, 4, "NotFound", "no queue at")


def test_push_data_prints_the_id_of_a_committed_job(qdir: Path) -> None:
    result = invoke(
        "push", url_of(qdir), "--embedded", "--data", "hello", "-q", "mail", "--priority", "3"
    )
    assert result.exit_code == 0, result.stderr
    job_id = result.stdout.strip()
    job = read_doc(qdir).jobs[job_id]
    assert (job.queue, job.payload, job.priority) == ("mail", b"hello", 3)


def test_push_lines_pushes_one_job_per_line_in_order(qdir: Path) -> None:
    lines = [f"line {i}" for i in range(250)] + ["", "last\r"]
    result = invoke("push", url_of(qdir), "--embedded", "--lines", input="\n".join(lines) + "\n")
    assert result.exit_code == 0, result.stderr
    ids = result.stdout.splitlines()
    assert len(ids) == len(set(ids)) == len(lines)
    doc = read_doc(qdir)
    assert [doc.jobs[i].payload for i in ids] == [line.rstrip("\r").encode() for line in lines]
    seqs = [doc.jobs[i].seq for i in ids]
    assert seqs == sorted(seqs)


@pytest.mark.parametrize(
    ("args", "field"),
    [
        ((), "--data, --file or --lines"),
        (("--data", "x", "--lines"), "got --data, --lines"),
        (("--lines", "--key", "k"), "key"),
    ],
)
def test_push_needs_exactly_one_source(qdir: Path, args: tuple[str, ...], field: str) -> None:
    result = invoke("push", url_of(qdir), "--embedded", *args)
    assert_one_error_line(result, 3, "InvalidInput", field)
    assert not (qdir / DOCUMENT_KEY).exists()


def test_push_to_a_url_without_a_queue_says_so_at_once(qdir: Path) -> None:
    # without the check the push waits its whole --retry-for-s (30 s) for a broker,
    # then fails with BrokerUnavailable (exit 8)
    result = invoke("push", url_of(qdir), "--data", "x")
    assert_one_error_line(
        result, exits.EXIT_CODES[NotFound], "no queue at", f"osqueue broker {url_of(qdir)}"
    )
    assert not (qdir / DOCUMENT_KEY).exists()  # and nothing was created


def test_push_to_a_queue_without_a_live_broker_says_it_is_waiting(qdir: Path) -> None:
    seed(qdir)  # a queue whose broker stopped (and cleared its address)
    result = invoke("push", url_of(qdir), "--data", "x", "--retry-for-s", "0.5")
    assert result.exit_code == exits.EXIT_CODES[BrokerUnavailable], result.stderr
    warning, error = result.stderr.strip().splitlines()
    assert warning.startswith("warning: no broker is serving")
    assert "cleared its address" in warning
    assert "waiting up to 0.5 s" in warning
    assert f"osqueue broker {url_of(qdir)}" in warning
    assert error.startswith("error: BrokerUnavailable")


def test_push_names_why_no_broker_answers() -> None:
    now = datetime(2026, 11, 24, 12, 0, tzinfo=UTC)
    lease = now + timedelta(seconds=5)
    live = BrokerInfo(id="b", address="10.0.0.1:7070", epoch=3, lease_until=lease, lease_s=5.0)
    assert _no_live_broker(live, now.timestamp()) is None
    assert "names no broker" in str(_no_live_broker(None, now.timestamp()))
    stopped = msgspec.structs.replace(live, address=None)
    assert "cleared its address" in str(_no_live_broker(stopped, now.timestamp()))
    died = _no_live_broker(live, (now + timedelta(seconds=65)).timestamp())
    assert died == "the lease of its broker at 10.0.0.1:7070 ran out 60 s ago"


def test_push_file_reads_bytes(qdir: Path, tmp_path: Path) -> None:
    payload = tmp_path / "payload.bin"
    payload.write_bytes(b"\x00\x01binary")
    result = invoke("push", url_of(qdir), "--embedded", "--file", str(payload))
    assert result.exit_code == 0, result.stderr
    assert read_doc(qdir).jobs[result.stdout.strip()].payload == b"\x00\x01binary"
    missing = invoke("push", url_of(qdir), "--embedded", "--file", str(tmp_path / "nope"))
    assert_one_error_line(missing, 3, "file")


def test_work_burst_runs_handlers_by_queue_and_fails_with_the_last_line(
    qdir: Path, handlers_dir: Path
) -> None:
    assert invoke("push", url_of(qdir), "--embedded", "--data", "fine", "-q", "a").exit_code == 0
    bad = invoke("push", url_of(qdir), "--embedded", "--data", "bad-7", "-q", "b")
    bad_id = bad.stdout.strip()
    result = invoke(
        "work",
        url_of(qdir),
        "--embedded",
        "--handler",
        "cli_handlers:handlers",
        "--burst",
        "-c",
        "4",
    )
    assert result.exit_code == 0, result.stderr
    assert "processed 1, failed 1" in result.stderr
    job = read_doc(qdir).jobs[bad_id]
    assert job.last_error == "ValueError: cannot handle bad-7"
    assert job.status == "queued"


@pytest.mark.parametrize(
    ("spec", "fragment"),
    [
        ("no_colon", "is not module:function"),
        ("missing_module_xyz:f", "cannot import 'missing_module_xyz'"),
        ("cli_handlers:nope", "has no attribute 'nope'"),
        ("cli_handlers:HANDLERS_MISSING.x", "has no attribute"),
    ],
)
def test_bad_handler_spec_names_the_handler(
    qdir: Path, handlers_dir: Path, spec: str, fragment: str
) -> None:
    result = invoke("work", url_of(qdir), "--embedded", "--handler", spec, "--burst")
    assert_one_error_line(result, 3, "handler", fragment)


def test_bad_worker_config_names_the_field(qdir: Path, handlers_dir: Path) -> None:
    result = invoke(
        "work", url_of(qdir), "--embedded", "-H", "cli_handlers:ok", "--batch-size", "5", "-c", "2"
    )
    assert_one_error_line(result, 3, "batch_size")


def test_a_handler_that_fails_to_import_shows_the_users_traceback(
    qdir: Path, handlers_dir: Path
) -> None:
    (handlers_dir / "boom_on_import.py").write_text("raise RuntimeError('import went wrong')\n")
    result = invoke("work", url_of(qdir), "--handler", "boom_on_import:f")
    assert result.exit_code == exits.CONFIG == 78
    lines = result.stderr.strip().splitlines()
    assert lines[0] == "Traceback (most recent call last):"
    assert lines[1].endswith('boom_on_import.py", line 1, in <module>')
    assert "osqueue" not in lines[1]
    assert lines[-2] == "RuntimeError: import went wrong"
    assert lines[-1] == (
        "error: handler module 'boom_on_import' failed to import: RuntimeError: import went wrong"
    )
    assert "internal error" not in result.stderr
    sys.modules.pop("boom_on_import", None)
    debug = invoke("work", url_of(qdir), "--handler", "boom_on_import:f", "--debug")
    assert debug.exit_code == exits.CONFIG
    assert "osqueue/cli/work.py" in debug.stderr  # --debug, after the command: every frame
    sys.modules.pop("boom_on_import", None)


def test_a_missing_spark_extra_is_one_clear_line(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    (tmp_path / "needs_spark_cli.py").write_text("import pyspark.sql\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    monkeypatch.setitem(sys.modules, "pyspark", None)
    with pytest.raises(MissingExtra, match=r"pip install 'osqueue\[spark\]'"):
        _import_extra("needs_spark_cli")


def test_bench_runs_the_benchmark_and_prints_json() -> None:
    result = invoke("bench", "--jobs", "40", "--clients", "2", "--batch", "4", "--json")
    assert result.exit_code == 0, result.stderr
    figures = json.loads(result.stdout)
    assert figures["jobs_per_s"] > 0
    assert figures["clients"] == 2


def test_a_reader_that_leaves_early_ends_the_command_quietly(qdir: Path) -> None:
    """``osqueue status ... | head -0``: stdout's reader is gone before the first write."""
    seed(qdir)
    proc = subprocess.Popen(
        [*OSQUEUE, "status", url_of(qdir), "--json"],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
    )
    assert proc.stdout is not None
    assert proc.stderr is not None
    proc.stdout.close()
    with proc.stderr:
        err = proc.stderr.read().decode()
    assert proc.wait(timeout=TIMEOUT_S) == exits.BROKEN_PIPE, err
    assert err == ""


# --------------------------------------------------------------------------- real processes


class Proc:
    """A child process whose stdout/stderr lines are read by threads into queues."""

    def __init__(self, args: list[str], cwd: Path, stdin: bool = False) -> None:
        env = dict(os.environ, PYTHONUNBUFFERED="1", COLUMNS="200")
        self.popen = subprocess.Popen(
            args,
            cwd=cwd,
            env=env,
            stdin=subprocess.PIPE if stdin else subprocess.DEVNULL,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
        )
        self.out: queue.Queue[str | None] = queue.Queue()
        self.err: queue.Queue[str | None] = queue.Queue()
        self.err_lines: list[str] = []
        assert self.popen.stdout is not None
        assert self.popen.stderr is not None
        self.pumps = [
            threading.Thread(target=_pump, args=(stream, sink), daemon=True)
            for stream, sink in ((self.popen.stdout, self.out), (self.popen.stderr, self.err))
        ]
        for pump in self.pumps:
            pump.start()

    def close(self) -> None:
        """Kill the process if it still runs and close its pipes."""
        if self.popen.poll() is None:
            self.popen.kill()
        self.popen.wait(timeout=TIMEOUT_S)
        for pump in self.pumps:
            pump.join(timeout=TIMEOUT_S)
        for stream in (self.popen.stdin, self.popen.stdout, self.popen.stderr):
            if stream is not None:
                stream.close()

    def expect(self, sink: queue.Queue[str | None], pattern: str) -> re.Match[str]:
        while True:
            line = sink.get(timeout=TIMEOUT_S)
            if line is None:
                raise AssertionError(f"process ended before {pattern!r}: {self.err_lines}")
            if sink is self.err:
                self.err_lines.append(line)
            found = re.search(pattern, line)
            if found:
                return found

    def write(self, text: str) -> None:
        assert self.popen.stdin is not None
        self.popen.stdin.write(text.encode())
        self.popen.stdin.flush()

    def close_stdin(self) -> None:
        assert self.popen.stdin is not None
        self.popen.stdin.close()

    def wait(self) -> int:
        return self.popen.wait(timeout=TIMEOUT_S)

    def rest(self, sink: queue.Queue[str | None]) -> list[str]:
        lines = []
        while (line := sink.get(timeout=TIMEOUT_S)) is not None:
            lines.append(line)
        return lines


def _pump(stream: IO[bytes], sink: queue.Queue[str | None]) -> None:
    for raw in stream:
        sink.put(raw.decode(errors="replace").rstrip("\n"))
    sink.put(None)


@pytest.fixture
def procs(tmp_path: Path) -> Iterator[list[Proc]]:
    started: list[Proc] = []
    yield started
    for proc in started:
        proc.close()


def spawn(procs: list[Proc], cwd: Path, *args: str, stdin: bool = False) -> Proc:
    proc = Proc([*OSQUEUE, *args], cwd, stdin=stdin)
    procs.append(proc)
    return proc


def start_broker(procs: list[Proc], cwd: Path, qdir: Path, *extra: str) -> tuple[Proc, str]:
    broker = spawn(procs, cwd, "broker", url_of(qdir), "--listen", "127.0.0.1:0", *extra)
    found = broker.expect(broker.err, r"serving \S+ at (127\.0\.0\.1:\d+)")
    return broker, found.group(1)


@pytest.mark.slow
def test_broker_push_work_status_as_processes(
    qdir: Path, handlers_dir: Path, procs: list[Proc]
) -> None:
    broker, address = start_broker(procs, handlers_dir, qdir)
    assert read_doc(qdir).broker.address == address  # type: ignore[union-attr]

    pusher = spawn(
        procs, handlers_dir, "push", url_of(qdir), "--lines", "--stream", "-q", "a", stdin=True
    )
    # Each id is printed only once its push is committed: the document has it already.
    for i in range(3):
        pusher.write(f"job {i}\n")
        job_id = pusher.expect(pusher.out, r"^(\S+)$").group(1)
        assert read_doc(qdir).jobs[job_id].payload == f"job {i}".encode()
    pusher.write("".join(f"bulk {i}\n" for i in range(500)) + "bad one\n")
    pusher.close_stdin()
    assert len(pusher.rest(pusher.out)) == 501
    assert pusher.wait() == 0

    worker = spawn(
        procs,
        handlers_dir,
        "work",
        url_of(qdir),
        "-H",
        "cli_handlers:ok",
        "-q",
        "a",
        "--burst",
        "-c",
        "16",
    )
    assert worker.wait() == 0
    summary = "\n".join(worker.rest(worker.err))
    assert "processed 503, failed 1" in summary

    status = subprocess.run(
        [*OSQUEUE, "status", url_of(qdir), "--json"],
        capture_output=True,
        check=True,
        timeout=TIMEOUT_S,
    )
    figures = json.loads(status.stdout)
    assert figures["completed"] == 503
    assert figures["broker"]["address"] == address
    assert figures["broker"]["live"] is True

    broker.popen.send_signal(signal.SIGTERM)
    assert broker.wait() == 0
    assert read_doc(qdir).broker.address is None  # type: ignore[union-attr]


@pytest.mark.slow
def test_broker_serves_metrics_while_it_runs(qdir: Path, procs: list[Proc]) -> None:
    broker, _ = start_broker(procs, qdir, qdir, "--metrics-listen", "127.0.0.1:0")
    metrics = broker.expect(broker.err, r"metrics at (http://127\.0\.0\.1:(\d+)/metrics)")
    subprocess.run(
        [*OSQUEUE, "push", url_of(qdir), "--data", "m", "-q", "mq"], check=True, timeout=TIMEOUT_S
    )
    with urllib.request.urlopen(metrics.group(1), timeout=TIMEOUT_S) as answer:
        assert answer.status == 200
        body = answer.read().decode()
    assert 'osqueue_broker_state{state="serving"} 1.0' in body
    assert 'osqueue_queue_depth{queue="mq"} 1.0' in body
    assert 'osqueue_broker_ops_total{kind="push",outcome="ok"} 1.0' in body
    broker.popen.send_signal(signal.SIGTERM)
    assert broker.wait() == 0
    with pytest.raises(urllib.error.URLError):
        urllib.request.urlopen(metrics.group(1), timeout=TIMEOUT_S)


@pytest.mark.slow
def test_worker_serves_metrics_while_it_runs(
    qdir: Path, handlers_dir: Path, procs: list[Proc]
) -> None:
    start_broker(procs, handlers_dir, qdir)
    subprocess.run([*OSQUEUE, "push", url_of(qdir), "--data", "w"], check=True, timeout=TIMEOUT_S)
    worker = spawn(
        procs,
        handlers_dir,
        "work",
        url_of(qdir),
        "-H",
        "cli_handlers:blocking",
        "--shutdown-grace-period-s",
        "0.2",
        "--metrics-listen",
        "127.0.0.1:0",
    )
    metrics = worker.expect(worker.err, r"metrics at (http://127\.0\.0\.1:\d+/metrics)")
    worker.expect(worker.out, r"started ")  # the handler holds the job
    with urllib.request.urlopen(metrics.group(1), timeout=TIMEOUT_S) as answer:
        body = answer.read().decode()
    assert "osqueue_worker_slots_busy 1.0" in body
    assert 'osqueue_worker_claimed_jobs_total{queue="default"} 1.0' in body
    worker.popen.send_signal(signal.SIGTERM)
    assert worker.wait() == 0
    with pytest.raises(urllib.error.URLError):
        urllib.request.urlopen(metrics.group(1), timeout=TIMEOUT_S)


@pytest.mark.slow
def test_sigterm_on_a_worker_releases_what_it_holds(
    qdir: Path, handlers_dir: Path, procs: list[Proc]
) -> None:
    start_broker(procs, handlers_dir, qdir)
    pushed = subprocess.run(
        [*OSQUEUE, "push", url_of(qdir), "--data", "stuck"],
        capture_output=True,
        check=True,
        timeout=TIMEOUT_S,
    )
    job_id = pushed.stdout.decode().strip()
    worker = spawn(
        procs,
        handlers_dir,
        "work",
        url_of(qdir),
        "-H",
        "cli_handlers:blocking",
        "--shutdown-grace-period-s",
        "0.2",
    )
    worker.expect(worker.out, rf"started {job_id}")
    assert read_doc(qdir).jobs[job_id].status == "claimed"
    worker.popen.send_signal(signal.SIGTERM)
    assert worker.wait() == 0
    assert "released 1" in "\n".join(worker.rest(worker.err))
    job = read_doc(qdir).jobs[job_id]
    assert job.status == "queued"
    assert job.claim is None


@pytest.mark.slow
def test_push_lines_rides_through_a_broker_failover(
    qdir: Path, handlers_dir: Path, procs: list[Proc]
) -> None:
    lease = ("--lease-s", "1")
    active, first = start_broker(procs, handlers_dir, qdir, *lease)
    standby = spawn(
        procs, handlers_dir, "broker", url_of(qdir), "--listen", "127.0.0.1:0", "--standby", *lease
    )
    standby.expect(standby.err, r"standing by")
    pusher = spawn(procs, handlers_dir, "push", url_of(qdir), "--lines", "--stream", stdin=True)
    pusher.write("before\n")
    before = pusher.expect(pusher.out, r"^(\S+)$").group(1)

    active.popen.kill()  # kill -9: no drain, the lease must run out
    active.wait()
    second = standby.expect(standby.err, r"serving \S+ at (127\.0\.0\.1:\d+)").group(1)
    assert second != first
    pusher.write("after\n")
    after = pusher.expect(pusher.out, r"^(\S+)$").group(1)
    pusher.close_stdin()
    assert pusher.wait() == 0

    jobs = read_doc(qdir).jobs
    assert jobs[before].payload == b"before"
    assert jobs[after].payload == b"after"
    assert read_doc(qdir).broker.address == second  # type: ignore[union-attr]


@pytest.mark.slow
def test_status_watch_refreshes_until_interrupted(qdir: Path, procs: list[Proc]) -> None:
    seed(qdir)
    watch = spawn(procs, qdir, "status", url_of(qdir), "--watch", "--json", "--interval-s", "0.1")
    first = json.loads(watch.expect(watch.out, r"^\{").string)
    second = json.loads(watch.expect(watch.out, r"^\{").string)
    assert first["version"] == second["version"] == read_doc(qdir).version
    watch.popen.send_signal(signal.SIGINT)
    assert watch.wait() == 0


@pytest.mark.slow
def test_a_standby_that_served_stands_by_again_when_a_primary_comes(
    qdir: Path, procs: list[Proc]
) -> None:
    """Issue 26: a standby on an empty prefix serves (epoch 1); a primary started
    after it takes the queue (epoch 2) and the standby stands by again instead of
    exiting; it takes over once the primary is killed.  A broker started without
    --standby that loses the queue exits 9 (NotBroker)."""
    lease = ("--lease-s", "1")
    standby = spawn(
        procs, qdir, "broker", url_of(qdir), "--listen", "127.0.0.1:0", "--standby", *lease
    )
    served = standby.expect(standby.err, r"serving \S+ at (127\.0\.0\.1:\d+) \(epoch 1\)")
    address = served.group(1)
    primary = spawn(procs, qdir, "broker", url_of(qdir), "--listen", "127.0.0.1:0", *lease)
    primary.expect(primary.err, r"serving \S+ at 127\.0\.0\.1:\d+ \(epoch 2\)")
    standby.expect(standby.err, r"standing by again")
    assert standby.popen.poll() is None

    primary.popen.kill()  # kill -9: the standby takes over once the lease ran out
    primary.wait()
    standby.expect(standby.err, rf"serving \S+ at {re.escape(address)} \(epoch 3\)")
    owner = read_doc(qdir).broker
    assert owner is not None
    assert (owner.address, owner.epoch) == (address, 3)

    # Taken over again, it stands by again; a broker without --standby exits 9.
    other = spawn(procs, qdir, "broker", url_of(qdir), "--listen", "127.0.0.1:0", *lease)
    other.expect(other.err, r"\(epoch 4\)")
    standby.expect(standby.err, r"standing by again")
    last = spawn(procs, qdir, "broker", url_of(qdir), "--listen", "127.0.0.1:0", *lease)
    last.expect(last.err, r"\(epoch 5\)")
    assert other.wait() == exits.EXIT_CODES[NotBroker] == 9
    assert "NotBroker" in "\n".join(other.rest(other.err))
    assert standby.popen.poll() is None
    standby.popen.send_signal(signal.SIGTERM)
    assert standby.wait() == 0
