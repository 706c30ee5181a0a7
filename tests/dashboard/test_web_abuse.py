"""The dashboard turned against its users, over HTTP (issue 23): an open redirect
after the login, DNS rebinding, anonymous traffic logging the admin out, a
burst of wrong tokens, and a queue name that aims a form at another queue."""

from __future__ import annotations

import asyncio
import re
from collections.abc import AsyncIterator
from urllib.parse import urljoin

import aiohttp
import pytest
from dashboard_helpers import TOKEN, Seeded, dashboard_config
from test_web import csrf_of, login, page
from yarl import URL

from osqueue.api import NewJob
from osqueue.client.remote import RemoteClient
from osqueue.dashboard.web import Dashboard


class Clock:
    """The dashboard's monotonic clock, moved by the test."""

    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


@pytest.fixture
def clock() -> Clock:
    return Clock()


@pytest.fixture
async def board(seeded: Seeded, clock: Clock) -> AsyncIterator[Dashboard]:
    dashboard = Dashboard(dashboard_config(seeded.url), clock=clock)
    await dashboard.start()
    try:
        yield dashboard
    finally:
        await dashboard.stop()


@pytest.fixture
async def http(board: Dashboard) -> AsyncIterator[aiohttp.ClientSession]:
    jar = aiohttp.CookieJar(unsafe=True)
    async with aiohttp.ClientSession(base_url=board.address, cookie_jar=jar) as session:
        yield session


def port_of(board: Dashboard) -> int:
    assert board.address is not None
    port = URL(board.address).port
    assert port is not None
    return port


# --------------------------------------------------------------------------- open redirect


async def test_next_after_login_never_leaves_the_site(http: aiohttp.ClientSession) -> None:
    """The issue's request: ``next=/<TAB>/evil.example/phish`` and a right token
    answered ``Location: /\\t/evil.example/phish`` (a browser goes to evil.example)."""
    form = await page(http, "/login?next=%2F%09%2Fevil.example%2Fphish")
    assert 'name="next" value="/"' in form
    for target in ("/\t/evil.example/phish", "/%09/evil.example/phish", "//evil.example"):
        html = await page(http, "/login")
        data = {"csrf": csrf_of(html), "token": TOKEN, "next": target}
        async with http.post("/login", data=data, allow_redirects=False) as response:
            assert response.status == 303
            assert response.headers["Location"] == "/", target
    html = await page(http, "/login")
    data = {"csrf": csrf_of(html), "token": TOKEN, "next": "/jobs?queue=emails"}
    async with http.post("/login", data=data, allow_redirects=False) as response:
        assert response.headers["Location"] == "/jobs?queue=emails"  # a path of this site


# --------------------------------------------------------------------------- DNS rebinding


async def test_a_foreign_host_header_is_refused(board: Dashboard) -> None:
    """DNS rebinding: a page of evil.example re-points its name at 127.0.0.1 and
    reads the dashboard (open on loopback); the request names evil.example."""
    port = port_of(board)
    async with aiohttp.ClientSession(base_url=board.address) as http:
        for host in ("evil.example", f"evil.example:{port}", "127.0.0.1", f"localhost:{port + 1}"):
            for path in ("/", "/api/overview", "/static/app.js", "/login"):
                async with http.get(path, headers={"Host": host}) as response:
                    text = await response.text()
                    assert response.status == 421, (host, path)
                    assert "--allowed-host" in text
                    assert "depth" not in text
                    assert "Set-Cookie" not in response.headers
        for host in (
            f"127.0.0.1:{port}",
            f"localhost:{port}",
            f"LOCALHOST.:{port}",
            f"[::1]:{port}",
        ):
            async with http.get("/api/overview", headers={"Host": host}) as response:
                assert response.status == 200, host


async def test_allowed_hosts_are_served(seeded: Seeded) -> None:
    config = dashboard_config(seeded.url, allowed_hosts=("dash.example", "proxy.example:443"))
    async with Dashboard(config) as board, aiohttp.ClientSession(base_url=board.address) as http:
        for host, status in (
            ("dash.example", 200),
            ("dash.example:8443", 200),
            ("proxy.example:443", 200),
            ("proxy.example", 421),
            ("evil.example", 421),
        ):
            async with http.get("/api/overview", headers={"Host": host}) as response:
                assert response.status == status, host


# --------------------------------------------------------------------------- sessions


async def test_anonymous_traffic_never_logs_the_admin_out(
    board: Dashboard, http: aiohttp.ClientSession
) -> None:
    """10,001 cookie-less requests used to push the admin's session out of a
    store of 10,000 that every visitor was added to."""
    await login(http)
    assert len(board.sessions) == 1
    gate = asyncio.Semaphore(16)
    async with aiohttp.ClientSession(
        base_url=board.address, cookie_jar=aiohttp.DummyCookieJar()
    ) as anonymous:

        async def visit() -> None:
            async with gate, anonymous.get("/static/favicon.svg") as response:
                assert response.status == 200
                assert "osqueue_session" in response.cookies  # a visitor's id, not stored

        await asyncio.gather(*(visit() for _ in range(10_001)))
    assert len(board.sessions) == 1
    assert "badge ok" in await page(http, "/")  # still the admin


# --------------------------------------------------------------------------- failed logins


async def test_a_burst_of_wrong_tokens_is_throttled_and_the_right_one_works_later(
    http: aiohttp.ClientSession, clock: Clock
) -> None:
    html = await page(http, "/login")
    csrf = csrf_of(html)
    answers: dict[int, int] = {}
    retry_after = set()
    for i in range(300):
        data = {"csrf": csrf, "token": f"guess-{i}", "next": "/"}
        async with http.post("/login", data=data, allow_redirects=False) as response:
            answers[response.status] = answers.get(response.status, 0) + 1
            if response.status == 429:
                retry_after.add(int(response.headers["Retry-After"]))
                assert "too many failed logins" in await response.text()
    assert answers[429] >= 290, answers
    assert set(answers) == {401, 429}
    data = {"csrf": csrf, "token": TOKEN, "next": "/"}
    async with http.post("/login", data=data, allow_redirects=False) as response:
        assert response.status == 429  # held back: the token is not even compared
    clock.now += max(retry_after)
    async with http.post("/login", data=data, allow_redirects=False) as response:
        assert response.status == 303
    assert "badge ok" in await page(http, "/")


# --------------------------------------------------------------------------- names in URLs


async def test_a_queue_named_like_a_path_gets_its_own_pause_form(
    board: Dashboard, http: aiohttp.ClientSession, client: RemoteClient, seeded: Seeded
) -> None:
    hostile = "../queues/victim"
    await client.push_many([NewJob(b"x", queue=hostile), NewJob(b"y", queue="victim")])
    await board.source.refresh()
    body = await login(http)
    html = await page(http, "/")
    row = re.search(r'<tr data-queue="\.\./queues/victim">(.*?)</tr>', html, re.S)
    assert row is not None
    action = re.search(r'<form method="post" action="([^"]+)"', row[1])
    assert action is not None
    resolved = URL(urljoin(f"{board.address}/", action[1]), encoded=True)  # as a browser does
    assert resolved.raw_path == "/queues/..%2Fqueues%2Fvictim/pause"
    async with http.post(resolved, data={"csrf": csrf_of(body)}) as response:
        assert response.status == 200
        assert "paused queue ../queues/victim" in await response.text()
    settings = seeded.document().queue_settings
    assert settings[hostile].paused
    assert "victim" not in settings
