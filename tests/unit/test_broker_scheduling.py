"""Schedules, queue settings and dependencies through a broker and its in-process client."""

from __future__ import annotations

import asyncio

import pytest

import osqueue
from osqueue.api import NewJob, QueueSettings, Scheduling
from osqueue.clock import ManualClock
from osqueue.errors import InvalidInput, JobNotFound
from osqueue.state import DOCUMENT_KEY, Document, decode
from osqueue.storage import MemoryStorage
from osqueue.storage.port import Storage

START = 1_800_000_005.0  # five seconds past a whole minute


def config(**kw: object) -> osqueue.BrokerConfig:
    base: dict[str, object] = {"lease_s": 30.0, "heartbeat_timeout_s": 30.0, "retry_base_s": 0.001}
    base.update(kw)
    return osqueue.BrokerConfig(**base)  # type: ignore[arg-type]


async def stored(storage: Storage) -> Document:
    return decode((await storage.read(DOCUMENT_KEY)).data)


async def settle() -> None:
    for _ in range(30):
        await asyncio.sleep(0)


async def tick(clock: ManualClock, seconds: float, step: float = 1.0) -> None:
    """Let ``seconds`` of the clock pass, a step at a time, the loop running between."""
    while seconds > 0:
        clock.advance(min(step, seconds))
        seconds -= step
        await settle()


async def test_an_idle_broker_fires_a_tick_on_time_without_any_op() -> None:
    clock = ManualClock(START)
    store = MemoryStorage()
    async with osqueue.Broker(store, config(lease_s=600.0), clock=clock) as broker:
        client = broker.client()
        assert isinstance(client, Scheduling)
        info = await client.schedule("beat", queue="q", every_s=60, payload=b"hi")
        assert info.next_run_at == START - 5 + 60
        commits = broker.commits
        await tick(clock, 54.0)
        assert broker.commits == commits  # nothing due yet, and the lease renews every 200 s
        await tick(clock, 2.0)
        doc = await stored(store)
        assert sorted(doc.jobs) == ["beat:20270115T080100Z"]
        (listed,) = await client.schedules()
        assert listed.last_job_id == "beat:20270115T080100Z"
        assert listed.next_run_at == START - 5 + 120
        (job,) = await client.claim("w", ["q"])
        assert job.payload == b"hi"


async def test_a_takeover_neither_doubles_nor_loses_a_tick() -> None:
    clock = ManualClock(START)
    store = MemoryStorage()
    first = osqueue.Broker(store, config(lease_s=10.0), clock=clock)
    await first.start()
    await first.client().schedule("beat", queue="q", every_s=60)
    await tick(clock, 56.0)
    assert sorted((await stored(store)).jobs) == ["beat:20270115T080100Z"]
    first.tasks()[0].cancel()  # dies where it stands, nothing flushed
    await settle()
    standby = osqueue.Broker(store, config(lease_s=10.0), clock=clock, standby=True)
    starting = asyncio.ensure_future(standby.start())
    while not starting.done():
        await tick(clock, 1.0)
    await starting
    await tick(clock, 70.0)
    doc = await stored(store)
    assert sorted(doc.jobs) == ["beat:20270115T080100Z", "beat:20270115T080200Z"]
    await standby.stop()


async def test_a_long_poll_on_a_rate_limited_queue_wakes_when_a_token_comes_back() -> None:
    clock = ManualClock(START)
    async with osqueue.Broker(MemoryStorage(), config(), clock=clock) as broker:
        client = broker.client()
        settings = await client.set_queue("q", rate_per_s=1.0, burst=1)
        assert settings == QueueSettings("q", rate_per_s=1.0, burst=1)
        await client.push_many([NewJob(b"x", queue="q") for _ in range(5)])
        assert len(await client.claim("w", ["q"], max_jobs=5)) == 1
        waiting = asyncio.ensure_future(client.claim("w", ["q"], max_jobs=5, wait_s=30.0))
        await settle()
        assert not waiting.done()
        commits = broker.commits
        await tick(clock, 0.9, step=0.3)
        assert not waiting.done()
        await tick(clock, 0.2)
        assert len(await asyncio.wait_for(waiting, 5.0)) == 1
        assert broker.commits == commits + 1  # the woken claim's own commit, no empty one


async def test_a_refill_wakes_only_as_many_parked_claims_as_it_has_tokens() -> None:
    clock = ManualClock(START)
    async with osqueue.Broker(MemoryStorage(), config(), clock=clock) as broker:
        client = broker.client()
        await client.set_queue("q", rate_per_s=1.0, burst=1)
        await client.push_many([NewJob(b"x", queue="q") for _ in range(20)])
        assert len(await client.claim("w", ["q"])) == 1
        parked = [
            asyncio.ensure_future(client.claim(f"w{i}", ["q"], wait_s=30.0)) for i in range(10)
        ]
        await settle()
        ops = broker.counters.ops
        await tick(clock, 1.0)
        assert sum(p.done() for p in parked) == 1
        assert broker.counters.ops - ops == 1  # one claim for one token, not ten
        await tick(clock, 1.0)
        assert sum(p.done() for p in parked) == 2
        assert broker.counters.ops - ops == 2
        for p in parked:
            p.cancel()


async def test_a_long_poll_under_max_claimed_wakes_when_a_claimed_job_finishes() -> None:
    async with osqueue.Broker(MemoryStorage(), config()) as broker:
        client = broker.client()
        await client.set_queue("q", max_claimed=1)
        await client.push_many([NewJob(b"x", queue="q") for _ in range(3)])
        (held,) = await client.claim("w", ["q"], max_jobs=3)
        waiting = asyncio.ensure_future(client.claim("w", ["q"], max_jobs=3, wait_s=30.0))
        await settle()
        assert not waiting.done()
        await client.complete(held)
        assert len(await asyncio.wait_for(waiting, 5.0)) == 1


async def test_pause_survives_a_takeover() -> None:
    clock = ManualClock(START)
    store = MemoryStorage()
    async with osqueue.Broker(store, config(), clock=clock) as broker:
        client = broker.client()
        await client.push(b"x", queue="q")
        await client.set_queue("q", paused=True)
    async with osqueue.Broker(store, config(), clock=clock) as broker:
        client = broker.client()
        assert await client.claim("w", ["q"]) == []
        assert (await client.stats()).queues["q"].paused
        await client.set_queue("q", paused=False)
        assert len(await client.claim("w", ["q"])) == 1


async def test_groups_and_parents_through_the_client() -> None:
    async with osqueue.Broker(MemoryStorage(), config()) as broker:
        client = broker.client()
        await client.set_queue("q", max_claimed_per_group=1)
        parent = await client.push(b"p", queue="q", group="t1")
        child = await client.push(b"c", queue="q", group="t1", after=[parent])
        other = await client.push(b"o", queue="q", group="t2")
        got = await client.claim("w", ["q"], max_jobs=10)
        assert [j.id for j in got] == [parent, other]
        assert [j.group for j in got] == ["t1", "t2"]
        assert broker.document.jobs[child].status == "waiting"
        waiting = [j.id for j in await client.jobs(status="waiting")]
        assert waiting == [child]
        await client.complete(got[0])
        (released,) = await client.claim("w", ["q"], max_jobs=10)
        assert released.id == child
        with pytest.raises(JobNotFound):
            await client.push(b"x", queue="q", after=["never-pushed"])
        with pytest.raises(InvalidInput) as err:
            await client.push(b"x", queue="q", group="")
        assert err.value.field == "group"


async def test_schedule_errors_name_the_field_and_unschedule_says_whether_it_removed() -> None:
    async with osqueue.Broker(MemoryStorage(), config()) as broker:
        client = broker.client()
        with pytest.raises(InvalidInput) as err:
            await client.schedule("beat", queue="q", cron="*/5 * * *")
        assert err.value.field == "cron"
        with pytest.raises(InvalidInput) as err:
            await client.set_queue("q", rate_per_s=-3)
        assert err.value.field == "rate_per_s"
        await client.schedule("beat", queue="q", cron="*/5 * * * *")
        assert [s.name for s in await client.schedules()] == ["beat"]
        assert await client.unschedule("beat") is True
        assert await client.unschedule("beat") is False
        assert await client.schedules() == []
