"""No silent archive loss after a reset or a restore of ``queue.json`` (issue 23, defect 1).

An archive key names the version and the document's queue id, and an object
already at a key counts as written only if it holds exactly the bytes to
write.  Each test runs embedded brokers on a file:// queue under a manual
clock, so every step falls in one UTC hour (where the keys of two
incarnations met before), and checks the archive with ``osqueue archive
--verify``.
"""

from __future__ import annotations

import asyncio
import json
import logging
import shutil
from collections import Counter
from pathlib import Path

import msgspec
import pytest
from archive_helpers import done_job
from remote_helpers import quiet_broker_config
from typer.testing import CliRunner, Result

import osqueue
from osqueue.broker.archive.objects import parse_key, write_archive
from osqueue.cli.app import app
from osqueue.clock import ManualClock
from osqueue.state import DOCUMENT_KEY, decode
from osqueue.storage import from_url

#: 08:10 UTC: every step below stays within this hour
T0 = 1_800_000_000.0 + 600


async def _complete(url: str, clock: ManualClock, tags: list[bytes]) -> list[str]:
    """One broker: push ``tags`` (one commit), claim them (one), complete them (one)."""
    async with osqueue.Broker(url, quiet_broker_config(), clock=clock) as broker:
        q = broker.client()
        ids = await q.push_many([osqueue.NewJob(tag) for tag in tags])
        jobs = await q.claim("w", max_jobs=len(tags))
        assert sorted(j.id for j in jobs) == sorted(ids)
        assert await q.complete_many(jobs) == [None] * len(jobs)
    return ids


async def _idle(url: str, clock: ManualClock) -> None:
    """One broker that takes the document over and stops (two versions)."""
    async with osqueue.Broker(url, quiet_broker_config(), clock=clock):
        pass


def _archived(directory: Path) -> Counter[str]:
    """Every job id in the archive objects, once per line."""
    ids: Counter[str] = Counter()
    for path in (directory / "archive").rglob("*.jsonl"):
        for line in path.read_bytes().splitlines():
            ids[msgspec.json.decode(line)["id"]] += 1
    return ids


def _verify(directory: Path) -> tuple[Result, dict[str, object]]:
    result = CliRunner().invoke(app, ["archive", directory.as_uri(), "--verify", "--json"])
    return result, json.loads(result.stdout)["verify"]


def _queue_id(directory: Path) -> str | None:
    return decode((directory / DOCUMENT_KEY).read_bytes()).queue_id


def test_a_queue_created_again_after_queue_json_was_deleted_archives_everything(
    tmp_path: Path,
) -> None:
    url = tmp_path.as_uri()
    clock = ManualClock(T0)
    first = asyncio.run(_complete(url, clock, [b"a%d" % i for i in range(5)]))
    before = _queue_id(tmp_path)
    (tmp_path / DOCUMENT_KEY).unlink()  # a careless reset
    clock.advance(60)
    second = asyncio.run(_complete(url, clock, [b"b%d" % i for i in range(5)]))

    assert _archived(tmp_path) == Counter(first + second)
    after = _queue_id(tmp_path)
    assert before is not None
    assert after is not None
    assert after != before
    keys = [parse_key(p.relative_to(tmp_path).as_posix()) for p in tmp_path.rglob("*.jsonl")]
    assert {k.queue_id for k in keys if k is not None} == {before, after}
    assert len({(k.day, k.hour) for k in keys if k is not None}) == 1  # all in one hour

    result, report = _verify(tmp_path)
    assert result.exit_code == 0, (result.stdout, result.stderr)
    assert report["count"] == {
        "queue_id": after,
        "completed": 5,
        "pending": 0,
        "archived": 5,
        "shortfall": 0,
        "surplus": 0,
    }


def test_an_older_copy_of_queue_json_restored_loses_no_completion(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    url = tmp_path.as_uri()
    clock = ManualClock(T0)
    asyncio.run(_idle(url, clock))
    copy = tmp_path / "queue.json.bak"
    shutil.copy(tmp_path / DOCUMENT_KEY, copy)  # the backup an operator restores
    first = asyncio.run(_complete(url, clock, [b"a%d" % i for i in range(5)]))
    shutil.copy(copy, tmp_path / DOCUMENT_KEY)  # restored within the hour
    clock.advance(60)
    with caplog.at_level(logging.WARNING, logger="osqueue.broker.archive.objects"):
        # The same versions complete other jobs: their first keys hold the earlier objects.
        second = asyncio.run(_complete(url, clock, [b"b%d" % i for i in range(5)]))

    assert _archived(tmp_path) == Counter(first + second)
    fresh = [r for r in caplog.records if "holds other content" in r.getMessage()]
    assert fresh, "the restored queue's versions met no earlier object: no restore tested"
    held, written = fresh[0].__dict__["key"], fresh[0].__dict__["fresh_key"]
    assert held != written
    assert (tmp_path / held).exists()
    assert (tmp_path / written).exists()
    parsed = parse_key(written)
    assert parsed is not None
    assert parsed.fresh

    result, report = _verify(tmp_path)
    assert result.exit_code == 0, (result.stdout, result.stderr)
    count = report["count"]
    assert isinstance(count, dict)
    assert (count["completed"], count["archived"], count["shortfall"]) == (5, 10, 0)
    assert count["surplus"] == 5  # the earlier timeline's completions, kept


def test_verify_reports_a_shortfall_when_an_archive_object_is_deleted(tmp_path: Path) -> None:
    url = tmp_path.as_uri()
    clock = ManualClock(T0)
    asyncio.run(_complete(url, clock, [b"a%d" % i for i in range(3)]))
    asyncio.run(_complete(url, clock, [b"b%d" % i for i in range(2)]))
    result, report = _verify(tmp_path)
    assert result.exit_code == 0, (result.stdout, result.stderr)
    assert report["count"]["shortfall"] == 0  # type: ignore[index]

    smallest = min((tmp_path / "archive").rglob("*.jsonl"), key=lambda p: p.stat().st_size)
    smallest.unlink()  # the object of the two b jobs
    result = CliRunner().invoke(app, ["archive", tmp_path.as_uri(), "--verify"])
    assert result.exit_code == 6, (result.stdout, result.stderr)
    assert "SHORTFALL: 2 completed jobs not archived" in result.stdout
    (error,) = result.stderr.strip().splitlines()
    assert "archive shortfall: 2 completed jobs of queue" in error
    assert "stats.completed 5" in error

    skipped = CliRunner().invoke(app, ["archive", tmp_path.as_uri(), "--verify", "--no-count"])
    assert skipped.exit_code == 0, (skipped.stdout, skipped.stderr)
    assert "count check skipped" in skipped.stdout


async def test_an_object_with_other_content_at_the_key_is_not_taken_as_archived(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    storage = from_url(tmp_path.as_uri())
    queue_id = "01jd0000000000000000000000"
    mine = [done_job("j1", 7, at=T0), done_job("j2", 7, at=T0)]
    key = "archive/date=2027-01-15/hour=08/00000000000000000007-01jd0000000000000000000000.jsonl"
    await storage.put(key, b'{"id":"someone-else"}\n')
    with caplog.at_level(logging.WARNING, logger="osqueue.broker.archive.objects"):
        assert await write_archive(storage, mine, queue_id) == 7
    keys = await storage.list("archive/")
    assert key in keys
    assert len(keys) == 2
    (fresh,) = (k for k in keys if k != key)
    assert await storage.get(key) == b'{"id":"someone-else"}\n'  # left alone
    assert [msgspec.json.decode(x)["id"] for x in (await storage.get(fresh)).splitlines()] == [
        "j1",
        "j2",
    ]
    (warning,) = [r for r in caplog.records if r.levelno == logging.WARNING]
    assert key in warning.getMessage()
    assert fresh in warning.getMessage()

    # A repeat (a retried write, a takeover) lands on the same fresh object: no second copy.
    assert await write_archive(storage, mine, queue_id) == 7
    assert sorted(await storage.list("archive/")) == sorted(keys)
    # And the object at the first key holding exactly these bytes is already archived.
    other = [done_job("j3", 8, at=T0)]
    await write_archive(storage, other, queue_id)
    await write_archive(storage, other, queue_id)
    assert len(await storage.list("archive/")) == 3
    await storage.close()
