"""The worker's Prometheus metrics, scraped over HTTP from a real worker on an
in-process broker (memory://), both on manual clocks."""

from __future__ import annotations

import asyncio
import socket
import sys
from collections.abc import AsyncIterator, Callable
from dataclasses import dataclass

import pytest
from metrics_helpers import http_get, scrape, value
from prometheus_client import CollectorRegistry

from osqueue.api import Job, NewJob
from osqueue.broker import Broker, BrokerConfig
from osqueue.client.worker import Retry, Worker, WorkerConfig
from osqueue.clock import ManualClock
from osqueue.errors import InvalidInput, MissingExtra
from osqueue.ids import new_id

JOBS = "osqueue_worker_jobs_total"
HEARTBEAT_TIMEOUT_S = 30.0


@dataclass
class Env:
    broker: Broker
    broker_clock: ManualClock
    clock: ManualClock  # the worker's

    def worker(self, handlers: object, **options: object) -> Worker:
        options.setdefault("metrics_listen", "127.0.0.1:0")
        return Worker(self.broker.client(), handlers, clock=self.clock, **options)  # type: ignore[arg-type]

    async def push(self, *payloads: bytes, queue: str = "default") -> list[str]:
        jobs = [NewJob(p, queue=queue) for p in payloads]
        return await self.broker.client().push_many(jobs)


@pytest.fixture
async def env() -> AsyncIterator[Env]:
    broker_clock = ManualClock()
    config = BrokerConfig(heartbeat_timeout_s=HEARTBEAT_TIMEOUT_S, lease_s=1000.0, backoff_cap_s=1)
    async with Broker(f"memory://worker-metrics-{new_id()}", config, clock=broker_clock) as broker:
        yield Env(broker, broker_clock, ManualClock())


async def until(done: Callable[[], bool]) -> None:
    """Let the loop run until ``done()`` (a bounded number of steps, no clock time)."""
    for _ in range(10_000):
        if done():
            return
        await asyncio.sleep(0)
    raise AssertionError("the condition never came true")


def port_is_free(address: str) -> bool:
    host, _, port = address.rpartition(":")
    with socket.socket() as s:
        s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            s.bind((host, int(port)))
        except OSError:
            return False
        return True


async def test_a_scrape_counts_jobs_by_queue_and_outcome_and_times_handlers(env: Env) -> None:
    clock = env.clock

    async def mail(job: Job) -> None:
        clock.advance(2.0)  # the handler "runs" two seconds of the worker's clock
        if job.payload == b"bad":
            raise ValueError("cannot send")

    async def report(job: Job) -> None:
        clock.advance(0.5)
        raise Retry(after_s=60.0)

    await env.push(b"ok", b"bad", queue="mail")
    await env.push(b"r", queue="report")
    worker = env.worker({"mail": mail, "report": report}, concurrency=1)
    task = asyncio.create_task(worker.run())
    await worker.wait_running()
    c = worker.counters
    await until(lambda: c.processed + c.failed + c.retried == 3)
    answer = await http_get(worker.metrics_address or "")
    samples = await scrape(worker.metrics_address)
    worker.stop()
    await task

    outcomes = ("completed", "failed", "retried", "lost", "released")
    got = {
        (q, o): value(samples, JOBS, queue=q, outcome=o)
        for q in ("mail", "report")
        for o in outcomes
    }
    assert got == {
        ("mail", "completed"): 1,
        ("mail", "failed"): 1,
        ("mail", "retried"): 0,
        ("mail", "lost"): 0,
        ("mail", "released"): 0,
        ("report", "completed"): 0,
        ("report", "failed"): 0,
        ("report", "retried"): 1,
        ("report", "lost"): 0,
        ("report", "released"): 0,
    }
    claimed = "osqueue_worker_claimed_jobs_total"
    assert value(samples, claimed, queue="mail") == 2
    assert value(samples, claimed, queue="report") == 1
    handler = "osqueue_worker_handler_duration_seconds"
    assert value(samples, f"{handler}_count", queue="mail") == 2
    assert value(samples, f"{handler}_sum", queue="mail") == 4.0
    assert value(samples, f"{handler}_bucket", queue="mail", le="1.0") == 0
    assert value(samples, f"{handler}_bucket", queue="mail", le="2.5") == 2
    assert value(samples, f"{handler}_count", queue="report") == 1
    assert value(samples, f"{handler}_sum", queue="report") == 0.5
    # Claim round trips take no time on the manual clock: all in the first bucket.
    claims = "osqueue_worker_claim_duration_seconds"
    answered = sum(
        value(samples, f"{claims}_count", call=call) for call in ("claim", "complete_and_claim")
    )
    assert answered >= 3  # at least one claim per job (concurrency 1)
    assert value(samples, f"{claims}_count", call="complete_and_claim") >= 1  # a ride-along
    for call in ("claim", "complete_and_claim"):
        count = value(samples, f"{claims}_count", call=call)
        assert value(samples, f"{claims}_bucket", call=call, le="0.001") == count
    assert value(samples, "osqueue_worker_claim_failures_total") == 0
    assert value(samples, "osqueue_worker_slots") == 1
    assert value(samples, "osqueue_worker_slots_busy") == 0
    assert value(samples, "osqueue_worker_stopping") == 0
    assert value(samples, "osqueue_worker_info", worker=worker.worker_id) == 1
    assert b"cannot send" not in answer.body  # no error text, no payload, no job id
    assert b'"bad"' not in answer.body


async def test_busy_slots_while_handlers_run_and_released_jobs_at_the_stop(env: Env) -> None:
    started = asyncio.Event()
    running = 0

    async def handler(job: Job) -> None:
        nonlocal running
        running += 1
        if running == 2:
            started.set()
        await asyncio.Event().wait()  # until the stop cancels it

    await env.push(b"one", b"two")
    worker = env.worker(handler, concurrency=3, shutdown_grace_period_s=0.0)
    registry = CollectorRegistry()
    registry.register(worker.metrics_collector())  # beside the endpoint, on the same records
    task = asyncio.create_task(worker.run())
    await started.wait()
    busy = await scrape(worker.metrics_address)
    assert value(busy, "osqueue_worker_slots") == 3
    assert value(busy, "osqueue_worker_slots_busy") == 2
    assert value(busy, "osqueue_worker_jobs_held") == 2
    assert value(busy, "osqueue_worker_handler_duration_seconds_count", queue="default") == 0
    worker.stop()
    await task
    assert registry.get_sample_value(JOBS, {"queue": "default", "outcome": "released"}) == 2
    assert registry.get_sample_value("osqueue_worker_stopping") == 1
    assert registry.get_sample_value("osqueue_worker_slots_busy") == 0


async def test_a_job_another_worker_took_over_counts_lost(env: Env) -> None:
    started = asyncio.Event()

    async def handler(job: Job) -> None:
        started.set()
        await asyncio.Event().wait()  # until the lost lease cancels it

    (job_id,) = await env.push(b"slow")
    worker = env.worker(handler)
    task = asyncio.create_task(worker.run())
    await started.wait()
    await until(lambda: env.clock.sleepers >= 1)  # the heartbeat timer
    env.broker_clock.advance(HEARTBEAT_TIMEOUT_S + 1)  # no beat came: the claim expires
    thief = env.broker.client()
    assert await thief.claim("thief") == []  # this commit's sweep re-queues it, backing off
    env.broker_clock.advance(2.0)
    (stolen,) = await thief.claim("thief")
    assert stolen.id == job_id
    env.clock.advance(HEARTBEAT_TIMEOUT_S / 3)  # our next beat hears LeaseLost
    await until(lambda: worker.counters.lost == 1)
    samples = await scrape(worker.metrics_address)
    worker.stop()
    await task
    assert value(samples, JOBS, queue="default", outcome="lost") == 1
    assert value(samples, JOBS, queue="default", outcome="completed") == 0
    await thief.complete(stolen)


async def test_the_endpoint_lives_as_long_as_run(env: Env) -> None:
    worker = env.worker(lambda job: None)
    assert worker.metrics_address is None
    task = asyncio.create_task(worker.run())
    await worker.wait_running()
    address = worker.metrics_address
    assert address is not None
    assert not port_is_free(address)
    worker.stop()
    await task
    assert worker.metrics_address is None
    assert port_is_free(address)
    assert asyncio.all_tasks() - set(env.broker.tasks()) == {asyncio.current_task()}


async def test_a_port_in_use_is_a_clear_error_from_run(env: Env) -> None:
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        worker = env.worker(lambda job: None, metrics_listen=f"127.0.0.1:{port}")
        with pytest.raises(InvalidInput) as caught:
            await worker.run()
    assert caught.value.field == "metrics_listen"
    assert f"127.0.0.1:{port}" in str(caught.value)


def test_metrics_listen_must_be_host_port() -> None:
    with pytest.raises(InvalidInput) as caught:
        WorkerConfig(metrics_listen="9100")
    assert caught.value.field == "metrics_listen"


def test_without_the_extra_metrics_listen_is_a_clear_error(
    env: Env, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setitem(sys.modules, "prometheus_client", None)  # import fails
    for name in ("osqueue.metrics.exposition", "osqueue.client.worker.metrics"):
        monkeypatch.delitem(sys.modules, name, raising=False)
    with pytest.raises(MissingExtra) as caught:
        env.worker(lambda job: None)
    assert "pip install 'osqueue[metrics]'" in str(caught.value)
    env.worker(lambda job: None, metrics_listen=None)  # no endpoint: no need
