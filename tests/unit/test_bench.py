"""The benchmark core: a few jobs on memory://, checked through its JSON fields."""

from __future__ import annotations

import io
import json
import uuid

import pytest

from osqueue.bench import RESULT_KEYS, BenchConfig, bench_command, run_bench
from osqueue.errors import InvalidInput


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
