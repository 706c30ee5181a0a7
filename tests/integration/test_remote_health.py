"""The standard gRPC health service: probes tell the serving broker from a standby."""

from __future__ import annotations

import asyncio

import grpc
import pytest
from grpc_health.v1 import health_pb2, health_pb2_grpc
from remote_helpers import quiet_broker_config

from osqueue.server.health import QUEUE_SERVICE
from osqueue.server.runner import BrokerServer
from osqueue.server.server import ServerConfig
from osqueue.wire._pb import queue_pb2 as pb
from osqueue.wire._pb import queue_pb2_grpc as pb_grpc

SERVING = health_pb2.HealthCheckResponse.SERVING
NOT_SERVING = health_pb2.HealthCheckResponse.NOT_SERVING
TOKEN = "health-test-token"


async def status(address: str, service: str) -> int:
    """One health check, with no token (as a load balancer or kubelet sends it)."""
    async with grpc.aio.insecure_channel(address) as channel:
        stub = health_pb2_grpc.HealthStub(channel)
        request = health_pb2.HealthCheckRequest(service=service)
        return int((await stub.Check(request, timeout=5.0)).status)


async def test_health_answers_without_a_token_and_follows_the_queue_to_the_standby(
    queue_url: str,
) -> None:
    active = BrokerServer(
        queue_url, ServerConfig(listen="127.0.0.1:0", token=TOKEN), quiet_broker_config()
    )
    await active.start()
    standby = BrokerServer(
        queue_url,
        ServerConfig(listen="127.0.0.1:0", token=TOKEN),
        quiet_broker_config(standby_poll_s=0.05, clock_skew_margin_s=0.05),
        standby=True,
    )
    await standby.listen()
    taking_over = asyncio.ensure_future(standby.start())
    first, second = f"127.0.0.1:{active.port}", f"127.0.0.1:{standby.port}"
    try:
        assert await status(first, "") == SERVING
        assert await status(first, QUEUE_SERVICE) == SERVING
        assert await status(second, "") == SERVING  # alive, standing by
        assert await status(second, QUEUE_SERVICE) == NOT_SERVING
        async with grpc.aio.insecure_channel(first) as channel:  # the queue still needs it
            with pytest.raises(grpc.aio.AioRpcError) as caught:
                await pb_grpc.QueueStub(channel).Stats(pb.StatsRequest(), timeout=5.0)  # type: ignore[misc]
            assert caught.value.code() == grpc.StatusCode.UNAUTHENTICATED

        async with grpc.aio.insecure_channel(first) as channel:
            stub = health_pb2_grpc.HealthStub(channel)
            watch = stub.Watch(health_pb2.HealthCheckRequest(service=QUEUE_SERVICE))
            assert (await watch.read()).status == SERVING
            stopping = asyncio.ensure_future(active.stop())  # drains and releases the lease
            assert (await watch.read()).status == NOT_SERVING
            await stopping
            assert await watch.read() is grpc.aio.EOF  # the watch ended with the server

        await asyncio.wait_for(taking_over, 30.0)
        assert await status(second, QUEUE_SERVICE) == SERVING
    finally:
        taking_over.cancel()
        await active.stop()
        await standby.stop()


async def test_unknown_health_service_is_not_found(broker_server: BrokerServer) -> None:
    with pytest.raises(grpc.aio.AioRpcError) as caught:
        await status(f"127.0.0.1:{broker_server.port}", "no.such.Service")
    assert caught.value.code() == grpc.StatusCode.NOT_FOUND
