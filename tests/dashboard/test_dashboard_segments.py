"""The dashboard's job source on a deep backlog: pages reach into segment objects,
in claim order, reading only what they fall in; totals count spilled jobs."""

from __future__ import annotations

from pathlib import Path

import aiohttp
from backends import Wrapped
from dashboard_helpers import dashboard_config
from rich.console import Console

from osqueue.broker import Broker, BrokerConfig
from osqueue.cli.top import Rates, render
from osqueue.dashboard.web import Dashboard
from osqueue.inspect.jobs import (
    DocumentJobs,
    JobFilter,
    SegmentedJobs,
    decode_cursor,
    encode_cursor,
    sort_key,
)
from osqueue.inspect.snapshot import Snapshot
from osqueue.state import (
    DOCUMENT_KEY,
    ClaimOp,
    Document,
    Policy,
    Push,
    StoredJob,
    decode,
    decode_segment,
    plan_spills,
    transition,
)
from osqueue.storage import MemoryStorage
from osqueue.storage.port import Storage

T0 = 1_800_000_000.0
POLICY = Policy(segment_jobs=5, head_jobs=2, load_jobs=3, spill_above_jobs=4)


class CountingGets(Wrapped):
    def __init__(self, inner: Storage) -> None:
        super().__init__(inner)
        self.gets = 0

    async def get(self, key: str) -> bytes:
        self.gets += 1
        return await self.inner.get(key)


async def deep() -> tuple[Document, CountingGets, list[StoredJob]]:
    """Two queues, two priorities on ``a``, most jobs spilled, one claimed; and every
    job in claim order."""
    store = CountingGets(MemoryStorage())
    ops = [
        Push(f"a{i:02d}", b"p", queue="a", priority=i % 2, key=f"key-{i}" if i == 13 else None)
        for i in range(30)
    ]
    ops += [Push(f"b{i:02d}", b"p", queue="b") for i in range(12)]
    doc = Document.empty()
    objects: list[StoredJob] = []
    for op in ops:
        doc = transition(doc, [op], T0, POLICY).doc
        for n, plan in enumerate(plan_spills(doc, POLICY)):
            spill, data = plan.build(f"u{op.id}{n}")
            await store.put(spill.ref.key, data)
            objects.extend(decode_segment(data)[1])
            doc = transition(doc, [spill], T0, POLICY).doc
    doc = transition(doc, [ClaimOp("w", ("a",), 1)], T0, POLICY).doc
    spilled_ids = {j.id for j in objects}
    every = [*doc.jobs.values(), *(j for j in objects if j.id not in doc.jobs)]
    assert len(every) == 42
    assert len(spilled_ids) > 25
    store.gets = 0
    return doc, store, sorted(every, key=sort_key)


async def walk(source: SegmentedJobs, where: JobFilter, limit: int) -> list[str]:
    seen: list[str] = []
    after = None
    while True:
        page = await source.page(where, after, limit)
        seen += [j.id for j in page.jobs]
        assert len(page.jobs) <= limit
        if page.next_after is None:
            return seen
        after = decode_cursor(encode_cursor(page.next_after))


async def test_pages_reach_into_segments_in_claim_order() -> None:
    doc, store, every = await deep()
    source = SegmentedJobs(doc, store)
    for limit in (1, 4, 7, 100):
        assert await walk(source, JobFilter(), limit) == [j.id for j in every]
    a = await source.page(JobFilter(queue="a"), None, 3)
    assert a.total == 30
    assert [j.id for j in a.jobs] == [j.id for j in every if j.queue == "a"][:3]
    queued_b = await walk(source, JobFilter(queue="b", status="queued"), 5)
    assert queued_b == [f"b{i:02d}" for i in range(12)]
    claimed = await source.page(JobFilter(status="claimed"), None, 10)
    assert [j.id for j in claimed.jobs] == ["a00"]


async def test_a_first_page_reads_only_the_segments_it_falls_in() -> None:
    doc, store, _ = await deep()
    await SegmentedJobs(doc, store).page(JobFilter(queue="a"), None, 2)
    assert store.gets <= 1
    assert sum(1 for _ in doc.segments) > 4


async def test_get_and_search_find_spilled_jobs_by_id_and_key() -> None:
    doc, store, _ = await deep()
    source = SegmentedJobs(doc, store)
    assert "a13" not in doc.jobs
    found = await source.get("a13")
    assert found is not None
    assert found.key == "key-13"
    by_key = await source.page(JobFilter(text="key-13"), None, 5)
    assert [j.id for j in by_key.jobs] == ["a13"]
    assert await source.get("nope") is None
    assert (await source.page(JobFilter(text="nope"), None, 5)).total == 0
    assert await DocumentJobs(doc).get("a13") is None  # the document alone has not


async def test_the_overview_and_top_show_a_set_aside_segment_with_its_key_and_jobs(
    tmp_path: Path,
) -> None:
    url = f"file://{tmp_path}"
    cfg = BrokerConfig(
        segment_jobs=4,
        head_jobs=2,
        load_jobs=3,
        spill_above_jobs=3,
        payload_sweep_interval_s=None,
        stats_log_interval_s=None,
    )
    async with Broker(url, cfg) as broker:
        q = broker.client()
        for i in range(8):
            await q.push(b"p%d" % i, queue="mail")
        await broker.segments.settled()
        first = next(iter(broker.document.segments))
        (tmp_path / first.key).unlink()
        broker.segments.cache.evict(first.key)  # (it was read ahead)
        while await q.claim("w", ["mail"], max_jobs=5):
            await broker.segments.settled()
        assert first.key in broker.document.segments.aside
    board = Dashboard(dashboard_config(url))
    await board.start()
    try:
        async with aiohttp.ClientSession(base_url=board.address) as http, http.get("/") as answer:
            html = await answer.text()
    finally:
        await board.stop()
    assert "Segments set aside" in html
    row = html[html.index(f'data-key="{first.key}"') :]
    assert f'data-field="jobs">{first.count}<' in row
    doc = decode((tmp_path / DOCUMENT_KEY).read_bytes())
    snap = Snapshot(url, doc, "e", 0.0, 0.0, 0)
    console = Console(width=300, record=True)
    console.print(render(snap, Rates(), None, None, 0.0))
    text = console.export_text()
    assert first.key in text
    assert f"{first.count} jobs" in text
