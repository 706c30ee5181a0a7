"""``osqueue schedule``, ``osqueue queue``, ``jobs --status waiting`` and ``push --after``."""

from __future__ import annotations

import asyncio
import json
import re
from pathlib import Path

import pytest
from test_cli import _restore_logging, assert_one_error_line, invoke, qdir, read_doc, url_of

from osqueue import Broker, BrokerConfig, NewJob
from osqueue.cli.queue import parse_rate
from osqueue.cli.schedule import parse_every
from osqueue.errors import InvalidInput

__all__ = ["_restore_logging", "qdir"]  # the fixtures, shared with test_cli


def test_schedule_add_list_and_remove(qdir: Path) -> None:
    url = url_of(qdir)
    added = invoke(
        "schedule", url, "add", "nightly", "--cron", "0 3 * * *", "--tz", "Europe/Paris",
        "--queue", "reports", "--data", '{"kind": "nightly"}', "--embedded",
    )  # fmt: skip
    assert added.exit_code == 0, added.stderr
    assert added.stdout.startswith("scheduled nightly: next run ")
    beat = invoke("schedule", url, "add", "beat", "--every", "30s", "-q", "health", "--embedded")
    assert beat.exit_code == 0, beat.stderr
    doc = read_doc(qdir)
    assert sorted(s.name for s in doc.schedules) == ["beat", "nightly"]
    assert doc.schedules.get("beat").every_s == 30.0  # type: ignore[union-attr]

    listed = invoke("schedule", url, "list", "--json")
    assert listed.exit_code == 0, listed.stderr
    rows = [json.loads(line) for line in listed.stdout.splitlines()]
    assert [r["name"] for r in rows] == ["beat", "nightly"]
    assert rows[1]["cron"] == "0 3 * * *"
    assert rows[1]["tz"] == "Europe/Paris"
    assert rows[1]["payload"] == '{"kind": "nightly"}'
    assert rows[1]["next_run_at"] > 0
    assert rows[1]["last_job_id"] is None
    table = invoke("schedule", url, "list")
    assert "every 30s" in table.stdout
    assert "0 3 * * * (Europe/Paris)" in table.stdout

    removed = invoke("schedule", url, "remove", "beat", "--embedded")
    assert removed.stdout.strip() == "removed schedule beat"
    again = invoke("schedule", url, "remove", "beat", "--embedded")
    assert_one_error_line(
        again, 4, f"NotFound: no schedule 'beat' at {url} (`osqueue schedule {url} list`"
    )
    assert [s.name for s in read_doc(qdir).schedules] == ["nightly"]


def test_schedule_pause_and_resume_one_schedule(qdir: Path) -> None:
    url = url_of(qdir)
    added = invoke(
        "schedule", url, "add", "beat", "--every", "1h", "-q", "health", "--data", "ping",
        "--priority", "3", "--catch-up", "skip", "--embedded",
    )  # fmt: skip
    assert added.exit_code == 0, added.stderr
    paused = invoke("schedule", url, "pause", "beat", "--embedded")
    assert paused.exit_code == 0, paused.stderr
    assert paused.stdout.strip() == "paused schedule beat: its ticks push no job until resumed"
    s = read_doc(qdir).schedules.get("beat")
    assert s is not None
    assert s.paused
    # put back as it was: only paused changed
    assert (s.every_s, s.queue, s.payload, s.priority, s.catch_up) == (
        3600.0, "health", b"ping", 3, "skip",
    )  # fmt: skip
    listed = invoke("schedule", url, "list", "--json")
    (row,) = [json.loads(line) for line in listed.stdout.splitlines()]
    assert row["paused"] is True
    (line,) = [ln for ln in invoke("schedule", url, "list").stdout.splitlines() if "beat" in ln]
    assert "paused" in line

    resumed = invoke("schedule", url, "resume", "beat", "--embedded")
    assert resumed.exit_code == 0, resumed.stderr
    assert resumed.stdout.startswith("resumed schedule beat: next run ")
    s = read_doc(qdir).schedules.get("beat")
    assert s is not None
    assert not s.paused
    listed = invoke("schedule", url, "list", "--json")
    assert json.loads(listed.stdout)["paused"] is False
    (line,) = [ln for ln in invoke("schedule", url, "list").stdout.splitlines() if "beat" in ln]
    assert "active" in line
    assert "paused" not in line

    missing = invoke("schedule", url, "pause", "nothere", "--embedded")
    assert_one_error_line(
        missing, 4, f"NotFound: no schedule 'nothere' at {url} (`osqueue schedule {url} list`"
    )
    no_name = invoke("schedule", url, "resume", "--embedded")
    assert_one_error_line(no_name, 3, "resume needs the schedule's NAME")
    helped = invoke("schedule", "--help")
    assert "pause" in helped.stdout
    assert "OSQUEUE_" in helped.stdout


def test_schedule_add_errors_name_the_field(qdir: Path) -> None:
    url = url_of(qdir)
    no_queue = invoke("schedule", url, "add", "x", "--every", "1m", "--embedded")
    assert_one_error_line(no_queue, 3, "queue")
    bad_cron = invoke("schedule", url, "add", "x", "--cron", "* * *", "-q", "q", "--embedded")
    assert_one_error_line(bad_cron, 3, "cron")
    both = invoke(
        "schedule", url, "add", "x", "--cron", "* * * * *", "--every", "1m", "-q", "q",
        "--embedded",
    )  # fmt: skip
    assert_one_error_line(both, 3, "cron: give exactly one of --cron and --every")
    neither = invoke("schedule", url, "add", "x", "-q", "q", "--embedded")
    assert_one_error_line(neither, 3, "cron: give exactly one of --cron and --every")
    out_of_range = invoke("schedule", url, "add", "x", "--cron", "61 * * * *", "-q", "q")
    assert out_of_range.stderr.splitlines() == [
        "error: InvalidInput: cron: '61 * * * *': minute field: 61 is out of range 0-59"
    ]
    assert out_of_range.exit_code == 3
    no_name = invoke("schedule", url, "remove", "--embedded")
    assert_one_error_line(no_name, 3, "NAME")


def test_queue_shows_and_changes_the_settings(qdir: Path) -> None:
    url = url_of(qdir)
    changed = invoke(
        "queue", url, "index", "--rate", "50/s", "--burst", "5", "--max-claimed", "10",
        "--max-claimed-per-group", "1", "--pause", "--embedded",
    )  # fmt: skip
    assert changed.exit_code == 0, changed.stderr
    assert changed.stdout.strip() == (
        "index: paused, rate 50/s (burst 5), max claimed 10, max claimed per group 1"
    )
    s = read_doc(qdir).queue_settings["index"]
    assert (s.paused, s.rate_per_s, s.burst, s.max_claimed, s.max_claimed_per_group) == (
        True, 50.0, 5, 10, 1,
    )  # fmt: skip
    shown = invoke("queue", url, "index", "--json")
    assert json.loads(shown.stdout)["max_claimed"] == 10
    resumed = invoke(
        "queue", url, "index", "--resume", "--rate", "off", "--max-claimed", "0", "--embedded"
    )
    assert resumed.stdout.strip() == "index: running, max claimed per group 1"
    plain = invoke("queue", url, "other")
    assert plain.stdout.strip() == "other: running, no limits"
    bad = invoke("queue", url, "index", "--rate", "fast", "--embedded")
    assert_one_error_line(bad, 3, "rate")


def test_push_after_and_jobs_status_waiting(qdir: Path) -> None:
    url = url_of(qdir)
    parent = invoke("push", url, "--embedded", "--data", "p", "-q", "w").stdout.strip()
    child = invoke(
        "push", url, "--embedded", "--data", "c", "-q", "w", "--after", parent, "--group", "g1"
    )
    assert child.exit_code == 0, child.stderr
    waiting = invoke("jobs", url, "--status", "waiting", "--json")
    rows = [json.loads(line) for line in waiting.stdout.splitlines()]
    assert [(r["id"], r["status"], r["after"], r["group"]) for r in rows] == [
        (child.stdout.strip(), "waiting", [parent], "g1")
    ]
    table = invoke("jobs", url, "--status", "waiting")
    assert "waiting (1 parent)" in table.stdout
    unknown = invoke("push", url, "--embedded", "--data", "x", "--after", "nobody-knows")
    assert_one_error_line(unknown, 5, "JobNotFound", "after[0]")


@pytest.mark.parametrize(
    ("text", "seconds"),
    [("30s", 30.0), ("5m", 300.0), ("1h", 3600.0), ("2d", 172800.0), ("45", 45.0)],
)
def test_every_durations(text: str, seconds: float) -> None:
    assert parse_every(text) == seconds


@pytest.mark.parametrize(
    ("text", "rate"), [("50/s", 50.0), ("3000/m", 50.0), ("36/h", 0.01), ("7", 7.0), ("off", 0.0)]
)
def test_rates(text: str, rate: float) -> None:
    assert parse_rate(text) == pytest.approx(rate)


def test_bad_durations_and_rates_name_their_option() -> None:
    with pytest.raises(InvalidInput) as err:
        parse_every("soon")
    assert err.value.field == "every"
    with pytest.raises(InvalidInput) as err:
        parse_rate("50/week")
    assert err.value.field == "rate"


def _drained(qdir: Path) -> None:
    """Two jobs through "emails" (none left), one still queued on "held"."""

    async def build() -> None:
        async with Broker(url_of(qdir), BrokerConfig(address="127.0.0.1:1")) as broker:
            q = broker.client()
            await q.push_many([NewJob(b"e", queue="emails") for _ in range(2)])
            for job in await q.claim("w", ["emails"], max_jobs=2):
                await q.complete(job)
            await q.push(b"h", queue="held")

    asyncio.run(build())


def test_a_drained_queue_stays_listed_paused_shows_and_remove_forgets_it(qdir: Path) -> None:
    _drained(qdir)
    url = url_of(qdir)
    status = json.loads(invoke("status", url, "--json").stdout)
    emails = status["queues"]["emails"]
    assert (emails["depth"], emails["claimed"], emails["dead"]) == (0, 0, 0)
    assert (emails["pushed_total"], emails["completed_total"]) == (2, 2)
    assert status["queues"]["held"]["depth"] == 1

    paused = invoke("queue", url, "emails", "--pause", "--embedded")
    assert paused.exit_code == 0, paused.stderr
    table = invoke("status", url).stdout
    assert re.search(r"^emails paused\W+0\W", table, re.MULTILINE), table
    assert re.search(r"^held\W+1\W", table, re.MULTILINE), table
    assert json.loads(invoke("status", url, "--json").stdout)["queues"]["emails"]["paused"]

    refused = invoke("queue", url, "held", "--remove", "--embedded")
    assert_one_error_line(
        refused, 3, "queue 'held' still holds 1 live job: cancel or purge its jobs"
    )
    alone = invoke("queue", url, "emails", "--remove", "--pause", "--embedded")
    assert_one_error_line(alone, 3, "give --remove alone")
    unknown = invoke("queue", url, "nothere", "--remove", "--embedded")
    assert_one_error_line(unknown, 3, "no queue 'nothere' is known")

    removed = invoke("queue", url, "emails", "--remove", "--embedded")
    assert removed.exit_code == 0, removed.stderr
    assert removed.stdout.strip() == "emails: removed"
    after = json.loads(invoke("status", url, "--json").stdout)
    assert set(after["queues"]) == {"held"}
    assert "emails" not in read_doc(qdir).queue_totals
