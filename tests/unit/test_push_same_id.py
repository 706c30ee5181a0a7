"""One push that names an id twice (issue 23, weak spot 10): the same job twice is a
repeat, applied once; two different jobs under one id are both refused, naming it."""

from __future__ import annotations

import pytest

import osqueue
from osqueue.errors import InvalidInput
from osqueue.storage import MemoryStorage


def config() -> osqueue.BrokerConfig:
    return osqueue.BrokerConfig(lease_s=10.0, heartbeat_timeout_s=30.0)


@pytest.mark.parametrize(
    "other",
    [
        osqueue.NewJob(b"second", id="dup"),  # another payload
        osqueue.NewJob(b"first", id="dup", priority=3),  # another option
        osqueue.NewJob(b"first", id="dup", queue="elsewhere"),
    ],
)
async def test_two_jobs_under_one_id_in_one_push_are_refused_naming_the_id(
    other: osqueue.NewJob,
) -> None:
    async with osqueue.Broker(MemoryStorage(), config()) as broker:
        q = broker.client()
        jobs = [osqueue.NewJob(b"first", id="dup"), osqueue.NewJob(b"x", id="fine"), other]
        results = await q.push_results(jobs)
        assert results[1] == "fine"
        for refused in (results[0], results[2]):
            assert isinstance(refused, InvalidInput)
            assert refused.field == "id"
            assert "'dup'" in str(refused)
            assert "twice" in str(refused)
        assert "dup" not in broker.document.jobs  # neither payload was taken
        with pytest.raises(InvalidInput, match="'dup'"):
            await q.push_many(jobs)
        assert (await q.stats()).queues["default"].depth == 1


async def test_the_same_job_twice_in_one_push_is_applied_once() -> None:
    async with osqueue.Broker(MemoryStorage(), config()) as broker:
        q = broker.client()
        job = osqueue.NewJob(b"same", id="twice")
        assert await q.push_many([job, osqueue.NewJob(b"same", id="twice")]) == ["twice"] * 2
        assert broker.document.jobs["twice"].payload == b"same"
        assert (await q.stats()).queues["default"].depth == 1
