"""The servicer over a fake client: answers that must fit in one message."""

from __future__ import annotations

import grpc
from remote_helpers import FakeCalls

from osqueue.api import Job
from osqueue.server.limits import Limits
from osqueue.server.server import ServerConfig, serve
from osqueue.wire._pb import queue_pb2 as pb
from osqueue.wire._pb import queue_pb2_grpc as pb_grpc

# Each 600-byte job costs 600 + 1024 bytes of budget: one job per 4 KiB message.
LIMITS = Limits(max_payload_bytes=1000, max_message_bytes=4096)


def big_jobs(n: int) -> list[Job]:
    return [
        Job(id=f"j{i}", queue="q", payload=b"p" * 600, attempts=1, max_attempts=5, token=i + 1)
        for i in range(n)
    ]


async def test_claim_gives_back_jobs_that_do_not_fit_in_the_answer() -> None:
    fake = FakeCalls()
    fake.claimable = big_jobs(3)
    server = await serve(fake, ServerConfig(listen="127.0.0.1:0", limits=LIMITS))
    try:
        async with grpc.aio.insecure_channel(server.address) as channel:
            stub = pb_grpc.QueueStub(channel)  # type: ignore[misc]
            response = await stub.Claim(pb.ClaimRequest(worker="w", queues=["q"], max_jobs=3))
        assert [job.id for job in response.jobs] == ["j0"]
        assert fake.released == ["j1", "j2"]
    finally:
        await server.stop(0)


async def test_claim_stream_splits_jobs_across_messages() -> None:
    fake = FakeCalls()
    fake.claimable = big_jobs(3)
    server = await serve(fake, ServerConfig(listen="127.0.0.1:0", limits=LIMITS))
    try:
        async with grpc.aio.insecure_channel(server.address) as channel:
            stub = pb_grpc.QueueStub(channel)  # type: ignore[misc]
            messages = [
                [job.id for job in message.jobs]
                async for message in stub.ClaimStream(
                    pb.ClaimRequest(worker="w", queues=["q"], max_jobs=3, wait_s=0)
                )
            ]
        assert messages == [["j0"], ["j1"], ["j2"]]
        assert fake.released == []
    finally:
        await server.stop(0)
