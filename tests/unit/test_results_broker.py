"""Results through the broker and the in-process client: long polls answered by the
commit that finishes the job, result objects, their sweep, failover, the worker."""

from __future__ import annotations

import asyncio
import logging

import msgspec
import pytest

import osqueue
from osqueue.api import EncodedResult, JobResult
from osqueue.clock import ManualClock
from osqueue.errors import CorruptDocument, InvalidInput, JobNotFound, LeaseLost, ShuttingDown
from osqueue.state import DOCUMENT_KEY, decode
from osqueue.storage import MemoryStorage
from osqueue.storage.port import Storage


class _AnyTime(float):
    def __eq__(self, other: object) -> bool:
        return isinstance(other, float)

    __hash__ = float.__hash__


ANY_TIME = _AnyTime(0.0)
#: results above 16 bytes go to result objects; the result sweep runs every 5 s
SMALL = {"result_inline_max_bytes": 16, "result_sweep_interval_s": 5.0}


def config(**kw: object) -> osqueue.BrokerConfig:
    """A broker that keeps every finished job an hour (with no TTL set only results
    given are kept: see test_results_kept.py)."""
    base: dict[str, object] = {
        "lease_s": 10.0,
        "heartbeat_timeout_s": 30.0,
        "retry_base_s": 0.001,
        "result_ttl_s": 3600.0,
    }
    base.update(kw)
    return osqueue.BrokerConfig(**base)  # type: ignore[arg-type]


async def settle() -> None:
    """Let every task that is ready run (no clock moves)."""
    for _ in range(20):
        await asyncio.sleep(0)


async def _pass(clock: ManualClock, seconds: int) -> None:
    """Let ``seconds`` of clock time pass a second at a time (leases renew meanwhile)."""
    for _ in range(seconds):
        await settle()
        clock.advance(1.0)
    await settle()


async def stored(storage: Storage) -> osqueue.state.Document:
    return decode((await storage.read(DOCUMENT_KEY)).data)


async def test_a_parked_result_is_answered_by_the_commit_that_completes_the_job() -> None:
    clock = ManualClock()
    async with osqueue.Broker(MemoryStorage(), config(), clock=clock) as broker:
        q = broker.client()
        job_id = await q.push(b"x")
        waiting = asyncio.ensure_future(q.result(job_id, wait_s=60.0))
        await settle()
        assert not waiting.done()
        assert broker._waiters.results.keys() == {job_id}
        (job,) = await q.claim("w")
        await settle()
        assert not waiting.done()  # a claim does not finish the job
        await q.complete(job, result={"rows": 3})
        commits = broker.commits
        await settle()
        assert waiting.done()
        assert broker.commits == commits  # no later commit was needed to answer
        answer = waiting.result()
        assert answer == JobResult("done", {"rows": 3}, None, 1, answer.finished_at)
        assert answer.finished_at == pytest.approx(clock.now(), abs=0.001)
        assert broker._waiters.results == {}


@pytest.mark.parametrize("how", ["dead", "cancelled"])
async def test_a_dead_or_cancelled_job_answers_its_waiters(how: str) -> None:
    clock = ManualClock()
    async with osqueue.Broker(MemoryStorage(), config(), clock=clock) as broker:
        q = broker.client()
        job_id = await q.push(b"x", max_attempts=1)
        waiting = asyncio.ensure_future(q.result(job_id, wait_s=60.0))
        await settle()
        if how == "dead":
            (job,) = await q.claim("w")
            await q.fail(job, error="it broke")
        else:
            await q.cancel(job_id)
        await settle()
        answer = waiting.result()
        assert answer.status == how
        assert answer.finished
        assert answer.error == ("it broke" if how == "dead" else None)


async def test_a_wait_that_runs_out_answers_the_live_status() -> None:
    clock = ManualClock()
    async with osqueue.Broker(MemoryStorage(), config(), clock=clock) as broker:
        q = broker.client()
        job_id = await q.push(b"x")
        assert await q.result(job_id) == JobResult("queued")
        waiting = asyncio.ensure_future(q.result(job_id, wait_s=3.0))
        await q.claim("w")
        await _pass(clock, 4)
        answer = waiting.result()
        assert (answer.status, answer.finished, answer.attempts) == ("claimed", False, 1)


async def test_unknown_ids_and_bad_arguments_are_refused_naming_the_field() -> None:
    async with osqueue.Broker(MemoryStorage(), config()) as broker:
        q = broker.client()
        with pytest.raises(JobNotFound):
            await q.result("01JD0000000000000000000000", wait_s=5.0)
        with pytest.raises(InvalidInput) as info:
            await q.result("bad id!")
        assert info.value.field == "job_id"
        with pytest.raises(InvalidInput) as info:
            await q.result("a", wait_s=-1.0)
        assert info.value.field == "wait_s"
        with pytest.raises(InvalidInput) as info:
            await q.push(b"x", result_ttl_s=-5.0)
        assert info.value.field == "result_ttl_s"


@pytest.mark.parametrize(
    "value", [b"\x00\x01raw", "text", {"a": [1, None]}, [1, 2], 3.5, True, "x" * 200]
)
async def test_every_kind_of_value_comes_back_as_it_went_in(value: object) -> None:
    store = MemoryStorage()
    async with osqueue.Broker(store, config(**SMALL)) as broker:
        q = broker.client()
        job_id = await q.push(b"x")
        (job,) = await q.claim("w")
        await q.complete(job, result=value)
        assert (await q.result(job_id)).value == value
        encoded = EncodedResult.of(value)
        assert encoded is not None
        assert await q.calls.result(job_id) == (
            JobResult("done", None, None, 1, (await q.result(job_id)).finished_at),
            encoded,
        )
        in_object = len(encoded.data) > 16
        assert len(await store.list("results/")) == int(in_object)


async def test_a_value_json_cannot_hold_is_refused_and_the_job_stays_claimed() -> None:
    async with osqueue.Broker(MemoryStorage(), config()) as broker:
        q = broker.client()
        await q.push(b"x")
        (job,) = await q.claim("w")
        with pytest.raises(InvalidInput) as info:
            await q.complete(job, result=object())
        assert info.value.field == "result"
        assert broker.document.jobs[job.id].status == "claimed"
        with pytest.raises(InvalidInput) as info:
            await q.complete(job, result=EncodedResult("json", b"{not json"))
        assert info.value.field == "result.value"
        await q.complete(job, result=EncodedResult("json", b'{"ok":true}'))
        assert (await q.result(job.id)).value == {"ok": True}


async def test_a_large_result_lives_in_an_object_until_its_entry_expires() -> None:
    clock = ManualClock()
    store = MemoryStorage()
    async with osqueue.Broker(store, config(**SMALL), clock=clock) as broker:
        q = broker.client()
        job_id = await q.push(b"x", result_ttl_s=8.0)
        (job,) = await q.claim("w")
        await q.complete(job, result=b"R" * 1000)
        (ref,) = await store.list("results/")
        assert ref.startswith(f"results/{job_id}=")
        entry = broker.document.finished.get(job_id)
        assert entry is not None
        assert entry.result is not None
        assert (entry.result.ref, entry.result.size, entry.result.value) == (ref, 1000, None)
        assert (await q.result(job_id)).value == b"R" * 1000
        await _pass(clock, 9)
        with pytest.raises(JobNotFound):  # expired: gone even before the sweep prunes it
            await q.result(job_id)
        await _pass(clock, 25)  # pruned (after the slack), then two sweeps find it orphaned
        assert job_id not in broker.document.finished
        assert await store.list("results/") == []
        assert broker.counters.results_swept == 1


async def test_uploads_no_entry_keeps_are_deleted_at_once() -> None:
    store = MemoryStorage()
    async with osqueue.Broker(store, config(**SMALL)) as broker:
        q = broker.client()
        job_id = await q.push(b"x")
        (job,) = await q.claim("w")
        stale = msgspec.structs.replace(job, token=job.token + 7)
        with pytest.raises(LeaseLost):
            await q.complete(stale, result=b"A" * 100)
        assert await store.list("results/") == []
        await q.complete(job, result=b"B" * 100)
        (kept,) = await store.list("results/")
        await q.complete(job, result=b"C" * 100)  # a retried completion: the first stands
        assert await store.list("results/") == [kept]
        assert (await q.result(job_id)).value == b"B" * 100
        # a job that keeps no record keeps no object either
        other = await q.push(b"y", result_ttl_s=0)
        (job,) = await q.claim("w")
        await q.complete(job, result=b"D" * 100)
        assert await store.list("results/") == [kept]
        assert (await q.result(other)).value is None  # done, until its archive prunes it


async def test_results_survive_a_takeover() -> None:
    clock = ManualClock()
    store = MemoryStorage()
    first = osqueue.Broker(store, config(**SMALL), clock=clock)
    await first.start()
    q = first.client()
    small, large, dead = [await q.push(b"x", max_attempts=1) for _ in range(3)]
    jobs = {j.id: j for j in await q.claim("w", max_jobs=3)}
    await q.complete(jobs[small], result="ok")
    await q.complete(jobs[large], result={"blob": "z" * 100})
    await q.fail(jobs[dead], error="boom")
    first.tasks()[0].cancel()  # the commit loop: the broker dies where it stands
    await settle()
    second = osqueue.Broker(store, config(**SMALL), clock=clock)
    clock.advance(20.0)
    await second.start()
    try:
        r = second.client()
        assert (await r.result(small)).value == "ok"
        assert (await r.result(large)).value == {"blob": "z" * 100}
        assert (await r.result(dead)).error == "boom"
        assert (await stored(store)).finished == second.document.finished
    finally:
        await second.stop()
        await first.stop()


async def test_a_stop_releases_parked_results() -> None:
    broker = osqueue.Broker(MemoryStorage(), config())
    await broker.start()
    q = broker.client()
    job_id = await q.push(b"x")
    waiting = asyncio.ensure_future(q.result(job_id, wait_s=60.0))
    await settle()
    await broker.stop()
    with pytest.raises(ShuttingDown):
        await waiting


async def test_complete_many_and_complete_and_claim_carry_results() -> None:
    async with osqueue.Broker(MemoryStorage(), config(**SMALL)) as broker:
        q = broker.client()
        ids = [await q.push(b"%d" % i) for i in range(4)]
        a, b = await q.claim("w", max_jobs=2)
        before = broker.commits
        errors, claimed = await q.complete_and_claim(
            [a, b], "w", max_jobs=2, results=["one", b"two" * 20]
        )
        assert errors == [None, None]
        assert broker.commits == before + 1
        assert (await q.result(ids[0])).value == "one"
        assert (await q.result(ids[1])).value == b"two" * 20
        with pytest.raises(InvalidInput) as info:
            await q.complete_many(claimed, [1])
        assert info.value.field == "results"
        first, second = await q.complete_many(claimed, [None, object()])
        assert first is None
        assert isinstance(second, InvalidInput)
        assert second.field == "result"
        assert (await q.result(ids[2])) == JobResult("done", None, None, 1, ANY_TIME)
        assert (await q.result(ids[3])).status == "claimed"  # its completion failed alone
        assert await q.complete_many(claimed[1:], [[3]]) == [None]
        assert (await q.result(ids[3])).value == [3]


async def test_bad_result_settings_name_the_field() -> None:
    for kwargs, field in (
        ({"result_ttl_s": -1.0}, "result_ttl_s"),
        ({"result_ttl_s": 10.0**9}, "result_ttl_s"),
        ({"max_finished_jobs": 0}, "max_finished_jobs"),
        ({"max_finished_bytes": 0}, "max_finished_bytes"),
        ({"result_inline_max_bytes": -1}, "result_inline_max_bytes"),
        ({"max_result_bytes": 0}, "max_result_bytes"),
        ({"result_sweep_interval_s": 0.0}, "result_sweep_interval_s"),
    ):
        with pytest.raises(InvalidInput) as info:
            config(**kwargs)
        assert info.value.field == field


async def test_stats_count_the_record_and_its_evictions() -> None:
    async with osqueue.Broker(MemoryStorage(), config(max_finished_jobs=5)) as broker:
        q = broker.client()
        for _ in range(8):
            await q.push(b"x")
        for job in await q.claim("w", max_jobs=8):
            await q.complete(job)
        stats = await q.stats()
        assert stats.finished + stats.finished_evicted == 8
        assert stats.finished <= 5
        assert stats.finished_evicted > 0


async def test_a_result_read_is_logged_when_its_object_vanished(
    caplog: pytest.LogCaptureFixture,
) -> None:
    store = MemoryStorage()
    async with osqueue.Broker(store, config(**SMALL)) as broker:
        q = broker.client()
        job_id = await q.push(b"x")
        (job,) = await q.claim("w")
        await q.complete(job, result=b"V" * 64)
        (ref,) = await store.list("results/")
        await store.delete(ref)
        with caplog.at_level(logging.WARNING), pytest.raises(JobNotFound):
            await q.result(job_id)
        assert any("result object is gone" in r.getMessage() for r in caplog.records)


async def test_a_result_object_cut_short_is_corrupt_naming_its_key() -> None:
    store = MemoryStorage()
    async with osqueue.Broker(store, config(**SMALL)) as broker:
        q = broker.client()
        job_id = await q.push(b"x")
        (job,) = await q.claim("w")
        await q.complete(job, result=b"V" * 64)
        (ref,) = await store.list("results/")
        await store.put(ref, b"V" * 10)
        with pytest.raises(CorruptDocument) as info:
            await q.result(job_id)
        assert ref in str(info.value)
