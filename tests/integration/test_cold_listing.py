"""``osqueue jobs`` (``list_page``, ``payload_by_id``) and the dashboard's job
source (``SegmentedJobs``) list dead jobs in dead segments and waiting
children in objects as they list the document's: in claim order, paged by
cursor, counted, found by id, payloads read, on memory and file storage.

Thresholds are tiny (a queue keeps 2 dead jobs, a dead segment holds a few; an
object holds 4 waiting children), so every test reads several objects.
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import Iterator
from pathlib import Path

import pytest
from backends import Counting, backend_url
from cold_helpers import cold_config, fan_in, kill
from typer.testing import CliRunner, Result

from osqueue.broker import Broker
from osqueue.broker.cold.read import Listed, SortKey, sort_key
from osqueue.cli.app import app
from osqueue.errors import CorruptDocument
from osqueue.inspect import jobs as inspect_jobs
from osqueue.inspect.jobs import JobFilter, SegmentedJobs, list_page, matching, payload_by_id
from osqueue.state import DOCUMENT_KEY, Document, decode
from osqueue.state.cold_dead import DEAD_PREFIX
from osqueue.state.waiting_refs import WAITING_PREFIX
from osqueue.storage import from_url
from osqueue.storage.port import Storage


@pytest.fixture(params=("memory", "file"))
def url(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[str]:
    with backend_url(request, request.param, tmp_path, "coldlist") as found:
        yield found


async def stored(url: str) -> Document:
    storage = from_url(url)
    try:
        return decode((await storage.read(DOCUMENT_KEY)).data)
    finally:
        await storage.close()


async def walk(url: str, queue: str | None, status: str | None, limit: int) -> list[Listed]:
    """Every job, a page of ``limit`` at a time, each page after the last one's cursor."""
    out: list[Listed] = []
    after: SortKey | None = None
    while True:
        page, left = await list_page(url, queue, status, limit, after)
        out.extend(page)
        if not left:
            return out
        after = sort_key(page[-1].job)


async def test_dead_jobs_in_dead_segments_are_listed_paged_found_and_read(url: str) -> None:
    async with Broker(url, cold_config()) as broker:
        ids = await kill(broker, 14)
        doc = await stored(url)
        assert doc.dead.count() >= 10  # most died into dead segments
        everything, left = await list_page(url, None, "dead", 0, None)
        assert sorted(item.job.id for item in everything) == ids
        assert left == 0
        keys = [sort_key(item.job) for item in everything]
        assert keys == sorted(keys)  # claim order across the document and the segments
        assert {item.segment for item in everything if item.segment} == {r.key for r in doc.dead}
        assert all(item.segment.startswith(DEAD_PREFIX) for item in everything if item.segment)

        first, left = await list_page(url, "default", "dead", 4, None)
        assert [item.job.id for item in first] == [item.job.id for item in everything[:4]]
        assert left == 10  # counted from the references: no object read for it
        assert matching(doc, None, "dead") == 14
        paged = await walk(url, "default", "dead", 3)
        assert [item.job.id for item in paged] == [item.job.id for item in everything]
        unfiltered = await walk(url, None, None, 5)  # no status: the dead are there too
        assert [item.job.id for item in unfiltered] == [item.job.id for item in everything]

        cold = next(item.job.id for item in everything if item.segment)
        assert await payload_by_id(url, cold) == b"dead-%d" % int(cold[1:])
        source = SegmentedJobs(doc, broker.storage)
        found = await source.get(cold)
        assert found is not None
        assert found.status == "dead"
        by_text = await source.page(JobFilter(text=cold, status="dead"), None, 10)
        assert [job.id for job in by_text.jobs] == [cold]


async def test_waiting_children_in_objects_are_listed_paged_found_and_read(url: str) -> None:
    async with Broker(url, cold_config()) as broker:
        parent, children = await fan_in(broker, 22)
        doc = await stored(url)
        assert doc.waiting_cold.jobs() >= 17
        listed = await walk(url, "kids", "waiting", 4)
        assert [item.job.id for item in listed] == children  # claim order: their seqs
        assert all(item.job.status == "waiting" for item in listed)
        assert {item.segment for item in listed if item.segment} == {
            r.key for r in doc.waiting_cold
        }
        assert all(item.segment.startswith(WAITING_PREFIX) for item in listed if item.segment)
        _, left = await list_page(url, "kids", "waiting", 5, None)
        assert left == 17
        whole = await walk(url, "kids", None, 6)
        assert [item.job.id for item in whole] == [parent, *children]

        cold = next(item.job.id for item in listed if item.segment)
        assert await payload_by_id(url, cold) == b"child-%d" % int(cold[1:])
        source = SegmentedJobs(doc, broker.storage)
        page = await source.page(JobFilter(queue="kids", status="waiting"), None, 10)
        assert page.total == 22
        assert [job.id for job in page.jobs] == children[:10]
        assert page.next_after == sort_key(page.jobs[-1])
        found = await source.get(cold)
        assert found is not None
        assert found.status == "waiting"


async def test_a_cancelled_cold_child_is_listed_no_more(url: str) -> None:
    async with Broker(url, cold_config()) as broker:
        _, children = await fan_in(broker, 22)
        listed = await walk(url, "kids", "waiting", 50)
        cold = next(item.job.id for item in listed if item.segment)
        await broker.client().cancel(cold)
        await broker.segments.settled()
        after = await walk(url, "kids", "waiting", 50)
        assert [item.job.id for item in after] == [c for c in children if c != cold]
        source = SegmentedJobs(await stored(url), broker.storage)
        assert await source.get(cold) is None


def invoke(*args: str) -> Result:
    return CliRunner().invoke(app, list(args))


async def test_the_jobs_command_lists_pages_and_reads_dead_and_waiting_jobs_in_objects(
    url: str,
) -> None:
    async with Broker(url, cold_config()) as broker:
        dead = await kill(broker, 14)
        _, children = await fan_in(broker, 22)
        # the command runs its own event loop: in a thread of its own
        listed = await asyncio.to_thread(invoke, "jobs", url, "-s", "dead", "-n", "0", "--json")
        assert listed.exit_code == 0, listed.stderr
        rows = [json.loads(line) for line in listed.stdout.splitlines()]
        assert sorted(r["id"] for r in rows) == dead
        assert {r["status"] for r in rows} == {"dead"}
        cold = [r["id"] for r in rows if r["spilled"]]
        assert len(cold) >= 10
        table = await asyncio.to_thread(invoke, "jobs", url, "-s", "dead", "-n", "5")
        assert table.exit_code == 0, table.stderr
        assert "dead (spilled)" in table.stdout
        assert "9 more; next page: --after 'default:" in table.stdout
        cursor = table.stdout.split("--after '")[1].split("'")[0]
        rest = await asyncio.to_thread(
            invoke, "jobs", url, "-s", "dead", "-n", "0", "--json", "--after", cursor
        )
        assert [json.loads(line)["id"] for line in rest.stdout.splitlines()] == [
            r["id"] for r in rows[5:]
        ]
        payload = await asyncio.to_thread(invoke, "jobs", url, "--payload", cold[0])
        assert payload.exit_code == 0, payload.stderr
        assert payload.stdout_bytes == b"dead-%d" % int(cold[0][1:])

        waiting = await asyncio.to_thread(
            invoke, "jobs", url, "-q", "kids", "-s", "waiting", "-n", "0", "--json"
        )
        assert [json.loads(line)["id"] for line in waiting.stdout.splitlines()] == children
        everything = await asyncio.to_thread(invoke, "jobs", url, "-n", "0", "--json")
        ids = {json.loads(line)["id"] for line in everything.stdout.splitlines()}
        assert ids >= {*dead, *children}


async def test_a_whole_listing_of_many_pages_reads_each_dead_or_waiting_object_once(
    url: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    opened: list[Counting] = []

    def counting(url: str) -> Storage:
        opened.append(Counting(from_url(url)))
        return opened[-1]

    async with Broker(url, cold_config()) as broker:
        dead = await kill(broker, 14)
        _, children = await fan_in(broker, 22)
        doc = await stored(url)
        monkeypatch.setattr(inspect_jobs, "_PAGE", 3)  # (a page of --limit 0)
        monkeypatch.setattr(inspect_jobs, "from_url", counting)
        shown, _ = await list_page(url, None, None, 0, None)
        assert {item.job.id for item in shown} >= {*dead, *children}
        (store,) = opened
        objects = [key for key in store.gets if key.startswith((DEAD_PREFIX, WAITING_PREFIX))]
        assert sorted(objects) == sorted(
            [r.key for r in doc.dead] + [r.key for r in doc.waiting_cold]
        )


async def test_a_dead_or_waiting_object_that_fails_its_check_is_never_listed(url: str) -> None:
    async with Broker(url, cold_config()) as broker:
        await kill(broker, 14)
        await fan_in(broker, 22)
        doc = await stored(url)
    storage = from_url(url)
    try:
        for ref in (next(iter(doc.dead)), next(iter(doc.waiting_cold))):
            data = await storage.get(ref.key)
            await storage.put(ref.key, data.replace(b'"queue"', b'"QUEUE"', 1))  # same size
            with pytest.raises(CorruptDocument, match=ref.key):
                await list_page(url, ref.queue, None, 0, None)
            await storage.put(ref.key, data)
        assert len((await list_page(url, None, None, 0, None))[0]) == 14 + 23
    finally:
        await storage.close()


async def test_a_page_reads_only_the_dead_or_waiting_objects_its_bounds_reach(
    url: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Dead segments and waiting objects carry claim-order bounds (priorities and
    seqs), so a page within a queue reads the objects it falls in, not all of them."""
    opened: list[Counting] = []

    def counting(url: str) -> Storage:
        opened.append(Counting(from_url(url)))
        return opened[-1]

    monkeypatch.setattr(inspect_jobs, "from_url", counting)

    async def reads(queue: str, status: str, limit: int, after: SortKey | None) -> list[str]:
        opened.clear()
        await list_page(url, queue, status, limit, after)
        (store,) = opened
        return [key for key in store.gets if key.startswith((DEAD_PREFIX, WAITING_PREFIX))]

    async with Broker(url, cold_config()) as broker:
        dead = await kill(broker, 30)
        await fan_in(broker, 30)
        doc = await stored(url)
        assert len(list(doc.dead)) >= 5
        assert len(list(doc.waiting_cold)) >= 5
        everything, _ = await list_page(url, "default", "dead", 0, None)
        assert sorted(item.job.id for item in everything) == dead
        first = await reads("default", "dead", 2, None)
        assert 0 < len(first) < len(list(doc.dead))
        middle = await reads("default", "dead", 2, sort_key(everything[15].job))
        assert 0 < len(middle) < len(list(doc.dead))
        kids = await reads("kids", "waiting", 4, None)
        assert 0 < len(kids) <= 2  # children in seq order, 4 an object
        kid = sort_key((await walk(url, "kids", "waiting", 50))[13].job)
        assert 0 < len(await reads("kids", "waiting", 4, kid)) <= 2
