"""The broker's Prometheus metrics, scraped over HTTP from real brokers on memory storage."""

from __future__ import annotations

import asyncio
import socket
import sys
from collections import deque
from collections.abc import Callable

import pytest
from metrics_helpers import Samples, http_get, names, scrape, value
from prometheus_client import CollectorRegistry
from prometheus_client.openmetrics.parser import (
    text_string_to_metric_families as openmetrics_families,
)
from segment_helpers import COLD_THRESHOLDS, SMALL, cross_cold_threshold

import osqueue
from osqueue.broker.core.broker import State
from osqueue.clock import ManualClock
from osqueue.errors import (
    DocumentGone,
    InvalidInput,
    LeaseLost,
    MissingExtra,
    NotBroker,
    OutcomeUnknown,
    ResourceExhausted,
    StorageError,
)
from osqueue.state import DOCUMENT_KEY, Heartbeat
from osqueue.storage import MemoryStorage
from osqueue.storage.port import Storage

QUEUE_GAUGES = ("depth", "ready", "delayed", "claimed", "dead", "spilled")


def config(**kw: object) -> osqueue.BrokerConfig:
    base: dict[str, object] = {
        "lease_s": 10.0,
        "retry_base_s": 0.001,
        "metrics_listen": "127.0.0.1:0",
        "stats_log_interval_s": None,
    }
    base.update(kw)
    return osqueue.BrokerConfig(**base)  # type: ignore[arg-type]


def delta(after: Samples, before: Samples, name: str, **labels: str) -> float:
    return value(after, name, **labels) - value(before, name, **labels)


async def until(done: Callable[[], bool]) -> None:
    """Let the loop run until ``done()`` (a bounded number of steps, no clock time)."""
    for _ in range(1000):
        if done():
            return
        await asyncio.sleep(0)
    raise AssertionError("the condition never came true")


def state_of(samples: Samples) -> str:
    (current,) = [
        labels[0][1]
        for (name, labels), v in samples.items()
        if name == "osqueue_broker_state" and v == 1.0
    ]
    return current


def port_is_free(address: str) -> bool:
    host, _, port = address.rpartition(":")
    with socket.socket() as s:
        s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)  # as a restarted server would
        try:
            s.bind((host, int(port)))
        except OSError:
            return False
        return True


class Flaky:
    """Memory storage whose next document writes fail as scripted: ``"error"`` before
    the write applies, ``"echo"`` (it applies, the caller hears Conflict: a retried
    write of its own), ``"lost"`` (it applies, the answer is lost)."""

    def __init__(self, inner: Storage) -> None:
        self.inner = inner
        self.script: deque[str] = deque()

    def __getattr__(self, name: str) -> object:
        return getattr(self.inner, name)

    async def write(self, key: str, data: bytes, *, if_match: str | None) -> str:
        action = self.script.popleft() if key == DOCUMENT_KEY and self.script else None
        if action == "error":
            raise StorageError("injected: 503")
        etag = await self.inner.write(key, data, if_match=if_match)
        if action == "echo":
            raise osqueue.Conflict("injected: 412 for our own retried write")
        if action == "lost":
            raise OutcomeUnknown("injected: the answer was lost")
        return etag


# --------------------------------------------------------------------------- a serving broker


async def test_a_scrape_counts_the_ops_and_shows_every_queue_as_stats_does() -> None:
    clock = ManualClock()
    async with osqueue.Broker(MemoryStorage(), config(), clock=clock) as broker:
        q = broker.client()
        before = await scrape(broker.metrics_address)
        commits_before = broker.commits
        for i in range(3):
            await q.push(b"mail %d" % i, queue="emails")
        await q.push(b"later", queue="emails", delay_s=30.0)
        report = await q.push(b"report", queue="reports")
        await q.push(b"another", queue="reports")
        first, second = await q.claim("w1", ["emails"], max_jobs=2)
        await q.complete(first)
        await q.fail(second, error="boom", retry_after_s=60.0)
        with pytest.raises(LeaseLost):
            await q.complete(second)  # its token went stale with the fail
        await q.cancel(report)
        clock.advance(7.0)
        after = await scrape(broker.metrics_address)
        commits = broker.commits - commits_before
        stats = await q.stats()

    ops = "osqueue_broker_ops_total"
    moved = {
        (kind, outcome): delta(after, before, ops, kind=kind, outcome=outcome)
        for kind in ("push", "claim", "complete", "fail", "cancel", "heartbeat", "release")
        for outcome in ("ok",)
    }
    assert moved == {
        ("push", "ok"): 6,
        ("claim", "ok"): 1,
        ("complete", "ok"): 1,
        ("fail", "ok"): 1,
        ("cancel", "ok"): 1,
        ("heartbeat", "ok"): 0,
        ("release", "ok"): 0,
    }
    assert (ops, (("kind", "complete"), ("outcome", "lease_lost"))) not in before
    assert value(after, ops, kind="complete", outcome="lease_lost") == 1
    # One commit per call (each waited for its own), and the broker's own (archive marks).
    own = delta(after, before, "osqueue_broker_commit_ops_bucket", le="0.0")
    assert commits == 11 + own
    assert delta(after, before, "osqueue_broker_commits_total") == commits
    assert delta(after, before, "osqueue_broker_commit_duration_seconds_count") == commits
    assert delta(after, before, "osqueue_broker_commit_ops_count") == commits
    assert delta(after, before, "osqueue_broker_commit_ops_bucket", le="1.0") == commits
    assert delta(after, before, "osqueue_broker_commit_ops_sum") == 11
    assert delta(after, before, "osqueue_broker_written_bytes_total") > 0

    # The queues and the document: what stats() answers, at the same (manual) time.
    assert set(stats.queues) == {"emails", "reports"}
    for name, qs in stats.queues.items():
        expected = (qs.depth, qs.depth - qs.delayed, qs.delayed, qs.claimed, qs.dead, qs.spilled)
        got = tuple(value(after, f"osqueue_queue_{g}", queue=name) for g in QUEUE_GAUGES)
        assert got == expected, name
        oldest = value(after, "osqueue_queue_oldest_waiting_seconds", queue=name)
        assert oldest == (qs.oldest_age_s or 0.0)
    assert stats.queues["emails"].depth == 3  # one ready, one delayed, one backing off
    assert value(after, "osqueue_queue_oldest_waiting_seconds", queue="emails") == 7.0
    assert value(after, "osqueue_document_bytes") == stats.document_bytes
    assert value(after, "osqueue_document_tombstones") == stats.tombstones
    assert value(after, "osqueue_document_version") == stats.version
    assert value(after, "osqueue_document_pushed_total") == stats.pushed == 6
    assert value(after, "osqueue_document_completed_total") == stats.completed == 1
    assert value(after, "osqueue_broker_epoch") == broker.epoch == 1
    assert state_of(after) == "serving"
    assert value(after, "osqueue_broker_info", broker=broker.id, address="") == 1


async def test_refused_ops_count_by_kind_with_the_error_they_got() -> None:
    async with osqueue.Broker(MemoryStorage(), config(max_pending_ops=2)) as broker:
        waiting = [broker.add_op(Heartbeat("nope", 1)) for _ in range(2)]
        with pytest.raises(ResourceExhausted):
            broker.add_op(Heartbeat("nope", 1))  # two are waiting already
        with pytest.raises(ResourceExhausted):
            await broker.submit_many([Heartbeat("a", 1), Heartbeat("b", 1)])
        await asyncio.gather(*waiting)
        samples = await scrape(broker.metrics_address)
    ops = "osqueue_broker_ops_total"
    assert value(samples, ops, kind="heartbeat", outcome="resource_exhausted") == 3
    assert value(samples, ops, kind="heartbeat", outcome="lease_lost") == 2  # no such claim
    assert value(samples, ops, kind="heartbeat", outcome="ok") == 0


async def test_storage_errors_and_conflicts_are_counted_by_kind() -> None:
    store = Flaky(MemoryStorage())
    async with osqueue.Broker(store, config()) as broker:
        q = broker.client()
        before = await scrape(broker.metrics_address)
        store.script.extend(["error", "echo", "lost"])
        await q.push(b"x")  # a 503 (retried), then our own write echoed back as a conflict
        await q.push(b"y")  # the answer lost: read back, our write landed
        after = await scrape(broker.metrics_address)
    errors = "osqueue_broker_storage_errors_total"
    assert delta(after, before, errors, kind="document_write") == 2
    assert delta(after, before, errors, kind="document_read") == 0
    assert delta(after, before, "osqueue_broker_cas_conflicts_total") == 1
    assert delta(after, before, "osqueue_broker_ops_total", kind="push", outcome="ok") == 2
    assert value(after, "osqueue_broker_pending_ops") == 0
    assert value(after, "osqueue_broker_archive_objects_pending") == 0


async def test_no_payload_job_id_or_key_appears_in_the_metrics() -> None:
    secret = b"TOP-SECRET-PAYLOAD-5f1c"
    big = secret * 100  # above the inline limit: a payload object
    async with osqueue.Broker(
        MemoryStorage(), config(inline_payload_max_bytes=64, max_payload_bytes=1 << 20)
    ) as broker:
        q = broker.client()
        ids = [await q.push(secret, key="secret-key-9d2e"), await q.push(big, queue="big")]
        (job,) = await q.claim("worker-7a1b", ["big"])
        answer = await http_get(broker.metrics_address or "")
    assert answer.status == 200
    body = answer.body.decode()
    assert b"TOP-SECRET" not in answer.body
    for text in [*ids, "secret-key-9d2e", "worker-7a1b", job.id]:
        assert text not in body
    assert 'queue="big"' in body  # queue names are what the metrics are about


# --------------------------------------------------------------------------- other states


async def test_a_standby_reports_that_it_stands_by_and_then_that_it_serves() -> None:
    clock = ManualClock()
    store = MemoryStorage()
    active = osqueue.Broker(store, config(metrics_listen=None, address="a:1"), clock=clock)
    await active.start()
    await active.client().push(b"x", queue="jobs")
    standby = osqueue.Broker(store, config(), clock=clock, standby=True)
    starting = asyncio.ensure_future(standby.start())
    await until(lambda: standby.state is State.STANDBY)
    waiting = await scrape(standby.metrics_address)
    assert state_of(waiting) == "standby"
    assert value(waiting, "osqueue_broker_epoch") == 0
    # The queue is the serving broker's to report: a standby shows none of it.
    assert not {n for n in names(waiting) if n.startswith(("osqueue_queue_", "osqueue_document"))}

    active.tasks()[0].cancel()  # the active broker dies silently
    while not starting.done():
        clock.advance(1.0)
        for _ in range(20):
            await asyncio.sleep(0)
    await starting
    serving = await scrape(standby.metrics_address)
    assert state_of(serving) == "serving"
    assert value(serving, "osqueue_broker_epoch") == 2
    assert value(serving, "osqueue_queue_depth", queue="jobs") == 1
    await standby.stop()
    await active.stop()


async def test_a_standby_stopped_while_waiting_closes_its_endpoint() -> None:
    clock = ManualClock()
    store = MemoryStorage()
    async with osqueue.Broker(store, config(metrics_listen=None), clock=clock):
        standby = osqueue.Broker(store, config(), clock=clock, standby=True)
        starting = asyncio.ensure_future(standby.start())
        await until(lambda: standby.state is State.STANDBY)
        address = standby.metrics_address
        assert address is not None
        assert state_of(await scrape(address)) == "standby"
        starting.cancel()
        with pytest.raises(asyncio.CancelledError):
            await starting
        assert port_is_free(address)
        await standby.stop()


async def test_a_stepped_down_broker_says_so() -> None:
    store = MemoryStorage()
    old = osqueue.Broker(store, config())
    await old.start()
    await old.client().push(b"x")
    async with osqueue.Broker(store, config(metrics_listen=None)):  # takes the queue over
        with pytest.raises(NotBroker):
            await old.client().push(b"y")
        assert old.state is State.STEPPED_DOWN
        samples = await scrape(old.metrics_address)
    assert state_of(samples) == "stepped-down"
    assert value(samples, "osqueue_broker_ops_total", kind="push", outcome="not_broker") == 1
    assert not {n for n in names(samples) if n.startswith("osqueue_queue_")}
    await old.stop()


async def test_a_failed_broker_says_so() -> None:
    store = MemoryStorage()
    async with osqueue.Broker(store, config()) as broker:
        await broker.client().push(b"x")
        await store.delete(DOCUMENT_KEY)  # deleted from outside
        with pytest.raises(DocumentGone):
            await broker.client().push(b"y")
        assert broker.state is State.FAILED
        samples = await scrape(broker.metrics_address)
    assert state_of(samples) == "failed"
    assert value(samples, "osqueue_broker_ops_total", kind="push", outcome="document_gone") == 1


# --------------------------------------------------------------------------- the endpoint's life


async def test_the_endpoint_stops_with_the_broker_and_frees_its_port() -> None:
    broker = osqueue.Broker(MemoryStorage(), config())
    assert broker.metrics_address is None  # not before start
    await broker.start()
    address = broker.metrics_address
    assert address is not None
    assert not port_is_free(address)
    assert state_of(await scrape(address)) == "serving"
    host, _, port = address.rpartition(":")
    idle_reader, idle_writer = await asyncio.open_connection(host, int(port))  # says nothing
    await broker.stop()
    assert await asyncio.wait_for(idle_reader.read(), 5.0) == b""  # closed by the stop
    idle_writer.close()
    await idle_writer.wait_closed()
    assert broker.metrics_address is None
    with pytest.raises(ConnectionRefusedError):
        await asyncio.open_connection(host, int(port))
    assert port_is_free(address)
    assert asyncio.all_tasks() == {asyncio.current_task()}


async def test_metrics_listen_must_be_host_port() -> None:
    with pytest.raises(InvalidInput) as caught:
        config(metrics_listen="9100")
    assert caught.value.field == "metrics_listen"


async def test_a_collector_for_a_registry_of_ones_own() -> None:
    async with osqueue.Broker(MemoryStorage(), config(metrics_listen=None)) as broker:
        assert broker.metrics_address is None
        registry = CollectorRegistry()
        registry.register(broker.metrics_collector())
        await broker.client().push(b"x", queue="mine")
        assert registry.get_sample_value("osqueue_queue_depth", {"queue": "mine"}) == 1
        assert registry.get_sample_value("osqueue_broker_commit_ops_count") == 1
        ok = {"kind": "push", "outcome": "ok"}
        assert registry.get_sample_value("osqueue_broker_ops_total", ok) == 1


def test_without_the_extra_metrics_listen_is_a_clear_error(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setitem(sys.modules, "prometheus_client", None)  # import fails
    for name in ("osqueue.metrics.exposition", "osqueue.broker.observe.metrics"):
        monkeypatch.delitem(sys.modules, name, raising=False)
    with pytest.raises(MissingExtra) as caught:
        osqueue.Broker(MemoryStorage(), config())
    assert "pip install 'osqueue[metrics]'" in str(caught.value)
    assert caught.value.extra == "metrics"
    osqueue.Broker(MemoryStorage(), config(metrics_listen=None))  # no endpoint: no need


async def test_a_drained_queue_keeps_its_series_with_per_queue_counters_and_pause() -> None:
    clock = ManualClock()
    async with osqueue.Broker(MemoryStorage(), config(), clock=clock) as broker:
        q = broker.client()
        for i in range(3):
            await q.push(b"mail %d" % i, queue="emails", max_attempts=1)
        await q.push(b"x", queue="other")
        first, second, third = await q.claim("w1", ["emails"], max_jobs=3)
        await q.complete(first)
        await q.complete(second)
        await q.fail(third, error="boom")  # its only attempt: dead
        await q.purge_dead()  # nothing of "emails" is left in the document
        await q.set_queue("paused", paused=True)  # known by a setting alone
        await q.schedule("nightly", queue="other", cron="0 3 * * *")
        await q.schedule("hourly", queue="other", cron="0 * * * *", paused=True)
        samples = await scrape(broker.metrics_address)
        answer = await http_get(
            broker.metrics_address, headers="Accept: application/openmetrics-text\r\n"
        )

    queues = {"emails", "other", "paused"}
    assert queues == {
        labels[0][1] for (name, labels), _ in samples.items() if name == "osqueue_queue_depth"
    }
    for gauge in QUEUE_GAUGES:
        assert value(samples, f"osqueue_queue_{gauge}", queue="emails") == 0, gauge
    counters = {"pushed": 3, "completed": 2, "failed": 1, "died": 1}
    for name, n in counters.items():
        assert value(samples, f"osqueue_queue_{name}_total", queue="emails") == n, name
        assert value(samples, f"osqueue_queue_{name}_total", queue="paused") == 0, name
    assert value(samples, "osqueue_queue_pushed_total", queue="other") == 1
    paused = {queue: value(samples, "osqueue_queue_paused", queue=queue) for queue in queues}
    assert paused == {"emails": 0, "other": 0, "paused": 1}
    assert value(samples, "osqueue_schedules") == 2
    assert value(samples, "osqueue_schedules_paused") == 1
    # what Prometheus asks for first: valid OpenMetrics (no family named twice)
    assert answer.headers["content-type"].startswith("application/openmetrics-text")
    families = list(openmetrics_families(answer.body.decode()))
    assert len({f.name for f in families}) == len(families)


async def test_a_deep_queue_s_spills_loads_and_starved_claims_are_counted() -> None:
    """A claim larger than the head stops at the barrier once (a starved commit);
    the spills and loads of the deep queue are counted as the broker counts them."""
    small = config(**{**SMALL, "segment_jobs": 8, "head_max_bytes": 1})  # (the configured head)
    async with osqueue.Broker(MemoryStorage(), small) as broker:
        q = broker.client()
        before = await scrape(broker.metrics_address)
        await q.push_many([osqueue.NewJob(b"p", queue="deep") for _ in range(30)])
        await broker.segments.settled()
        assert len(await q.claim("w", ["deep"], max_jobs=5)) == 2  # the head, then the barrier
        await broker.segments.settled()
        for _ in range(6):
            assert len(await q.claim("w", ["deep"], max_jobs=1, wait_s=5.0)) == 1
            await broker.segments.settled()
        after = await scrape(broker.metrics_address)
        counters = broker.segments.counters
        assert counters.spills > 0
        assert counters.loads > 0
        ready = {"kind": "ready"}
        written = delta(after, before, "osqueue_broker_cold_objects_written_total", **ready)
        assert written == counters.spills
        jobs_out = delta(after, before, "osqueue_broker_cold_jobs_written_total", **ready)
        assert jobs_out == counters.spilled_jobs
        assert delta(after, before, "osqueue_broker_cold_loads_total", **ready) == counters.loads
        jobs_in = delta(after, before, "osqueue_broker_cold_jobs_loaded_total", **ready)
        assert jobs_in == counters.loaded_jobs
        assert delta(after, before, "osqueue_broker_segment_starved_commits_total") == 1


@pytest.mark.parametrize(("kind", "settings"), COLD_THRESHOLDS.items())
async def test_each_cold_kind_s_objects_and_jobs_are_scraped_under_its_label(
    kind: str, settings: dict[str, int]
) -> None:
    """Past a kind's threshold its jobs leave for objects; ``/metrics`` shows what
    that part counted, under ``kind``, and nothing under the other kinds."""
    async with osqueue.Broker(MemoryStorage(), config(**settings)) as broker:
        q = broker.client()
        before = await scrape(broker.metrics_address)
        await cross_cold_threshold(q, kind)
        await broker.segments.settled()
        after = await scrape(broker.metrics_address)
        parts = broker.segments
        part = {"dead": parts.dead, "delayed": parts.delayed, "waiting": parts.waiting}
        objects, jobs = (
            (parts.finished.counters.seals, parts.finished.counters.sealed_entries)
            if kind == "finished"
            else (part[kind].counters.spills, part[kind].counters.spilled_jobs)
        )
        assert objects > 0
        assert jobs >= objects
        name = "osqueue_broker_cold_objects_written_total"
        assert delta(after, before, name, kind=kind) == objects
        assert delta(after, before, "osqueue_broker_cold_jobs_written_total", kind=kind) == jobs
        for other in {"ready", "delayed", "dead", "waiting", "finished"} - {kind}:
            assert delta(after, before, name, kind=other) == 0, other
