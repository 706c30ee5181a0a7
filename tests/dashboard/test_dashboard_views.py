"""The data behind the dashboard's views of time, schedules, workers and charts
(issue 26): what the schedules page, the job list and page, the workers table
and the chart axes are built from, checked without a browser."""

from __future__ import annotations

import itertools
import math

import pytest
from test_dashboard_units import T0, build, snapshot

from osqueue.api import NewJob
from osqueue.broker import Broker, BrokerConfig
from osqueue.broker.observe.counters import RecentWorkers
from osqueue.dashboard.render import ago, until
from osqueue.dashboard.security import Access, Refused, Sessions, access_for
from osqueue.errors import InvalidInput
from osqueue.inspect.history import DocumentHistory, QueueRates, nice_ticks
from osqueue.inspect.jobs import job_times
from osqueue.state import (
    BrokerInfo,
    Cancel,
    Complete,
    Document,
    Push,
    PutSchedule,
    QueueTotals,
    RetryDead,
    SetQueue,
    apply,
    decode,
    encode,
    to_datetime,
)
from osqueue.storage import MemoryStorage

# --------------------------------------------------------------------------- job times


def test_a_dead_job_records_when_it_died_and_its_age_counts_from_then() -> None:
    doc = build()  # dead1 fails its only attempt at T0 + 3
    dead = doc.jobs["dead1"]
    assert dead.status == "dead"
    assert dead.done_at == to_datetime(T0 + 3)
    times = job_times(dead, T0 + 63)
    assert (times.status, times.died_at, times.age_from) == ("dead", T0 + 3, T0 + 3)
    assert times.created_at == T0  # pushed earlier: the age is not counted from here
    retried, _ = apply(doc, [RetryDead(("dead1",))], T0 + 70)
    again = retried.jobs["dead1"]
    assert (again.status, again.done_at) == ("queued", None)  # alive again: no death time
    assert job_times(again, T0 + 71).died_at is None


def test_a_delayed_job_says_delayed_and_when_it_runs_until_it_is_due() -> None:
    doc, _ = apply(Document.empty(), [Push(id="later", payload=b"p", delay_s=600.0)], T0)
    job = doc.jobs["later"]
    before = job_times(job, T0 + 1)
    assert (before.status, before.runs_at, before.died_at) == ("delayed", T0 + 600, None)
    assert before.age_from == T0
    due = job_times(job, T0 + 600)
    assert (due.status, due.runs_at) == ("queued", None)  # the list and the page agree
    ready, _ = apply(Document.empty(), [Push(id="now", payload=b"p")], T0)
    assert job_times(ready.jobs["now"], T0).status == "queued"


def test_times_read_as_people_say_them() -> None:
    assert until(T0 + 600, T0) == "in 10m0s"
    assert until(T0 + 30, T0) == "in 30s"
    assert until(T0 - 1, T0) == "due"
    assert until(None, T0) == "-"
    assert ago(T0 - 90, T0) == "1m30s ago"
    assert ago(None, T0) == "-"


# --------------------------------------------------------------------------- schedules


def test_the_schedules_view_shows_each_schedule_its_next_run_last_tick_and_queue_state() -> None:
    ops = [
        PutSchedule(name="beat", queue="health", every_s=60.0, payload=b"ping"),
        PutSchedule(name="nightly", queue="reports", cron="0 3 * * *", tz="Europe/Paris"),
    ]
    doc, _ = apply(Document.empty(), ops, T0)  # type: ignore[arg-type]
    rows = snapshot(doc, T0).schedules()
    assert [r.info.name for r in rows] == ["beat", "nightly"]
    beat, nightly = rows
    assert (beat.info.queue, beat.info.every_s, beat.info.cron) == ("health", 60.0, None)
    assert beat.info.next_run_at == math.floor(T0 / 60) * 60 + 60
    assert (beat.info.last_run_at, beat.info.last_job_id) == (None, None)
    assert (nightly.info.cron, nightly.info.tz) == ("0 3 * * *", "Europe/Paris")
    assert not beat.queue_paused
    assert not nightly.queue_paused
    # a commit after the tick fires it; pausing its queue shows on the row
    ticked, _ = apply(doc, [SetQueue("health", paused=True)], beat.info.next_run_at + 1)
    beat = snapshot(ticked, beat.info.next_run_at + 1).schedules()[0]
    assert beat.info.last_run_at == math.floor(T0 / 60) * 60 + 60
    assert beat.info.last_job_id in ticked.jobs
    assert beat.info.next_run_at == beat.info.last_run_at + 60
    assert beat.queue_paused


# --------------------------------------------------------------------------- workers


def test_recent_workers_are_bounded_windowed_and_new_ones_show_at_once() -> None:
    seen = RecentWorkers(window_s=300.0, max_workers=3, refresh_s=5.0)
    seen.claimed("w1", ("a",), T0)
    assert [w.worker for w in seen.summary(T0)] == ["w1"]
    seen.claimed("w1", ("a",), T0 + 1)  # no one new: the summary stands until refresh_s
    assert seen.summary(T0 + 1)[0].seen_at == to_datetime(T0)
    seen.claimed("w2", ("b", "c"), T0 + 2)  # someone new: shown at the next commit
    assert [w.worker for w in seen.summary(T0 + 2)] == ["w2", "w1"]
    assert seen.summary(T0 + 2)[1].seen_at == to_datetime(T0 + 1)
    seen.claimed("w3", ("a",), T0 + 3)
    seen.claimed("w4", ("a",), T0 + 4)  # past max_workers: the longest silent goes
    assert [w.worker for w in seen.summary(T0 + 4)] == ["w4", "w3", "w2"]
    assert [w.worker for w in seen.summary(T0 + 302.5)] == ["w4", "w3"]  # w2 aged out
    many = RecentWorkers()
    many.claimed("wide", tuple(f"q{i}" for i in range(20)), T0)
    assert len(many.summary(T0)[0].queues) == 8  # what reaches the document is bounded


def test_the_workers_view_lists_holders_and_idle_workers_with_last_seen() -> None:
    doc = build()  # w1 holds two jobs of a (claimed at T0 + 1); w2's job died
    seen = RecentWorkers()
    seen.claimed("w1", ("a",), T0 + 1)
    seen.claimed("w2", ("b",), T0 + 2)
    seen.claimed("idle", ("a", "b"), T0 + 8)
    doc.broker = BrokerInfo(
        id="b1",
        address="h:1",
        epoch=1,
        lease_until=to_datetime(T0 + 60),
        lease_s=60.0,
        workers=seen.summary(T0 + 8),
    )
    rows = snapshot(doc, T0 + 10).workers(T0 + 10)
    assert [(r.worker, r.jobs, r.queues) for r in rows] == [
        ("w1", 2, ("a",)),
        ("idle", 0, ("a", "b")),
        ("w2", 0, ("b",)),
    ]
    w1, idle, w2 = rows
    assert w1.last_seen_age_s == pytest.approx(9.0)
    assert w1.oldest_heartbeat_age_s == pytest.approx(9.0)
    assert (idle.last_seen_age_s, idle.oldest_heartbeat_age_s) == (pytest.approx(2.0), None)
    assert w2.last_seen_age_s == pytest.approx(8.0)
    doc.broker = None  # no broker's record (a stopped queue): the holders still show
    assert [r.worker for r in snapshot(doc, T0 + 10).workers(T0 + 10)] == ["w1"]


async def test_the_broker_puts_the_workers_that_claimed_in_the_document() -> None:
    name = f"recent-workers-{T0}"
    try:
        async with Broker(f"memory://{name}", BrokerConfig(address="127.0.0.1:1")) as broker:
            q = broker.client()
            assert await q.claim("idle-worker", ["nothing-here"]) == []
            await q.push_many([NewJob(b"p", queue="work")])
            (job,) = await q.claim("busy-worker", ["work"])
            doc = broker.document
            assert doc is not None
            assert doc.broker is not None
            seen = {w.worker: w.queues for w in doc.broker.workers}
            assert seen == {"idle-worker": ("nothing-here",), "busy-worker": ("work",)}
            await q.complete(job)
    finally:
        MemoryStorage.drop(name)


# --------------------------------------------------------------------------- chart axes


@pytest.mark.parametrize("peak", [0.37, 1.0, 6.6 * 1.1, 7.0, 16.0, 101.0, 12_345.0, 3e-4])
def test_axis_ticks_are_round_steps_that_cover_the_peak(peak: float) -> None:
    ticks = nice_ticks(peak)
    step = ticks[1] - ticks[0]
    mantissa = step / 10 ** math.floor(math.log10(step))
    assert round(mantissa, 6) in (1.0, 2.0, 5.0)
    assert ticks[0] == 0.0
    assert ticks[-1] >= peak > ticks[-2]
    assert all(b - a == pytest.approx(step) for a, b in itertools.pairwise(ticks))
    assert len(ticks) <= 6


def test_depth_ticks_are_whole_jobs_and_the_old_odd_ticks_are_gone() -> None:
    assert nice_ticks(6.6) == [0.0, 2.0, 4.0, 6.0, 8.0]  # not 6.6/5/3.3/1.7
    assert nice_ticks(1.0, min_step=1.0) == [0.0, 1.0]  # no 0.2 of a job
    assert nice_ticks(0.0) == [0.0, 1.0]
    history = DocumentHistory()
    doc = build()
    history.observe(snapshot(doc, T0 + 10))
    series = history.last_hour(T0 + 10).as_json()
    assert series["ticks"]["depth"] == nice_ticks(
        max(max(v) for v in series["depth"].values()), min_step=1.0
    )
    charted = [v for n in ("pushed", "completed", "failed") for v in series["rates"][n]]
    assert series["ticks"]["rates"] == nice_ticks(max(charted))


# --------------------------------------------------------------------------- actions on loopback


def test_actions_need_no_token_when_the_dashboard_and_the_broker_are_on_loopback() -> None:
    sessions = Sessions()
    visitor = sessions.visitor()
    local = access_for("127.0.0.1:8080", None, insecure=False)
    assert local.why_not_act(visitor, "127.0.0.1:7070") is None
    assert local.why_not_act(visitor, "localhost:7070") is None
    local.check_action(visitor, visitor.csrf, "127.0.0.1:7070")  # no login needed
    with pytest.raises(Refused, match="CSRF"):  # ... but the form's CSRF token still is
        local.check_action(visitor, "forged", "127.0.0.1:7070")
    remote_broker = local.why_not_act(visitor, "10.0.0.7:7070")
    assert remote_broker is not None
    assert "not on loopback" in remote_broker
    with pytest.raises(Refused, match="not on loopback"):
        local.check_action(visitor, visitor.csrf, "10.0.0.7:7070")
    stopped = local.why_not_act(visitor, None)
    assert stopped is not None
    assert "no broker is serving" in stopped
    # beyond loopback (--insecure) every visitor is not a local user: no actions
    wide = access_for("0.0.0.0:8080", None, insecure=True)
    assert not wide.local_actions
    with pytest.raises(Refused, match="without an admin token"):
        wide.check_action(visitor, visitor.csrf, "127.0.0.1:7070")
    # with a token the login still decides, on loopback too
    guarded = access_for("127.0.0.1:8080", "t", insecure=False)
    assert guarded.why_not_act(visitor, "127.0.0.1:7070") == (
        "this action needs the admin token; log in first"
    )
    assert guarded.why_not_act(sessions.login(), "127.0.0.1:7070") is None
    assert Access(token=None, open_reads=True).why_not_act(visitor, "127.0.0.1:7070")


async def test_a_bad_worker_name_is_refused_before_the_broker_records_it() -> None:
    name = f"bad-worker-{T0}"
    try:
        async with Broker(f"memory://{name}", BrokerConfig(address="127.0.0.1:1")) as broker:
            q = broker.client()
            with pytest.raises(InvalidInput, match="printable"):
                await q.claim("evil\x1b[2J", ["a"])
            with pytest.raises(InvalidInput):
                await q.claim("w" * 300, ["a"])
            assert broker.counters.workers.summary(T0 + 10**6) == ()
    finally:
        MemoryStorage.drop(name)


# --------------------------------------------------------------------------- per-queue throughput


def test_each_queue_counts_its_own_pushes_completions_failures_and_deaths() -> None:
    doc = build()  # a: 7 pushed, 2 claimed; b: 8 pushed, dead1 failed its only attempt
    assert doc.queue_totals["a"] == QueueTotals(pushed=7)
    assert doc.queue_totals["b"] == QueueTotals(pushed=8, failed=1, dead=1)
    (held,) = [j for j in doc.jobs.values() if j.status == "claimed"][:1]
    assert held.claim is not None
    done, _ = apply(doc, [Complete(held.id, held.claim.token)], T0 + 5)
    assert done.queue_totals["a"] == QueueTotals(pushed=7, completed=1)
    assert doc.queue_totals["a"] == QueueTotals(pushed=7)  # the old version keeps its own
    assert decode(encode(done)).queue_totals == done.queue_totals  # stored, and read back
    assert sum(t.pushed for t in done.queue_totals.values()) == done.stats.pushed


def test_queue_rates_are_per_second_over_the_last_minute_read() -> None:
    rates = QueueRates(window_s=60.0)
    doc = build()
    rates.observe(snapshot(doc, T0 + 10))
    assert rates.rates(T0 + 10) == {}  # one read: no rate yet
    more, _ = apply(doc, [Push(id=f"n{i}", payload=b"p", queue="a") for i in range(20)], T0 + 11)
    newcomer, _ = apply(more, [Push(id="c1", payload=b"p", queue="c")], T0 + 12)
    rates.observe(snapshot(newcomer, T0 + 20))
    assert rates.rates(T0 + 20) == {
        "a": {"pushed": 2.0, "completed": 0.0},  # 20 in 10 s
        "b": {"pushed": 0.0, "completed": 0.0},
        "c": {"pushed": 0.1, "completed": 0.0},  # not in the first read: it had counted 0
    }
    # a queue removed and known again counts from zero: no rate below zero
    again = QueueRates(window_s=60.0)
    again.observe(snapshot(newcomer, T0 + 20))
    (c1,) = [j for j in newcomer.jobs.values() if j.queue == "c"]
    gone, _ = apply(newcomer, [Cancel(c1.id), SetQueue("c", remove=True)], T0 + 21)
    assert "c" not in gone.queue_totals
    back, _ = apply(gone, [Push(id="c2", payload=b"p", queue="c")], T0 + 22)
    again.observe(snapshot(back, T0 + 30))
    assert again.rates(T0 + 30)["c"] == {"pushed": 0.0, "completed": 0.0}
    rates.observe(snapshot(newcomer, T0 + 75))
    assert rates.rates(T0 + 75)["a"] == {"pushed": 0.0, "completed": 0.0}  # the burst aged out
    assert rates.rates(T0 + 75)["c"] == {"pushed": 0.0, "completed": 0.0}
