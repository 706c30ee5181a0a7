"""The broker's one entry for ops (:class:`osqueue.broker.inproc.calls.BrokerCalls`),
as the gRPC service uses it: ops made elsewhere, the broker's own bounds kept."""

from __future__ import annotations

from typing import Any

import osqueue
from osqueue.api import NewJob
from osqueue.broker.inproc.calls import BrokerCalls
from osqueue.errors import InvalidInput
from osqueue.state import make
from osqueue.storage import MemoryStorage


def config(**kw: object) -> osqueue.BrokerConfig:
    return osqueue.BrokerConfig(lease_s=10.0, retry_base_s=0.001, **kw)  # type: ignore[arg-type]


async def test_a_push_above_the_brokers_limit_is_refused_before_any_upload() -> None:
    # the server makes its ops with its own (larger) limit; the broker's still holds
    store = MemoryStorage()
    async with osqueue.Broker(
        store, config(max_payload_bytes=2000, inline_payload_max_bytes=100)
    ) as broker:
        calls = BrokerCalls(broker)
        uploaded: list[str] = []
        upload = broker.payloads.upload

        async def recording(job_id: str, data: bytes) -> Any:
            uploaded.append(job_id)
            return await upload(job_id, data)

        broker.payloads.upload = recording  # type: ignore[method-assign]
        big = make.push(NewJob(b"x" * 3000, id="big"), 1_000_000)
        large = make.push(NewJob(b"y" * 500, id="large"), 1_000_000)
        small = make.push(NewJob(b"z", id="small"), 1_000_000)
        answers = await calls.push_many([big, large, small])
        assert isinstance(answers[0], InvalidInput)
        assert answers[0].field == "payload"
        assert answers[1:] == ["large", "small"]
        assert uploaded == ["large"]  # the refused payload was never written
        assert len(await store.list("payloads/")) == 1
        (job,) = [j for j in await calls.claim(make.claim("w", "default", 5)) if j.id == "large"]
        assert job.payload == b"y" * 500
