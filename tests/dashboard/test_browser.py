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
import os
import shutil
import tempfile
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import TypeVar

import pytest
from dashboard_helpers import TOKEN, Seeded
from selenium import webdriver
from selenium.webdriver.chrome.service import Service
from selenium.webdriver.common.by import By
from selenium.webdriver.remote.webdriver import WebDriver
from selenium.webdriver.support.ui import WebDriverWait

from osqueue.api import NewJob
from osqueue.client.remote import RemoteClient
from osqueue.dashboard.web import Dashboard

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
        holders = browser.find_element(By.ID, "holders").text
        assert "worker-1" in holders

    await step(overview)

    await traffic(client, 25)

    def charts() -> None:
        # the page's script polls /api/overview and draws both charts as inline SVG
        wait_for(browser, '#chart-depth path.line[data-series="emails"]')
        wait_for(browser, '#chart-rate path.line[data-series="completed"]')
        WebDriverWait(browser, WAIT_S).until(lambda d: total(d, "completed") == "53")
        screenshot(browser, tmp_path, "dashboard-overview.png")

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
        browser.find_element(By.ID, "login-submit").click()
        assert "logged in" in browser.find_element(By.CSS_SELECTOR, ".notice.ok").text
        browser.get(f"{base}/dead")
        browser.find_element(By.CSS_SELECTOR, f'input[name="id"][value="{seeded.dead}"]').click()
        browser.find_element(By.ID, "retry-selected").click()
        text: str = browser.find_element(By.CSS_SELECTOR, ".notice.ok").text
        return text

    assert await step(log_in_and_retry) == "retried 1 dead job"
    job = seeded.document().jobs[seeded.dead]
    assert (job.status, job.attempts) == ("queued", 0)

    def pause_emails() -> str:
        browser.get(f"{base}/")
        row = browser.find_element(By.CSS_SELECTOR, 'tr[data-queue="emails"]')
        row.find_element(By.CSS_SELECTOR, 'button[data-action="pause"]').click()
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
        browser.find_element(By.CSS_SELECTOR, 'button[data-action="resume"]').click()
        text: str = browser.find_element(By.CSS_SELECTOR, ".notice.ok").text
        return text

    assert await step(resume_emails) == "resumed queue emails"
    assert len(await client.claim("worker-9", ["emails"], max_jobs=3)) == 3
