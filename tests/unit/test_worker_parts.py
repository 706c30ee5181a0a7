"""The worker's seams: the config it takes whole, and the completion relay's answers.

The runtime as a whole is tested in test_worker.py; these pin what the parts
promise each other.
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from typing import Any

import pytest

from osqueue.api import Job
from osqueue.broker import Broker, BrokerConfig
from osqueue.client.worker import Worker, WorkerConfig
from osqueue.client.worker.relay import (
    SEND_ALONE,
    SENT,
    CompletionRelay,
    Failed,
    answer_all,
    answer_each,
)
from osqueue.clock import ManualClock
from osqueue.errors import BrokerUnavailable, InvalidInput, LeaseLost
from osqueue.ids import new_id


@pytest.fixture
async def broker() -> AsyncIterator[Broker]:
    async with Broker(
        f"memory://test-worker-parts-{new_id()}", BrokerConfig(), clock=ManualClock()
    ) as broker:
        yield broker


def job(job_id: str) -> Job:
    return Job(id=job_id, queue="default", payload=b"", attempts=1, max_attempts=5, token=1)


# --------------------------------------------------------------------------- config


async def test_the_worker_takes_its_config_whole(broker: Broker) -> None:
    config = WorkerConfig(queues=("a", "b"), concurrency=4, batch_size=2, worker_id="w1")
    worker = Worker(broker.client(), lambda job: None, config)
    assert worker.config is config
    assert (worker.queues, worker.worker_id) == (("a", "b"), "w1")
    same = Worker.from_config(broker.client(), lambda job: None, config)
    assert same.config is config


async def test_keyword_options_take_the_place_of_config_fields(broker: Broker) -> None:
    base = WorkerConfig(concurrency=4, wait_s=1.0)
    worker = Worker(broker.client(), lambda job: None, base, burst=True, queues=["x"])
    assert worker.config == WorkerConfig(queues=("x",), concurrency=4, wait_s=1.0, burst=True)
    assert Worker(broker.client(), lambda job: None).config == WorkerConfig()


async def test_keyword_options_are_validated_with_the_config(broker: Broker) -> None:
    base = WorkerConfig(concurrency=2, batch_size=2)
    with pytest.raises(InvalidInput) as info:
        Worker(broker.client(), lambda job: None, base, concurrency=1)
    assert info.value.field == "batch_size"
    with pytest.raises(InvalidInput) as info:
        Worker(broker.client(), lambda job: None, queues="default")
    assert info.value.field == "queues"


class OwnClient:
    """A client of one's own with every call a worker made before
    ``complete_and_claim`` joined :class:`~osqueue.api.QueueClient`."""

    def __init__(self, inner: Any) -> None:
        self.claim = inner.claim
        self.complete = inner.complete
        self.fail = inner.fail
        self.release = inner.release
        self.heartbeat = inner.heartbeat


async def test_a_client_without_complete_and_claim_is_refused_naming_it(broker: Broker) -> None:
    """Every client completes and claims in one call (no probe decides at run
    time); one of your own without it is refused before anything runs."""
    with pytest.raises(InvalidInput) as info:
        Worker(OwnClient(broker.client()), lambda job: None)  # type: ignore[arg-type]
    assert info.value.field == "client"
    assert "OwnClient has no complete_and_claim:" in str(info.value)
    bare = object()
    with pytest.raises(InvalidInput, match="object has no claim, complete_and_claim, complete, "):
        Worker(bare, lambda job: None)  # type: ignore[arg-type]


# --------------------------------------------------------------------------- relay


async def test_the_relay_is_open_only_when_a_claim_can_carry_completions() -> None:
    relay = CompletionRelay()
    assert relay.open
    relay.parked = True
    assert not relay.open
    relay.parked = False
    relay.close()
    assert not relay.open


async def test_the_relay_answers_each_ride_once() -> None:
    relay = CompletionRelay()
    a, b, c = relay.queue(job("a")), relay.queue(job("b")), relay.queue(job("c"))
    assert relay.pending
    rides = relay.take()
    assert not relay.pending
    assert [ride.job.id for ride in rides] == ["a", "b", "c"]
    gone = LeaseLost()
    answer_each(rides[:2], [None, gone])
    answer_all(rides, Failed(BrokerUnavailable()))  # only the unanswered one
    assert a.result() == SENT
    assert b.result() == Failed(gone)
    answer = c.result()
    assert isinstance(answer, Failed)
    assert isinstance(answer.error, BrokerUnavailable)


async def test_queued_completions_given_back_are_sent_alone() -> None:
    relay = CompletionRelay()
    answers = [relay.queue(job(i)) for i in ("a", "b")]
    relay.send_all_alone()
    assert not relay.pending
    assert [a.result() for a in answers] == [SEND_ALONE, SEND_ALONE]
