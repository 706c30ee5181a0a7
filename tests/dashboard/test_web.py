"""The dashboard over HTTP (aiohttp's client, no browser): every page, the JSON
endpoint, the login, CSRF, and the actions going through a real broker."""

from __future__ import annotations

import asyncio
import re
from collections.abc import AsyncIterator
from pathlib import Path

import aiohttp
import pytest
from dashboard_helpers import TOKEN, Seeded, dashboard_config

from osqueue import Broker, BrokerConfig
from osqueue.client.remote import RemoteClient
from osqueue.dashboard.security import Access
from osqueue.dashboard.web import Dashboard
from osqueue.server.runner import BrokerServer

_CSRF = re.compile(r'name="csrf" value="([^"]+)"')


@pytest.fixture
async def http(board: Dashboard) -> AsyncIterator[aiohttp.ClientSession]:
    jar = aiohttp.CookieJar(unsafe=True)  # cookies for 127.0.0.1
    async with aiohttp.ClientSession(base_url=board.address, cookie_jar=jar) as session:
        yield session


async def page(http: aiohttp.ClientSession, path: str, status: int = 200) -> str:
    async with http.get(path) as response:
        text = await response.text()
        assert response.status == status, text
        return text


def csrf_of(html: str) -> str:
    match = _CSRF.search(html)
    assert match is not None, "no CSRF token in the page"
    return match[1]


async def post(
    http: aiohttp.ClientSession, path: str, data: dict[str, str] | list[tuple[str, str]]
) -> tuple[int, str, str]:
    """(status, final path, body) after following the redirect."""
    async with http.post(path, data=data) as response:
        return response.status, response.url.path, await response.text()


async def login(http: aiohttp.ClientSession, token: str = TOKEN, status: int = 200) -> str:
    html = await page(http, "/login")
    answered, _where, body = await post(
        http, "/login", {"csrf": csrf_of(html), "token": token, "next": "/dead"}
    )
    assert answered == status, body
    return body


async def test_overview_shows_the_counts_and_serves_security_headers(
    http: aiohttp.ClientSession, seeded: Seeded
) -> None:
    async with http.get("/") as response:
        html = await response.text()
        assert response.status == 200
        assert "script-src 'self'" in response.headers["Content-Security-Policy"]
        cookie = response.headers["Set-Cookie"]
        assert "HttpOnly" in cookie
        assert "SameSite=Strict" in cookie
    row = re.search(r'<tr data-queue="emails">(.*?)</tr>', html, re.S)
    assert row is not None
    cells = dict(re.findall(r'data-field="(\w+)">(?:<a[^>]*>)?([^<]*)<', row[1]))
    assert (cells["depth"], cells["ready"], cells["claimed"], cells["dead"]) == ("3", "3", "2", "0")
    assert re.search(r'data-total="dead">1<', html)
    assert "worker-1" in html  # holds two jobs


async def test_api_overview_feeds_the_charts(board: Dashboard, http: aiohttp.ClientSession) -> None:
    async with http.get("/api/overview") as response:
        data = await response.json()
    assert data["status"]["queues"]["reports"] == {
        "depth": 1,
        "ready": 0,
        "delayed": 1,
        "spilled": 0,
        "claimed": 0,
        "dead": 1,
        "oldest_age_s": None,
        "waiting": 0,
        "paused": False,
        "set_aside": 0,
        "pushed_total": 2,
        "completed_total": 0,
        "failed_total": 1,
        "dead_total": 1,
    }
    assert data["status"]["completed"] == 3
    series = data["series"]
    assert series["source"].startswith("kept by the brokers in the queue document")
    workers = {w["worker"]: (w["jobs"], w["queues"]) for w in data["workers"]}
    # worker-1 holds two jobs; worker-2 and worker-3 claimed and hold nothing now (idle)
    assert workers == {
        "worker-1": (2, ["emails"]),
        "worker-2": (0, ["reports"]),
        "worker-3": (0, ["done"]),
    }
    assert next(w["worker"] for w in data["workers"]) == "worker-1"
    assert len(series["times"]) >= 2  # this minute's sample, then the live counters
    assert series["depth"]["emails"][-1] == 3


async def test_a_drained_queue_stays_on_the_overview_with_its_counters(
    http: aiohttp.ClientSession, seeded: Seeded
) -> None:
    async with http.get("/api/overview") as response:
        data = await response.json()
    done = data["status"]["queues"]["done"]  # its three jobs completed: none is left
    assert (done["depth"], done["claimed"], done["dead"]) == (0, 0, 0)
    assert (done["pushed_total"], done["completed_total"]) == (3, 3)
    html = await page(http, "/")
    row = re.search(r'<tr data-queue="done">(.*?)</tr>', html, re.S)
    assert row is not None
    cells = dict(re.findall(r'data-field="(\w+)">(?:<a[^>]*>)?([^<]*)<', row[1]))
    assert (cells["depth"], cells["claimed"], cells["dead"]) == ("0", "0", "0")


async def test_jobs_pages_filters_and_job_detail(
    http: aiohttp.ClientSession, seeded: Seeded
) -> None:
    html = await page(http, "/jobs?queue=emails&limit=2")
    assert html.count("<tr data-job=") == 2
    assert 'id="next-page"' in html
    nxt = re.search(r'id="next-page" href="\?([^"]+)"', html)
    assert nxt is not None
    rest = await page(http, "/jobs?" + nxt[1].replace("&amp;", "&"))
    assert rest.count("<tr data-job=") == 2
    shown = set(re.findall(r'<tr data-job="([^"]+)"', html + rest))
    assert len(shown) == 4
    claimed = await page(http, "/jobs?status=claimed")
    assert set(re.findall(r'<tr data-job="([^"]+)"', claimed)) == set(seeded.claimed)
    detail = await page(http, f"/jobs/{seeded.claimed[0]}")
    assert 'id="job-holder">worker-1<' in detail
    assert re.search(r'id="job-token">\d+<', detail)
    assert "&#34;to&#34;: &#34;user" in detail  # the JSON payload, indented and escaped
    dead = await page(http, f"/jobs/{seeded.dead}")
    assert "ValueError: the report is broken" in dead
    assert 'id="job-attempts">1 of 1<' in dead
    missing = await page(http, "/jobs/no-such-job")
    assert 'id="job-missing"' in missing
    await page(http, "/jobs?status=sleeping", status=400)
    await page(http, "/jobs?after=garbage", status=400)


async def test_an_action_without_the_login_is_refused_and_changes_nothing(
    http: aiohttp.ClientSession, seeded: Seeded
) -> None:
    html = await page(http, "/dead")
    status, _, body = await post(
        http, "/dead/retry", [("csrf", csrf_of(html)), ("id", seeded.dead)]
    )
    assert status == 403
    assert "needs the admin token" in body
    status, _, body = await post(http, "/dead/retry", [("csrf", "forged"), ("id", seeded.dead)])
    assert status == 403
    assert "CSRF" in body
    status, _, body = await post(http, f"/jobs/{seeded.emails[-1]}/cancel", {"csrf": csrf_of(html)})
    assert status == 403
    assert seeded.document().jobs[seeded.dead].status == "dead"
    assert seeded.emails[-1] in seeded.document().jobs
    body = await login(http, token="wrong-token", status=401)
    assert "that is not the admin token" in body


async def test_after_login_retry_purge_and_cancel_go_through_the_broker(
    http: aiohttp.ClientSession, seeded: Seeded
) -> None:
    body = await login(http)
    assert "logged in" in body
    status, where, body = await post(
        http, "/dead/retry", [("csrf", csrf_of(body)), ("id", seeded.dead)]
    )
    assert (status, where) == (200, "/dead")
    assert "retried 1 dead job" in body
    job = seeded.document().jobs[seeded.dead]
    assert (job.status, job.attempts) == ("queued", 0)

    victim = seeded.emails[-1]
    status, where, body = await post(http, f"/jobs/{victim}/cancel", {"csrf": csrf_of(body)})
    assert where == f"/jobs/{victim}"
    assert f"cancelled job {victim}" in body
    assert victim not in seeded.document().jobs

    status, where, body = await post(http, "/queues/emails/pause", {"csrf": csrf_of(body)})
    assert (status, where) == (200, "/")
    assert "paused queue emails" in body
    assert seeded.document().queue_settings["emails"].paused
    assert 'action="/queues/emails/resume"' in body  # the overview offers the way back
    status, where, body = await post(http, "/queues/emails/resume", {"csrf": csrf_of(body)})
    assert "resumed queue emails" in body
    assert "emails" not in seeded.document().queue_settings

    html = await page(http, "/")
    status, where, body = await post(http, "/logout", {"csrf": csrf_of(html)})
    assert (status, where) == (200, "/login")
    assert "logged out" in body
    status, _, body = await post(http, "/dead/purge", {"csrf": csrf_of(body), "scope": "all"})
    assert status == 403  # the session is no longer admin


async def test_a_schedule_is_paused_and_resumed_from_the_schedules_page(
    http: aiohttp.ClientSession, client: RemoteClient, seeded: Seeded
) -> None:
    await client.schedule("nightly:eu", queue="reports", every_s=3600.0, payload=b"go")
    html = await page(http, "/dead")
    status, _, body = await post(http, "/schedules/nightly%3Aeu/pause", {"csrf": csrf_of(html)})
    assert status == 403  # no login: refused, nothing changed
    assert not seeded.document().schedules.get("nightly:eu").paused  # type: ignore[union-attr]

    body = await login(http)
    status, where, body = await post(http, "/schedules/nightly%3Aeu/pause", {"csrf": csrf_of(body)})
    assert (status, where) == (200, "/schedules")
    assert "paused schedule nightly:eu" in body
    stored = seeded.document().schedules.get("nightly:eu")
    assert stored is not None
    assert stored.paused
    assert (stored.every_s, stored.payload, stored.queue) == (3600.0, b"go", "reports")
    assert 'action="/schedules/nightly%3Aeu/resume"' in body  # the name as one segment
    assert 'data-paused="true"' in body
    status, where, body = await post(
        http, "/schedules/nightly%3Aeu/resume", {"csrf": csrf_of(body)}
    )
    assert "resumed schedule nightly:eu" in body
    assert not seeded.document().schedules.get("nightly:eu").paused  # type: ignore[union-attr]
    assert 'action="/schedules/nightly%3Aeu/pause"' in body

    status, _, body = await post(http, "/schedules/nothere/pause", {"csrf": csrf_of(body)})
    assert status == 404
    assert "NotFound: no schedule &#39;nothere&#39;" in body
    status, _, _ = await post(http, "/schedules/nightly%3Aeu/stop", {"csrf": csrf_of(html)})
    assert status == 404


async def test_a_read_only_dashboard_shows_the_schedule_buttons_disabled(tmp_path: Path) -> None:
    directory = tmp_path / "queue"
    directory.mkdir()
    async with Broker(directory.as_uri(), BrokerConfig(address="127.0.0.1:1")) as broker:
        await broker.client().schedule("beat", queue="health", every_s=60.0)
    async with Dashboard(dashboard_config(directory.as_uri(), token=None)) as dashboard:
        jar = aiohttp.CookieJar(unsafe=True)
        async with aiohttp.ClientSession(dashboard.address, cookie_jar=jar) as http:
            html = await page(http, "/schedules")
    (button,) = re.findall(r"<button[^>]*data-action=\"pause\"[^>]*>", html, re.S)
    assert "disabled" in button
    assert 'action="/schedules/beat/pause"' in html


async def test_bulk_purge_of_one_queue(http: aiohttp.ClientSession, seeded: Seeded) -> None:
    body = await login(http)
    status, where, body = await post(
        http, "/dead/purge", {"csrf": csrf_of(body), "scope": "all", "queue": "reports"}
    )
    assert (status, where) == (200, "/dead")
    assert "purged 1 dead job" in body
    assert seeded.dead not in seeded.document().jobs
    _, _, body = await post(http, "/dead/retry", {"csrf": csrf_of(body), "scope": "selected"})
    assert "select at least one dead job" in body


async def test_archive_by_day_and_hour_and_find(
    board: Dashboard, http: aiohttp.ClientSession, seeded: Seeded, broker_server: BrokerServer
) -> None:
    # The broker writes archive objects just after the commits that completed the
    # jobs (one object per version, written by concurrent writers): wait until
    # every completed job's record is found, within the time a broker gives its
    # archive writes on a stop (the listing is not cached here).
    board.archive.cache_s = 0.0
    deadline = asyncio.get_running_loop().time() + broker_server.broker_config.drain_timeout_s
    while True:
        hits = [await board.archive.find(job_id) for job_id in seeded.completed]
        if all(f.hit is not None for f in hits):
            break
        assert asyncio.get_running_loop().time() < deadline, (
            f"the broker archived {sum(f.hit is not None for f in hits)} of 3 completed jobs"
        )
        await asyncio.sleep(0.05)  # the next look at the listing, not a wait for the writers
    found = hits[0]
    assert found.hit is not None
    obj, record = found.hit
    assert record.queue == "done"
    assert record.worker == "worker-3"
    days = await page(http, "/archive")
    assert f"/archive?day={obj.day}" in days
    hour = await page(http, f"/archive?day={obj.day}&hour={obj.hour}")
    assert all(job_id in hour for job_id in seeded.completed)
    hit = await page(http, f"/archive/find?id={seeded.completed[1]}")
    assert 'id="archive-record"' in hit
    assert "worker-3" in hit
    miss = await page(http, "/archive/find?id=no-such-job")
    assert 'id="archive-not-found"' in miss
    await page(http, "/archive?day=yesterday", status=400)


async def test_broker_page_shows_the_owner_and_its_epochs(
    http: aiohttp.ClientSession, seeded: Seeded
) -> None:
    html = await page(http, "/broker")
    owner = seeded.document().broker
    assert owner is not None
    assert f'id="broker-address">{owner.address}<' in html
    assert f'id="broker-epoch">{owner.epoch}<' in html
    assert "not available (needs broker metrics)" in html


async def test_beyond_loopback_reading_needs_the_login(seeded: Seeded) -> None:
    """The rule a non-loopback --listen gets (access_for, tested on its own), applied
    to a dashboard that still binds loopback only: no traffic beyond this machine."""
    board = Dashboard(dashboard_config(seeded.url))
    board.access = Access(token=TOKEN, open_reads=False)
    await board.start()
    try:
        jar = aiohttp.CookieJar(unsafe=True)
        async with aiohttp.ClientSession(board.address, cookie_jar=jar) as http:
            refused = await page(http, "/", status=401)
            assert "log in with the admin token" in refused
            async with http.get("/api/overview") as response:
                assert response.status == 401
            await login(http)
            await page(http, "/")
    finally:
        await board.stop()
