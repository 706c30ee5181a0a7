"""``osqueue status`` and ``osqueue jobs`` on a deep backlog: jobs in segment
objects are counted from the references and listed by reading the objects."""

from __future__ import annotations

import asyncio
import json
from pathlib import Path

import pytest
from typer.testing import CliRunner, Result

from osqueue.api import NewJob
from osqueue.broker import Broker, BrokerConfig
from osqueue.cli.app import app
from osqueue.cli.exits import counted
from osqueue.state import DOCUMENT_KEY, Document, decode

DEEP = BrokerConfig(
    address="127.0.0.1:1",
    segment_jobs=5,
    head_jobs=3,
    load_jobs=4,
    spill_above_jobs=4,
    payload_sweep_interval_s=None,
    stats_log_interval_s=None,
)


def invoke(*args: str) -> Result:
    return CliRunner().invoke(app, list(args))


def read_doc(path: Path) -> Document:
    return decode((path / DOCUMENT_KEY).read_bytes())


@pytest.fixture
def deep(tmp_path: Path) -> tuple[str, list[str]]:
    """A stopped queue: 30 jobs on ``a`` (two priorities, most of them spilled),
    3 on ``b``, one of a's claimed; returns its URL and a's ids in claim order.

    Each push waits for the spill it started to commit, so every stream spills
    its tail each time it reaches ``spill_above_jobs`` (4): 12 of each
    priority's 15 jobs in 3 segments behind its head of 3.  The claim leaves
    2 of priority 0 before its barrier, so one load takes ``load_jobs`` (4)
    of them back: 20 stay spilled, however slow the machine."""
    path = tmp_path / "queue"
    path.mkdir()
    url = f"file://{path}"

    async def build() -> list[str]:
        async with Broker(url, DEEP) as broker:
            q = broker.client()
            low: list[str] = []
            high: list[str] = []
            for i in range(15):
                low.append(await q.push(b"l%d" % i, queue="a", priority=1))
                await broker.segments.settled()
                high.append(await q.push(b"h%d" % i, queue="a", priority=0))
                await broker.segments.settled()
            await q.push_many([NewJob(b"b", queue="b") for _ in range(3)])
            await broker.segments.settled()
            assert [ref.count for ref in read_doc(path).segments] == [4] * 6
            (claimed,) = await q.claim("w-cli", ["a"])
            await broker.segments.settled()
            assert claimed.id == high[0]
            assert sum(ref.remaining for ref in read_doc(path).segments) == 20
            return high + low

    return url, asyncio.run(build())


def test_status_counts_the_spilled_jobs(deep: tuple[str, list[str]]) -> None:
    url, _ = deep
    doc = read_doc(Path(url.removeprefix("file://")))
    spilled = sum(ref.remaining for ref in doc.segments)
    assert spilled > 15
    result = invoke("status", url, "--json")
    assert result.exit_code == 0, result.stderr
    snapshot = json.loads(result.stdout)
    assert snapshot["queues"]["a"]["spilled"] == spilled
    assert snapshot["queues"]["a"]["depth"] == 29  # 30 pushed, one claimed
    assert snapshot["spilled"] == spilled
    assert snapshot["segments"] == sum(1 for _ in doc.segments)
    table = invoke("status", url)
    assert table.exit_code == 0
    assert "spilled" in table.stdout
    assert f"{spilled} jobs in {snapshot['segments']} segments" in table.stdout


def test_jobs_lists_spilled_jobs_in_claim_order_and_pages(deep: tuple[str, list[str]]) -> None:
    url, order = deep
    result = invoke("jobs", url, "--queue", "a", "--limit", "0", "--json")
    assert result.exit_code == 0, result.stderr
    rows = [json.loads(line) for line in result.stdout.splitlines()]
    assert [r["id"] for r in rows] == order
    assert rows[0]["status"] == "claimed"
    spilled = [r for r in rows if r["spilled"]]
    assert len(spilled) > 15
    assert all(r["status"] == "queued" for r in spilled)

    seen: list[str] = []
    after: list[str] = []
    shown = ""
    while True:
        page = invoke("jobs", url, "--queue", "a", "--limit", "7", *after)
        assert page.exit_code == 0, page.stderr
        shown += page.stdout
        ids = [line.split()[0] for line in page.stdout.splitlines() if line.split()[:1]]
        seen.extend(i for i in ids if i in order)
        cursor = [line for line in page.stdout.splitlines() if "--after" in line]
        if not cursor:
            break
        after = ["--after", cursor[0].split("'")[1]]
    assert seen == order
    assert shown.count("queued (spilled)") == len(spilled)
    first = invoke("jobs", url, "--queue", "a", "--limit", "7")
    assert "23 more; next page: --after 'a:0:" in first.stdout

    everything = invoke("jobs", url, "--limit", "0", "--json", "--status", "queued")
    queued = [json.loads(line)["id"] for line in everything.stdout.splitlines()]
    assert len(queued) == 29 + 3
    claimed = invoke("jobs", url, "--status", "claimed", "--json")
    assert [json.loads(line)["id"] for line in claimed.stdout.splitlines()] == [order[0]]


def test_jobs_refuses_a_cursor_that_is_not_one(deep: tuple[str, list[str]]) -> None:
    url, _ = deep
    result = invoke("jobs", url, "--after", "nonsense")
    assert result.exit_code != 0
    assert "QUEUE:PRIORITY:SEQ" in result.stderr


def test_status_lists_a_set_aside_segment_and_readmit_brings_it_back(
    deep: tuple[str, list[str]],
) -> None:
    url, order = deep
    path = Path(url.removeprefix("file://"))
    first = next(iter(read_doc(path).segments))
    obj = path / first.key
    original = obj.read_bytes()
    obj.unlink()  # lost from outside

    async def serve() -> list[str]:
        async with Broker(url, DEEP) as broker:
            q = broker.client()
            got: list[str] = []
            await broker.segments.settled()
            while jobs := await q.claim("w-cli", ["a"], max_jobs=5):
                got.extend(job.id for job in jobs)
                await broker.segments.settled()
            return got

    served = asyncio.run(serve())
    assert len(served) == 29 - first.remaining  # all but the claimed one and the set-aside ones
    snapshot = json.loads(invoke("status", url, "--json").stdout)
    (entry,) = snapshot["set_aside_segments"]
    assert (entry["key"], entry["jobs"], entry["queue"]) == (first.key, first.remaining, "a")
    assert snapshot["queues"]["a"]["set_aside"] == first.remaining
    table = invoke("status", url)
    assert first.key in table.stdout
    assert "set aside" in table.stdout
    assert first.key in invoke("segments", "list", url).stdout
    refused = invoke("segments", "readmit", url, first.key, "--embedded")
    assert refused.exit_code != 0
    assert "still missing" in refused.stderr
    assert first.key in read_doc(path).segments.aside  # nothing changed
    obj.write_bytes(original)
    done = invoke("segments", "readmit", url, first.key, "--embedded")
    assert done.exit_code == 0, done.stderr
    assert f"readmitted {first.key}: {counted(first.remaining, 'job')}" in done.stdout
    doc = read_doc(path)
    assert not doc.segments.aside
    assert doc.segments.find(first.key) is not None
    assert "no segment is set aside" in invoke("segments", "list", url).stdout
    assert set(served) <= set(order)
