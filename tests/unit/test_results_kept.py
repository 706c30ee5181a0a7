"""A result given is kept: an hour when no TTL is set, else the TTL of the push,
then the queue, then the broker (issue 26, stumble 2); a queue that gives no
results keeps no entry at all."""

from __future__ import annotations

from typing import Any

import pytest

import osqueue
from osqueue import Worker
from osqueue.api import Job
from osqueue.clock import ManualClock
from osqueue.errors import InvalidInput, JobNotFound
from osqueue.state import DOCUMENT_KEY, decode
from osqueue.state.finished_jobs import FinishedRecord
from osqueue.storage import MemoryStorage

#: how long a result given is kept when no TTL is set
HOUR = 3600.0


def config(**kw: object) -> osqueue.BrokerConfig:
    """The broker's defaults (no ``result_ttl_s``), with test-friendly timings."""
    base: dict[str, object] = {"lease_s": 10.0, "heartbeat_timeout_s": 30.0}
    base.update(kw)
    return osqueue.BrokerConfig(**base)  # type: ignore[arg-type]


async def finish(
    q: osqueue.Client, job_id: str, result: object = None, queue: str = "default"
) -> None:
    (job,) = await q.claim("w", [queue], max_jobs=1)
    assert job.id == job_id
    await q.complete(job, result=result)


async def test_a_result_given_is_kept_an_hour_by_default() -> None:
    async with osqueue.Broker(MemoryStorage(), config(), clock=ManualClock()) as broker:
        q = broker.client()
        job_id = await q.push(b"x")
        await finish(q, job_id, b"42")
        answer = await q.result(job_id)
        assert (answer.status, answer.value) == ("done", b"42")
        entry = broker.document.finished.get(job_id)
        assert entry is not None
        assert entry.ttl_s == HOUR


async def test_a_handler_return_value_is_kept_by_default() -> None:
    async with osqueue.Broker(MemoryStorage(), config()) as broker:
        q = broker.client()
        job_id = await q.push(b"7")

        def handler(job: Job) -> object:
            return {"square": int(job.payload) ** 2}

        await Worker(q, handler, concurrency=1, burst=True).run()
        answer = await q.result(job_id)
        assert (answer.status, answer.value) == ("done", {"square": 49})


async def test_a_queue_that_gives_no_results_pays_nothing_for_the_record(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """No result, no TTL set: no entry is added, the record is never pruned or
    evicted (the sweep finds it empty), and no written document holds one."""
    calls: list[str] = []
    for name in ("add", "prune", "evict"):
        original = getattr(FinishedRecord, name)

        def counted(self: FinishedRecord, *args: Any, _n: str = name, _f: Any = original) -> Any:
            calls.append(_n)
            return _f(self, *args)

        monkeypatch.setattr(FinishedRecord, name, counted)
    storage = MemoryStorage()
    async with osqueue.Broker(storage, config()) as broker:
        q = broker.client()
        await q.push_many([osqueue.NewJob(b"n") for _ in range(20)])
        await Worker(q, lambda job: None, concurrency=4, burst=True).run()
        assert broker.commits > 1
        assert calls == []
        assert len(broker.document.finished) == 0
        assert b'"finished"' not in (await storage.read(DOCUMENT_KEY)).data
        job_id = await q.push(b"r")
        await finish(q, job_id, "given")
    # the first result given is the first entry; from then on the sweep looks at it
    assert calls[0] == "add"
    assert calls.count("add") == 1


async def test_zero_keeps_nothing_even_a_result_given() -> None:
    async with osqueue.Broker(MemoryStorage(), config(), clock=ManualClock()) as broker:
        q = broker.client()
        job_id = await q.push(b"x", result_ttl_s=0.0)
        await finish(q, job_id, b"42")
        assert broker.document.finished.get(job_id) is None
        assert (await q.result(job_id)).value is None  # the job itself, until archived


@pytest.mark.parametrize(
    ("push_ttl", "queue_ttl", "broker_ttl", "kept_s"),
    [
        (300.0, 200.0, 100.0, 300.0),
        (None, 200.0, 100.0, 200.0),
        (None, None, 100.0, 100.0),
        (None, None, None, HOUR),
        (0.0, 200.0, 100.0, None),
        (None, 200.0, 0.0, 200.0),
    ],
)
async def test_the_ttl_of_the_push_then_the_queue_then_the_broker(
    push_ttl: float | None, queue_ttl: float | None, broker_ttl: float | None, kept_s: float | None
) -> None:
    cfg = config(result_ttl_s=broker_ttl)
    async with osqueue.Broker(MemoryStorage(), cfg, clock=ManualClock()) as broker:
        q = broker.client()
        if queue_ttl is not None:
            settings = await q.set_queue("img", result_ttl_s=queue_ttl)
            assert settings.result_ttl_s == queue_ttl
        job_id = await q.push(b"x", queue="img", result_ttl_s=push_ttl)
        await finish(q, job_id, "v", queue="img")
        entry = broker.document.finished.get(job_id)
        assert (entry.ttl_s if entry is not None else None) == kept_s


async def test_a_ttl_set_keeps_finishes_without_a_result_too() -> None:
    """A TTL set anywhere keeps how every job finished (as before results had a
    default); with none set, only a result given earns an entry."""
    async with osqueue.Broker(MemoryStorage(), config(), clock=ManualClock()) as broker:
        q = broker.client()
        await q.set_queue("kept", result_ttl_s=60.0)
        kept = await q.push(b"x", queue="kept", max_attempts=1)
        plain = await q.push(b"x", queue="plain", max_attempts=1)
        for job in await q.claim("w", ["kept", "plain"], max_jobs=2):
            await q.fail(job, error="boom")
        entry = broker.document.finished.get(kept)
        assert entry is not None
        assert (entry.status, entry.ttl_s) == ("dead", 60.0)
        assert broker.document.finished.get(plain) is None


async def test_the_queue_setting_is_stored_shown_and_removed_with_zero() -> None:
    storage = MemoryStorage()
    async with osqueue.Broker(storage, config(), clock=ManualClock()) as broker:
        q = broker.client()
        await q.set_queue("img", result_ttl_s=90.0)
        stored = decode((await storage.read(DOCUMENT_KEY)).data)
        assert stored.queue_settings["img"].result_ttl_s == 90.0
        assert [s.result_ttl_s for s in await q.queue_settings()] == [90.0]
        cleared = await q.set_queue("img", result_ttl_s=0.0)
        assert cleared.result_ttl_s is None
        assert "img" not in broker.document.queue_settings  # nothing else was set
        for bad in (-1.0, 10.0**9):
            with pytest.raises(InvalidInput) as info:
                await q.set_queue("img", result_ttl_s=bad)
            assert info.value.field == "result_ttl_s"


async def test_an_unknown_id_still_says_why_it_may_be_unknown() -> None:
    async with osqueue.Broker(MemoryStorage(), config(), clock=ManualClock()) as broker:
        with pytest.raises(JobNotFound, match="result_ttl_s set on its push, its queue"):
            await broker.client().result("01JD8Z0000000000000000NONE")
