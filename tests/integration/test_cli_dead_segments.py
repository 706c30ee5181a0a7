"""``osqueue dead URL retry|purge`` over dead segments: ``--all`` and the filters go
segment by segment with progress, and a retry of all brings every job back once."""

from __future__ import annotations

import asyncio
import json
from pathlib import Path

from segment_helpers import config
from typer.testing import CliRunner

from osqueue.broker import Broker
from osqueue.cli.app import app
from osqueue.state import DOCUMENT_KEY, decode


def seed(path: Path, n: int) -> None:
    """A stopped queue whose ``n`` dead jobs of ``d`` are mostly in dead segments."""

    async def build() -> None:
        settings = config(dead_keep_jobs=2, dead_spill_jobs=2, spill_above_jobs=None)
        async with Broker(f"file://{path}", settings) as broker:
            q = broker.client()
            for i in range(n):
                await q.push(b"p", queue="d", max_attempts=1)
                for job in await q.claim("w", queues=["d"]):
                    await q.fail(job, error=f"boom {i % 2}")
            await broker.segments.settled()
            assert broker.document.dead

    asyncio.run(build())


def test_retry_all_goes_segment_by_segment_and_brings_each_back_once(tmp_path: Path) -> None:
    seed(tmp_path, 14)
    runner = CliRunner()
    status = runner.invoke(app, ["status", f"file://{tmp_path}", "--json"])
    assert status.exit_code == 0, status.stderr
    counted = json.loads(status.stdout)
    assert counted["dead"] == 14  # from the dead segments' references, no object read
    assert counted["queues"]["d"]["dead"] == 14
    purged = runner.invoke(
        app, ["dead", f"file://{tmp_path}", "purge", "--error", "boom 1", "--embedded"]
    )
    assert purged.exit_code == 0, purged.stderr
    assert purged.stdout.strip() == "purged 7 dead jobs"
    result = runner.invoke(
        app, ["dead", f"file://{tmp_path}", "retry", "--all", "--queue", "d", "--embedded"]
    )
    assert result.exit_code == 0, result.stderr
    assert result.stdout.strip() == "retried 7 dead jobs"
    assert "dead segments left" in result.stderr or "dead segment left" in result.stderr
    doc = decode((tmp_path / DOCUMENT_KEY).read_bytes())
    assert not doc.dead
    assert (
        sum(ref.count for ref in doc.segments)
        + len([j for j in doc.jobs.values() if j.status == "queued"])
        == 7
    )
    again = runner.invoke(app, ["dead", f"file://{tmp_path}", "retry", "--all", "--embedded"])
    assert again.stdout.strip() == "retried 0 dead jobs"
