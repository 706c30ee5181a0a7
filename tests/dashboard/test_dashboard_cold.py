"""The dashboard's job pages list dead jobs in dead segments and waiting children
in objects (memory and file storage): the status filter offers ``waiting``,
the dead page and the job list page through the objects by cursor with totals
from the references, and a cold job's own page shows it and its payload."""

from __future__ import annotations

import re
from collections.abc import Iterator
from pathlib import Path

import aiohttp
import pytest
from backends import backend_url
from cold_helpers import cold_config, fan_in, kill
from dashboard_helpers import dashboard_config

from osqueue.broker import Broker
from osqueue.dashboard.web import Dashboard


@pytest.fixture(params=("memory", "file"))
def url(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[str]:
    with backend_url(request, request.param, tmp_path, "colddash") as found:
        yield found


async def pages(http: aiohttp.ClientSession, path: str, query: str) -> tuple[list[str], set[str]]:
    """Every job id the listing at ``path`` shows, following its next-page links;
    and the totals its pages state."""
    ids: list[str] = []
    totals: set[str] = set()
    while True:
        async with http.get(path + query) as answer:
            assert answer.status == 200
            html = await answer.text()
        ids.extend(re.findall(r'<tr data-job="([^"]+)"', html))
        totals.update(re.findall(r'<span id="(?:job|dead)-total">([^<]+)<', html))
        found = re.search(r'id="next-page" href="([^"]+)"', html)
        if found is None:
            return ids, totals
        query = found.group(1).replace("&amp;", "&")


async def job_page(http: aiohttp.ClientSession, job_id: str) -> str:
    async with http.get(f"/jobs/{job_id}") as answer:
        assert answer.status == 200
        return await answer.text()


async def test_the_job_pages_list_dead_and_waiting_jobs_in_objects(url: str) -> None:
    async with Broker(url, cold_config()) as broker:
        dead = await kill(broker, 14)
        _, children = await fan_in(broker, 22)
        doc = broker.document
        assert doc.dead.count() >= 10
        assert doc.waiting_cold.jobs() >= 17
        cold_dead = next(i for i in dead if i not in doc.jobs)
        cold_child = next(i for i in children if i not in doc.jobs)
        board = Dashboard(dashboard_config(url))
        await board.start()
        try:
            async with aiohttp.ClientSession(base_url=board.address) as http:
                async with http.get("/jobs") as answer:
                    assert '<option value="waiting"' in await answer.text()

                shown, totals = await pages(http, "/dead", "")
                assert sorted(shown) == dead
                assert totals == {"14"}
                shown, totals = await pages(http, "/jobs", "?status=dead&limit=4")
                assert sorted(shown) == dead
                assert len(shown) == len(set(shown))
                assert totals == {"14"}
                shown, totals = await pages(http, "/jobs", "?queue=kids&status=waiting&limit=5")
                assert shown == children  # claim order: their seqs
                assert totals == {"22"}
                shown, _ = await pages(http, "/jobs", "?limit=7")
                assert set(shown) >= {*dead, *children}

                page = await job_page(http, cold_dead)
                assert '<span class="st dead" id="job-status">dead</span>' in page
                assert f"dead-{int(cold_dead[1:])}" in page
                page = await job_page(http, cold_child)
                assert '<span class="st waiting" id="job-status">waiting</span>' in page
                assert f"child-{int(cold_child[1:])}" in page
        finally:
            await board.stop()
