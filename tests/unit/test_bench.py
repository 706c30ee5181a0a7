"""The benchmark core: a few jobs on memory:// (file:// with --remote), checked by its JSON."""

from __future__ import annotations

import asyncio
import io
import json
import uuid
from pathlib import Path

import pytest
from typer.testing import CliRunner

from osqueue.bench import (
    RESULT_KEYS,
    BenchConfig,
    BrokerProcess,
    bench_command,
    run_bench,
    run_remote_bench,
)
from osqueue.bench.scrape import Scraper
from osqueue.broker import Broker, BrokerConfig
from osqueue.cli.app import app
from osqueue.errors import BrokerUnavailable, InvalidInput
from osqueue.state import DOCUMENT_KEY, Document, decode
from osqueue.storage import from_url


def _url() -> str:
    return f"memory://bench-test-{uuid.uuid4().hex}"


async def test_every_job_is_pushed_claimed_and_completed_once() -> None:
    config = BenchConfig(storage=_url(), clients=4, jobs=21, preload=7)

    result = await run_bench(config)

    d = result.to_dict()
    assert tuple(d) == RESULT_KEYS
    assert result.jobs == 21
    # One push, one claim (the queue never runs dry for a closed loop) and one complete per job.
    assert result.ops == 3 * 21
    assert 0 < d["commits"] <= result.ops
    assert d["avg_batch"] == pytest.approx(result.ops / result.commits, rel=1e-2)
    assert d["clients"] == 4
    assert str(d["storage"]).startswith("memory://")
    assert d["ops_per_s"] == pytest.approx(result.ops / result.elapsed_s, rel=1e-2)
    assert d["jobs_per_s"] == pytest.approx(21 / result.elapsed_s, rel=1e-2)
    assert 0 < d["p50_ms"] <= d["p99_ms"]


async def test_batches_move_several_jobs_per_call() -> None:
    result = await run_bench(BenchConfig(storage=_url(), clients=2, jobs=10, batch=4))

    assert result.jobs == 10
    # Cycles of 4, 4 and 2 jobs: fewer push and claim calls than jobs, one complete per job.
    assert result.ops < 3 * 10
    assert result.ops >= 3 + 3 + 10


async def test_the_time_limit_stops_the_clients() -> None:
    result = await run_bench(BenchConfig(storage=_url(), clients=2, jobs=10**9, duration_s=0.05))

    assert 0 < result.jobs < 10**9
    assert result.ops >= 3 * result.jobs


@pytest.mark.parametrize(
    ("kwargs", "field"),
    [
        ({"clients": 0}, "clients"),
        ({"jobs": 0}, "jobs"),
        ({"preload": -1}, "preload"),
        ({"batch": 0}, "batch"),
        ({"duration_s": 0.0}, "duration_s"),
        ({"storage": ""}, "storage"),
    ],
)
def test_bad_config_names_the_field(kwargs: dict[str, object], field: str) -> None:
    with pytest.raises(InvalidInput, match=field) as info:
        BenchConfig(**kwargs)  # type: ignore[arg-type]
    assert info.value.field == field


def test_bench_command_prints_one_json_line() -> None:
    out = io.StringIO()

    code = bench_command(_url(), clients=2, jobs=6, preload=0, batch=1, as_json=True, out=out)

    assert code == 0
    lines = out.getvalue().splitlines()
    assert len(lines) == 1
    assert tuple(json.loads(lines[0])) == RESULT_KEYS


async def test_with_metrics_the_broker_serves_them_and_the_run_says_so() -> None:
    result = await run_bench(BenchConfig(storage=_url(), clients=2, jobs=10, metrics=True))

    d = result.to_dict()
    assert tuple(d) == (*RESULT_KEYS, "metrics_scrapes")
    assert result.jobs == 10
    assert result.ops == 3 * 10
    assert isinstance(d["metrics_scrapes"], int)  # one a second: a short run may have none


async def test_the_scraper_reads_a_whole_answer_as_prometheus_would() -> None:
    async with Broker(_url(), BrokerConfig(metrics_listen="127.0.0.1:0")) as broker:
        assert broker.metrics_address is not None
        scraper = Scraper(broker.metrics_address)
        answer = await scraper.scrape()
    head, _, body = answer.partition(b"\r\n\r\n")
    assert head.startswith(b"HTTP/1.1 200 OK")
    assert f"Content-Length: {len(body)}".encode() in head
    assert b'osqueue_broker_state{state="serving"} 1.0' in body
    assert scraper.scrapes == 1


def test_bench_command_refuses_metrics_with_remote(
    capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    code = bench_command(
        f"file://{tmp_path}", clients=1, jobs=1, preload=0, remote=True, metrics=True
    )

    assert code == 2
    assert "metrics" in capsys.readouterr().err


def test_bench_command_rejects_bad_flags_with_exit_code_2(
    capsys: pytest.CaptureFixture[str],
) -> None:
    out = io.StringIO()

    code = bench_command(_url(), clients=0, jobs=6, preload=0, out=out)

    assert code == 2
    assert out.getvalue() == ""
    assert "clients" in capsys.readouterr().err


def test_bench_command_rejects_a_bad_storage_url_with_exit_code_2(
    capsys: pytest.CaptureFixture[str],
) -> None:
    code = bench_command("no-scheme-here", clients=1, jobs=1, preload=0, out=io.StringIO())

    assert code == 2
    assert "url" in capsys.readouterr().err


def test_bench_command_rejects_an_unknown_event_loop_with_exit_code_2(
    capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("OSQUEUE_EVENT_LOOP", "trio")
    out = io.StringIO()

    code = bench_command(_url(), clients=1, jobs=1, preload=0, out=out)

    assert code == 2
    assert out.getvalue() == ""
    assert "OSQUEUE_EVENT_LOOP" in capsys.readouterr().err


# ------------------------------------------------------------------ --remote


async def _read_document(url: str) -> Document:
    storage = from_url(url)
    try:
        return decode((await storage.read(DOCUMENT_KEY)).data)
    finally:
        await storage.close()


async def test_remote_bench_runs_the_broker_in_another_process(tmp_path: Path) -> None:
    url = f"file://{tmp_path}"
    out = io.StringIO()

    # bench_command runs its own event loop; run it off this one.
    code = await asyncio.to_thread(
        bench_command, url, clients=3, jobs=9, preload=2, remote=True, as_json=True, out=out
    )

    assert code == 0
    lines = out.getvalue().splitlines()
    assert len(lines) == 1
    d = json.loads(lines[0])
    assert tuple(d) == (*RESULT_KEYS, "remote")
    assert d["remote"] is True
    assert d["storage"] == url
    assert d["clients"] == 3
    assert d["commits"] > 0
    assert 0 < d["p50_ms"] <= d["p99_ms"]
    doc = await _read_document(url)
    # Every pushed job was completed; the two preloaded ones were claimed first,
    # so two of the benchmark's own pushes are still queued.
    assert doc.stats.completed == 9
    assert doc.stats.pushed == 11
    assert sorted(job.status for job in doc.jobs.values() if job.status != "done") == [
        "queued",
        "queued",
    ]
    # The broker process was stopped with SIGTERM: it drained and cleared its address.
    assert doc.broker is not None
    assert doc.broker.address is None


@pytest.mark.parametrize("storage", ["memory://shared", "latency+memory://shared?write_ms=5"])
async def test_remote_bench_refuses_in_process_memory(storage: str) -> None:
    with pytest.raises(InvalidInput, match="memory") as info:
        await run_remote_bench(BenchConfig(storage=storage, jobs=1))
    assert info.value.field == "storage"


def test_bench_command_remote_on_memory_exits_2_naming_storage(
    capsys: pytest.CaptureFixture[str],
) -> None:
    out = io.StringIO()

    code = bench_command(_url(), clients=1, jobs=1, preload=0, remote=True, out=out)

    assert code == 2
    assert out.getvalue() == ""
    assert "storage" in capsys.readouterr().err


async def test_a_broker_process_that_exits_early_is_reported_with_its_words(
    tmp_path: Path,
) -> None:
    broker = BrokerProcess(f"file://{tmp_path}", extra_args=["--lease-s", "0"])

    with pytest.raises(BrokerUnavailable, match="exited with code 2") as info:
        async with broker:
            await broker.start()

    assert "lease-s" in str(info.value)
    assert broker.returncode == 2


def test_the_cli_flag_runs_the_remote_benchmark(tmp_path: Path) -> None:
    result = CliRunner().invoke(
        app, ["bench", "--remote", "--storage", f"file://{tmp_path}", "--jobs", "4", "--json"]
    )

    assert result.exit_code == 0, result.stderr
    figures = json.loads(result.stdout)
    assert figures["remote"] is True
    assert figures["jobs_per_s"] > 0


def test_the_cli_flag_refuses_memory_storage() -> None:
    result = CliRunner().invoke(app, ["bench", "--remote", "--storage", _url(), "--jobs", "4"])

    assert result.exit_code == 2
    assert result.stdout == ""
    assert "storage" in result.stderr
