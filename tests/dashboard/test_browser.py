"""The dashboard in a real browser: Debian's headless Chromium driven by selenium.

A broker serves a queue with live data; the dashboard runs in this process.
The browser loads the overview and checks the numbers it shows (and that the
charts get drawn), opens jobs, is refused a retry without the admin token,
logs in, retries a dead job by clicking, and the test then reads the queue
document from storage to see the job queued again.

Selenium calls block, so each step runs in a thread while this event loop
serves the dashboard and the broker.  Screenshots go to the test's directory,
and to ``$OSQUEUE_SCREENSHOT_DIR`` when set (``docs/images`` keeps the ones the
docs show).
"""

from __future__ import annotations

import asyncio
import math
import os
import re
import shutil
import tempfile
from collections.abc import AsyncIterator, Callable, Iterator
from pathlib import Path
from typing import TypeVar

import pytest
from dashboard_helpers import TOKEN, Seeded, dashboard_config, seed_stopped
from selenium import webdriver
from selenium.common.exceptions import StaleElementReferenceException, WebDriverException
from selenium.webdriver.chrome.service import Service
from selenium.webdriver.common.by import By
from selenium.webdriver.remote.webdriver import WebDriver
from selenium.webdriver.remote.webelement import WebElement
from selenium.webdriver.support.ui import WebDriverWait

from osqueue.api import NewJob
from osqueue.broker import BrokerConfig
from osqueue.client.remote import RemoteClient, connect
from osqueue.dashboard.web import Dashboard
from osqueue.server.runner import BrokerServer
from osqueue.server.server import ServerConfig

CHROMIUM = "/usr/bin/chromium"
CHROMEDRIVER = "/usr/bin/chromedriver"
FLAGS = (
    "--headless",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-quic",
    "--no-first-run",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
    "--window-size=1280,900",
)
WAIT_S = 30.0
T = TypeVar("T")


@pytest.fixture(scope="module")
def browser() -> Iterator[WebDriver]:
    for path in (CHROMIUM, CHROMEDRIVER):
        assert os.access(path, os.X_OK), f"{path} is missing: run make setup (apt: chromium)"
    profile = tempfile.mkdtemp(prefix="osqueue-chromium-")
    options = webdriver.ChromeOptions()
    options.binary_location = CHROMIUM
    for flag in FLAGS:
        options.add_argument(flag)
    options.add_argument(f"--user-data-dir={profile}")
    driver = webdriver.Chrome(options=options, service=Service(CHROMEDRIVER))
    driver.set_page_load_timeout(WAIT_S)
    # find_element waits for the element: a click that navigates may return before
    # the next page is there
    driver.implicitly_wait(WAIT_S)
    try:
        yield driver
    finally:
        driver.quit()
        shutil.rmtree(profile, ignore_errors=True)


async def step(fn: Callable[[], T]) -> T:
    """Run one blocking browser step while this loop keeps serving."""
    return await asyncio.to_thread(fn)


def screenshot(driver: WebDriver, directory: Path, name: str) -> None:
    target = directory / name
    assert driver.save_screenshot(str(target)), f"no screenshot {name}"
    keep = os.environ.get("OSQUEUE_SCREENSHOT_DIR")
    if keep:
        Path(keep).mkdir(parents=True, exist_ok=True)
        shutil.copyfile(target, Path(keep) / name)


def cell(driver: WebDriver, queue: str, field: str) -> str:
    selector = f'tr[data-queue="{queue}"] td[data-field="{field}"]'
    text: str = driver.find_element(By.CSS_SELECTOR, selector).text
    return text


def total(driver: WebDriver, name: str) -> str:
    text: str = driver.find_element(By.CSS_SELECTOR, f'[data-total="{name}"]').text
    return text


def submit(driver: WebDriver, button: WebElement) -> None:
    """Click a form's ``button`` and wait until the page the form loads has replaced
    this one (a click returns before that: a notice read at once may be the old
    page's, which a page after an action already shows)."""
    page = driver.find_element(By.TAG_NAME, "html")
    button.click()
    WebDriverWait(driver, WAIT_S).until(lambda _: replaced(page))


def replaced(element: WebElement) -> bool:
    """``element``'s page is gone: Selenium's ``staleness_of``, but Chromium, asked
    about a node while it navigates away, may answer that the node belongs to no
    document instead of that it is stale (SeleniumHQ/selenium#15401: a few runs in
    a hundred); that answer means the same here."""
    try:
        element.is_enabled()
    except StaleElementReferenceException:
        return True
    except WebDriverException as exc:
        if "does not belong to the document" in (exc.msg or ""):
            return True
        raise
    return False


def wait_for(driver: WebDriver, css: str) -> None:
    WebDriverWait(driver, WAIT_S).until(lambda d: d.find_elements(By.CSS_SELECTOR, css))


async def traffic(client: RemoteClient, rounds: int) -> None:
    """Some pushes and completions on ``emails``, so the charts have a line to draw."""
    for i in range(rounds):
        await client.push_many([NewJob(f'{{"round": {i}}}'.encode(), queue="emails")] * 3)
        for job in await client.claim("worker-9", ["emails"], max_jobs=2):
            await client.complete(job)
        await asyncio.sleep(0.1)  # pace: spread the samples over a few seconds of chart


async def test_overview_job_pages_retry_and_refusal(
    browser: WebDriver,
    board: Dashboard,
    seeded: Seeded,
    client: RemoteClient,
    tmp_path: Path,
) -> None:
    base = board.address
    assert base is not None

    def overview() -> None:
        browser.get(base + "/")
        assert cell(browser, "emails", "depth") == "3"
        assert cell(browser, "emails", "ready") == "3"
        assert cell(browser, "emails", "claimed") == "2"
        assert cell(browser, "reports", "delayed") == "1"
        assert cell(browser, "reports", "dead") == "1"
        assert (total(browser, "depth"), total(browser, "claimed")) == ("4", "2")
        assert (total(browser, "dead"), total(browser, "completed")) == ("1", "3")
        workers = browser.find_element(By.ID, "workers").text
        assert "worker-1" in workers

    await step(overview)

    await traffic(client, 25)

    def charts() -> None:
        # the page's script polls /api/overview and draws both charts as inline SVG
        wait_for(browser, '#chart-depth path.line[data-series="emails"]')
        wait_for(browser, '#chart-rate path.line[data-series="completed"]')
        WebDriverWait(browser, WAIT_S).until(lambda d: total(d, "completed") == "53")

    await step(charts)

    claimed = seeded.claimed[0]

    def job_pages() -> None:
        browser.get(f"{base}/jobs?status=claimed")
        browser.find_element(By.LINK_TEXT, claimed).click()
        assert browser.find_element(By.ID, "job-holder").text == "worker-1"
        assert browser.find_element(By.ID, "job-token").text.isdigit()
        assert '"to": "user' in browser.find_element(By.ID, "payload").text
        screenshot(browser, tmp_path, "dashboard-job.png")
        browser.get(f"{base}/dead")
        browser.find_element(By.LINK_TEXT, seeded.dead).click()
        assert browser.find_element(By.ID, "job-attempts").text == "1 of 1"
        assert "the report is broken" in browser.find_element(By.ID, "job-error").text
        assert browser.find_element(By.ID, "payload").text == "broken report"

    await step(job_pages)

    def refused_without_the_token() -> str:
        browser.find_element(By.ID, "retry-one").click()  # not logged in
        text: str = browser.find_element(By.ID, "message").text
        return text

    assert "needs the admin token" in await step(refused_without_the_token)
    assert seeded.document().jobs[seeded.dead].status == "dead"

    def log_in_and_retry() -> str:
        browser.find_element(By.ID, "message-login").click()
        browser.find_element(By.ID, "token").send_keys(TOKEN)
        submit(browser, browser.find_element(By.ID, "login-submit"))
        assert "logged in" in browser.find_element(By.CSS_SELECTOR, ".notice.ok").text
        browser.get(f"{base}/dead")
        browser.find_element(By.CSS_SELECTOR, f'input[name="id"][value="{seeded.dead}"]').click()
        submit(browser, browser.find_element(By.ID, "retry-selected"))
        text: str = browser.find_element(By.CSS_SELECTOR, ".notice.ok").text
        return text

    assert await step(log_in_and_retry) == "retried 1 dead job"
    job = seeded.document().jobs[seeded.dead]
    assert (job.status, job.attempts) == ("queued", 0)

    def pause_emails() -> str:
        browser.get(f"{base}/")
        row = browser.find_element(By.CSS_SELECTOR, 'tr[data-queue="emails"]')
        submit(browser, row.find_element(By.CSS_SELECTOR, 'button[data-action="pause"]'))
        text: str = browser.find_element(By.CSS_SELECTOR, ".notice.ok").text
        # the page after the click offers resume, and says the queue is paused
        row = browser.find_element(By.CSS_SELECTOR, 'tr[data-queue="emails"]')
        assert row.find_element(By.CSS_SELECTOR, "[data-paused]").text == "paused"
        row.find_element(By.CSS_SELECTOR, 'button[data-action="resume"]')
        return text

    assert await step(pause_emails) == "paused queue emails"
    assert seeded.document().queue_settings["emails"].paused
    assert (await client.stats()).queues["emails"].depth >= 3  # ready jobs are there ...
    assert await client.claim("worker-9", ["emails"], max_jobs=3) == []  # ... and held back
    assert await client.claim("worker-9", ["emails"], max_jobs=3, wait_s=0.3) == []

    def resume_emails() -> str:
        # (the page shows the pause's notice until the resume's page replaces it)
        submit(browser, browser.find_element(By.CSS_SELECTOR, 'button[data-action="resume"]'))
        text: str = browser.find_element(By.CSS_SELECTOR, ".notice.ok").text
        return text

    assert await step(resume_emails) == "resumed queue emails"
    assert len(await client.claim("worker-9", ["emails"], max_jobs=3)) == 3


# --------------------------------------------------------------------------- issue 26


def texts(driver: WebDriver, css: str) -> list[str]:
    """The text of every match, read in one step (the charts are redrawn on each poll)."""
    found: list[str] = driver.execute_script(
        "return Array.from(document.querySelectorAll(arguments[0]), e => e.textContent.trim())",
        css,
    )
    return found


async def test_schedules_run_at_died_at_workers_and_a_legend_of_sixteen_queues(
    browser: WebDriver,
    board: Dashboard,
    seeded: Seeded,
    client: RemoteClient,
    tmp_path: Path,
) -> None:
    """What issue 26 found missing, as a person sees it: a schedules page, when a
    delayed job runs, when a dead job died (and its age from then), idle workers,
    and a depth chart whose legend names all of sixteen queues on round ticks."""
    base = board.address
    assert base is not None
    await client.schedule("nightly-report", queue="reports", cron="0 3 * * *", tz="Europe/Paris")
    await client.schedule("beat", queue="health", every_s=2.0, payload=b"ping")
    await client.push(b"first", queue="health")  # the queue the beat pushes to, listed already
    queues = [f"q{i:02d}" for i in range(16)]
    await client.push_many(
        [NewJob(b"x", queue=q) for q in queues for _ in range(queues.index(q) % 7 + 1)]
    )
    assert await client.claim("idle-worker", ["nothing-here"]) == []  # heard from, holds nothing
    await traffic(client, 10)

    def overview() -> None:
        browser.get(base + "/")
        workers = browser.find_element(By.ID, "workers")
        idle = workers.find_element(By.CSS_SELECTOR, 'tr[data-worker="idle-worker"]')
        assert "idle" in idle.text
        assert "nothing-here" in idle.text
        assert idle.find_element(By.CSS_SELECTOR, '[data-field="last-seen"]').text.endswith(" ago")
        # per-queue throughput over the last minute: emails had completions, q00 none
        emails = browser.find_element(By.CSS_SELECTOR, 'tr[data-queue="emails"]')
        completed = emails.find_element(By.CSS_SELECTOR, '[data-rate="completed"]').text
        assert float(completed) > 0
        q00 = browser.find_element(By.CSS_SELECTOR, 'tr[data-queue="q00"]')
        assert q00.find_element(By.CSS_SELECTOR, '[data-rate="completed"]').text in ("-", "0.0")
        busy = workers.find_element(By.CSS_SELECTOR, 'tr[data-worker="worker-1"]')
        assert "busy" in busy.text
        # every queue in the legend, none cut: 16 q-queues besides emails, reports, ...
        wait_for(browser, '#chart-depth-legend li[data-series="q15"]')
        legend = browser.find_element(By.ID, "chart-depth-legend")
        names = texts(browser, "#chart-depth-legend li")
        assert set(queues) <= set(names)
        for item in legend.find_elements(By.CSS_SELECTOR, "li"):
            assert item.is_displayed()
            assert item.size["width"] > 0
        box = legend.rect
        last = legend.find_element(By.CSS_SELECTOR, 'li[data-series="q15"]').rect
        assert last["x"] + last["width"] <= box["x"] + box["width"] + 1  # wraps, not cut
        # round ticks only: 1, 2 or 5 times a power of ten apart, from 0
        wait_for(browser, "#chart-depth text.tick")
        for chart in ("chart-depth", "chart-rate"):
            ticks = [float(t.replace(",", "")) for t in texts(browser, f"#{chart} text.tick")]
            assert ticks[0] == 0
            assert len(ticks) >= 2
            step = ticks[1] - ticks[0]
            mantissa = step / 10 ** math.floor(math.log10(step))
            assert round(mantissa, 6) in (1.0, 2.0, 5.0), (chart, ticks)
        browser.set_window_size(1280, 2300)  # the whole page: queues, charts, workers
        try:
            screenshot(browser, tmp_path, "dashboard-overview.png")
        finally:
            browser.set_window_size(1280, 900)

    await step(overview)

    def schedules() -> None:
        browser.get(base + "/")
        browser.find_element(By.LINK_TEXT, "Schedules").click()
        nightly = browser.find_element(By.CSS_SELECTOR, 'tr[data-schedule="nightly-report"]')
        assert "0 3 * * *" in nightly.text
        assert "Europe/Paris" in nightly.text
        assert "reports" in nightly.text
        when = nightly.find_element(By.CSS_SELECTOR, '[data-field="next"] time')
        assert when.text.startswith("in ")
        assert when.get_attribute("title").endswith(" UTC")
        assert nightly.find_element(By.CSS_SELECTOR, '[data-field="last"]').text == "never"

        def ticked(driver: WebDriver) -> bool:
            driver.refresh()
            row = driver.find_element(By.CSS_SELECTOR, 'tr[data-schedule="beat"]')
            return row.find_element(By.CSS_SELECTOR, '[data-field="last"]').text.endswith(" ago")

        WebDriverWait(browser, WAIT_S).until(ticked)
        beat = browser.find_element(By.CSS_SELECTOR, 'tr[data-schedule="beat"]')
        assert "every 2.0s" in beat.text
        assert "active" in beat.text
        assert "skips its ticks" in browser.find_element(By.ID, "schedule-pause-note").text
        screenshot(browser, tmp_path, "dashboard-schedules.png")
        # the last tick's job is one click away
        beat.find_element(By.CSS_SELECTOR, '[data-field="last-job"] a').click()
        assert browser.find_element(By.CSS_SELECTOR, "#job-fields a").text == "health"

    await step(schedules)

    def delayed_job() -> None:
        browser.get(f"{base}/jobs?queue=reports")
        row = browser.find_element(By.CSS_SELECTOR, f'tr[data-job="{seeded.delayed}"]')
        assert row.find_element(By.CSS_SELECTOR, "[data-status]").text == "delayed"
        runs = row.find_element(By.CSS_SELECTOR, '[data-field="when"] time')
        assert re.fullmatch(r"runs in (59m\d+s|1h0m)", runs.text), runs.text  # due in an hour
        assert runs.get_attribute("title").endswith(" UTC")
        row.find_element(By.LINK_TEXT, seeded.delayed).click()
        assert browser.find_element(By.ID, "job-status").text == "delayed"  # as the list said
        detail = browser.find_element(By.ID, "job-runs")
        assert detail.text.startswith("in ")
        assert detail.text.endswith(" UTC)")
        assert detail.find_element(By.CSS_SELECTOR, "time").get_attribute("title").endswith(" UTC")
        screenshot(browser, tmp_path, "dashboard-job-delayed.png")

    await step(delayed_job)

    def dead_job() -> None:
        browser.get(f"{base}/dead")
        header = browser.find_element(By.CSS_SELECTOR, "#jobs thead").text
        assert "since it died" in header
        row = browser.find_element(By.CSS_SELECTOR, f'tr[data-job="{seeded.dead}"]')
        assert row.find_element(By.CSS_SELECTOR, '[data-field="when"]').text.startswith("died ")
        row.find_element(By.LINK_TEXT, seeded.dead).click()
        assert browser.find_element(By.ID, "job-status").text == "dead"
        died = browser.find_element(By.ID, "job-died").text
        assert " UTC (" in died
        assert died.endswith(" ago)")
        screenshot(browser, tmp_path, "dashboard-job-dead.png")

    await step(dead_job)
    died_at = seeded.document().jobs[seeded.dead].done_at
    assert died_at is not None  # the page's "died at" is the document's


@pytest.fixture
async def open_broker(queue_dir: Path) -> AsyncIterator[BrokerServer]:
    """A broker on loopback without a token (a developer's own machine)."""
    config = BrokerConfig(lease_s=3600.0, heartbeat_timeout_s=600.0)
    server = BrokerServer(queue_dir.as_uri(), ServerConfig(listen="127.0.0.1:0"), config)
    await server.start()
    try:
        yield server
    finally:
        await server.stop()


async def test_on_loopback_actions_need_no_token_and_csrf_still_holds(
    browser: WebDriver, queue_dir: Path, open_broker: BrokerServer
) -> None:
    async with await connect(queue_dir.as_uri(), timeout_s=20.0) as remote:
        await remote.push_many([NewJob(b"e", queue="emails") for _ in range(3)])
    async with Dashboard(dashboard_config(queue_dir.as_uri(), token=None)) as dashboard:
        base = dashboard.address
        assert base is not None

        def pause_without_a_login() -> str:
            browser.delete_all_cookies()
            browser.get(base + "/")
            assert browser.find_element(By.ID, "local-actions").text == "local"
            note = browser.execute_script("return document.getElementById('read-only-note')")
            assert note is None
            button = browser.find_element(
                By.CSS_SELECTOR, 'tr[data-queue="emails"] button[data-action="pause"]'
            )
            assert button.is_enabled()
            button.click()
            text: str = browser.find_element(By.CSS_SELECTOR, ".notice.ok").text
            return text

        assert await step(pause_without_a_login) == "paused queue emails"
        doc = Seeded(queue_dir.as_uri(), queue_dir, [], [], "", "", []).document()
        assert doc.queue_settings["emails"].paused

        def forged_form() -> str:
            # a form without this session's CSRF token is still refused
            browser.execute_script("document.querySelector('input[name=csrf]').value = 'forged';")
            browser.find_element(By.CSS_SELECTOR, 'button[data-action="resume"]').click()
            text: str = browser.find_element(By.ID, "message").text
            return text

        assert "CSRF" in await step(forged_form)
        assert (
            Seeded(queue_dir.as_uri(), queue_dir, [], [], "", "", [])
            .document()
            .queue_settings["emails"]
            .paused
        )


async def test_a_read_only_dashboard_shows_its_buttons_disabled_and_says_why(
    browser: WebDriver, tmp_path: Path
) -> None:
    directory = tmp_path / "queue"
    directory.mkdir()
    ids = await asyncio.to_thread(seed_stopped, directory)  # no broker serves it now
    async with Dashboard(dashboard_config(directory.as_uri(), token=None)) as dashboard:
        base = dashboard.address
        assert base is not None

        def look() -> None:
            browser.delete_all_cookies()
            browser.get(base + "/")
            assert browser.find_element(By.ID, "read-only").text == "read only"
            note = browser.find_element(By.ID, "read-only-note").text
            assert "no broker is serving" in note
            for button in browser.find_elements(By.CSS_SELECTOR, "#queues button"):
                assert not button.is_enabled()
                assert "no broker is serving" in (button.get_attribute("title") or "")
            browser.get(f"{base}/jobs/{ids['dead']}")
            for name in ("cancel", "retry-one"):
                assert not browser.find_element(By.ID, name).is_enabled()
            browser.get(f"{base}/dead")
            for name in ("retry-selected", "purge-selected", "retry-all", "purge-all"):
                assert not browser.find_element(By.ID, name).is_enabled()

        await step(look)


class _Element:
    """An element whose ``is_enabled`` answers as Chromium may while it navigates."""

    def __init__(self, answer: Exception | None) -> None:
        self.answer = answer

    def is_enabled(self) -> bool:
        if self.answer is not None:
            raise self.answer
        return True


def test_a_node_chromium_says_belongs_to_no_document_counts_as_replaced() -> None:
    inspector = (
        "unknown error: unhandled inspector error: "
        '{"code":-32000,"message":"Node with given id does not belong to the document"}'
    )
    assert replaced(_Element(WebDriverException(inspector)))  # type: ignore[arg-type]
    assert replaced(_Element(StaleElementReferenceException("stale")))  # type: ignore[arg-type]
    assert not replaced(_Element(None))  # type: ignore[arg-type]
    with pytest.raises(WebDriverException, match="chrome not reachable"):
        replaced(_Element(WebDriverException("chrome not reachable")))  # type: ignore[arg-type]
