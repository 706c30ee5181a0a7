"""Typed queues over the in-process broker: msgspec, dataclass and pydantic payloads."""

from __future__ import annotations

import dataclasses
from collections.abc import AsyncIterator

import msgspec
import pydantic
import pytest

from osqueue.broker import Broker, BrokerConfig
from osqueue.client.typed import PayloadDecodeError, TypedJob, TypedQueue, codec_for
from osqueue.client.worker import Worker
from osqueue.clock import ManualClock
from osqueue.errors import InvalidInput
from osqueue.ids import new_id


class Order(msgspec.Struct):
    sku: str
    qty: int
    tags: list[str] = []


@dataclasses.dataclass
class Segment:
    namespace: str
    offset: int


class Invoice(pydantic.BaseModel):
    number: str
    lines: list[int]


@pytest.fixture
async def broker() -> AsyncIterator[Broker]:
    async with Broker(
        f"memory://test-typed-{new_id()}", BrokerConfig(), clock=ManualClock()
    ) as broker:
        yield broker


def stored_error(broker: Broker, job_id: str) -> str | None:
    job = broker.document.jobs[job_id]
    return job.last_error


@pytest.mark.parametrize(
    "value",
    [
        Order("A-1", 3, ["red"]),
        Segment("ns-42", 7),
        Invoice(number="F-9", lines=[1, 2]),
    ],
    ids=["msgspec", "dataclass", "pydantic"],
)
async def test_push_then_claim_round_trips_the_model(broker: Broker, value: object) -> None:
    queue = TypedQueue(broker.client(), type(value), queue="typed")
    job_id = await queue.push(value, priority=2)
    (claimed,) = await queue.claim("w1", max_jobs=5)
    assert isinstance(claimed, TypedJob)
    assert claimed.id == job_id
    assert claimed.value == value
    assert claimed.job.priority == 2
    await queue.complete(claimed)
    assert broker.document.jobs[job_id].status in {"done"} or job_id not in broker.document.jobs


async def test_push_many_and_partial_decode_failure(broker: Broker) -> None:
    client = broker.client()
    orders = TypedQueue(client, Order, queue="orders")
    good = await orders.push_many([Order("A", 1), Order("B", 2)])
    bad = await client.push(b'{"sku": "C", "qty": "three"}', queue="orders")
    claimed = await orders.claim("w1", max_jobs=10)
    # The bad job is failed, not returned; the good ones come back decoded.
    assert [t.id for t in claimed] == good
    assert [t.value.sku for t in claimed] == ["A", "B"]
    job = broker.document.jobs[bad]
    assert job.status == "queued"
    assert job.attempts == 1
    assert job.last_error == (
        f"job {bad}: payload does not decode as Order: Expected `int`, got `str` - at `$.qty`"
    )


@pytest.mark.parametrize(
    ("model", "payload", "field", "fragment"),
    [
        (Order, b'{"sku": "A", "qty": 1, "tags": [1]}', "$.tags[0]", "Expected `str`"),
        (Order, b'{"qty": 1}', "$.sku", "missing required field `sku`"),
        (Segment, b'{"namespace": "n", "offset": null}', "$.offset", "Expected `int`"),
        (Invoice, b'{"number": "x", "lines": [1, "z"]}', "$.lines[1]", "valid integer"),
        (Invoice, b'{"lines": []}', "$.number", "Field required"),
        (Order, b"{not json", None, "malformed"),
    ],
)
def test_decode_errors_name_the_model_and_the_field(
    model: type, payload: bytes, field: str | None, fragment: str
) -> None:
    codec = codec_for(model)
    with pytest.raises(PayloadDecodeError) as info:
        codec.decode(payload, job_id="j-1")
    assert info.value.field == field
    assert info.value.model == model.__qualname__
    assert isinstance(info.value, InvalidInput)
    message = str(info.value)
    assert message.startswith(f"job j-1: payload does not decode as {model.__qualname__}: ")
    assert fragment in message


async def test_push_refuses_a_value_of_the_wrong_type(broker: Broker) -> None:
    queue = TypedQueue(broker.client(), Order)
    with pytest.raises(InvalidInput, match="expected Order, got Segment") as info:
        await queue.push(Segment("n", 1))  # type: ignore[arg-type]
    assert info.value.field == "value"
    assert broker.document.jobs == {}


def test_a_model_msgspec_cannot_type_is_refused() -> None:
    with pytest.raises(InvalidInput) as info:
        codec_for(object())  # type: ignore[arg-type]
    assert info.value.field == "model"


async def test_handler_adapter_decodes_for_the_worker(broker: Broker) -> None:
    client = broker.client()
    orders = TypedQueue(client, Order, queue="orders")
    await orders.push(Order("A", 2))
    bad = await client.push(b'{"sku": 5, "qty": 1}', queue="orders")
    seen: list[Order] = []

    async def handle(order: Order) -> None:
        seen.append(order)

    worker = Worker(client, {"orders": orders.handler(handle)}, burst=True, concurrency=2)
    await worker.run()
    assert seen == [Order("A", 2)]
    assert worker.counters.processed == 1
    assert worker.counters.failed == 1
    error = stored_error(broker, bad)
    assert error is not None
    assert error.endswith(
        f"PayloadDecodeError: job {bad}: payload does not decode as Order: "
        "Expected `str`, got `int` - at `$.sku`"
    )


async def test_sync_handler_adapter_runs_in_a_thread(broker: Broker) -> None:
    client = broker.client()
    segments = TypedQueue(client, Segment, queue="seg")
    await segments.push(Segment("ns", 3))
    seen: list[Segment] = []
    handler = segments.handler(seen.append)
    worker = Worker(client, {"seg": handler}, burst=True)
    await worker.run()
    assert seen == [Segment("ns", 3)]


async def test_claim_returns_typed_jobs_that_settle(broker: Broker) -> None:
    client = broker.client()
    queue = TypedQueue(client, Segment, queue="seg")
    first = await queue.push(Segment("a", 1))
    (claimed,) = await queue.claim("w1")
    await queue.heartbeat(claimed)
    await queue.fail(claimed, error="boom", retry_after_s=0)
    (again,) = await queue.claim("w1")
    assert again.id == first
    assert again.job.attempts == claimed.job.attempts + 1
    await queue.release(again)
    assert broker.document.jobs[first].status == "queued"


def test_queue_name_is_validated(broker: Broker) -> None:
    with pytest.raises(InvalidInput) as info:
        TypedQueue(broker.client(), Order, queue="")
    assert info.value.field == "queue"
