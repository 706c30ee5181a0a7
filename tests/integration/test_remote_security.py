"""Security defaults: no token in plaintext off loopback, a pinned broker certificate,
and tokens with access levels (read, write, admin).

The threat: whoever can write to the bucket can write another broker address
into the queue document, and every client then sends its token there.
"""

from __future__ import annotations

import hashlib
import logging
import ssl
from collections.abc import AsyncIterator, Awaitable, Callable
from pathlib import Path
from typing import Any

import grpc
import pytest
from remote_helpers import (
    CertFiles,
    FakeCalls,
    cert_fingerprint,
    fast_config,
    non_loopback_ip,
    quiet_broker_config,
)

from osqueue.api import Job
from osqueue.broker import Broker
from osqueue.client.remote import RemoteClient, connect
from osqueue.client.remote.trust import Trust
from osqueue.errors import (
    BrokerUnavailable,
    InvalidInput,
    PermissionDenied,
    Unauthenticated,
    UntrustedBroker,
)
from osqueue.server.runner import BrokerServer
from osqueue.server.server import RunningServer, ServerConfig, serve
from osqueue.server.service import QueueService
from osqueue.storage import MemoryStorage
from osqueue.wire._pb import queue_pb2 as pb
from osqueue.wire._pb import queue_pb2_grpc as pb_grpc
from osqueue.wire.auth import bearer_metadata
from osqueue.wire.tls import fingerprint_of_pem

ADMIN = "admin-token-1"
WRITE = "write-token-2"
READ = "read-token-3"
#: TEST-NET-3: not loopback, and no broker of ours there (a connection would hang).
NOWHERE = "203.0.113.7:7070"


def storage_of(memory_url: str) -> MemoryStorage:
    return MemoryStorage(memory_url.removeprefix("memory://"))


def read_bytes(path: str) -> bytes:
    return Path(path).read_bytes()


def with_colons(fingerprint: str) -> str:
    """``openssl x509 -fingerprint -sha256``'s spelling."""
    return ":".join(fingerprint[i : i + 2] for i in range(0, 64, 2)).upper()


async def broker_naming(url: str, address: str) -> Broker:
    """A broker (without a server) that wrote ``address`` into the queue document, as
    someone with write access to the bucket could."""
    broker = Broker(url, quiet_broker_config(address=address))
    await broker.start()
    return broker


# --------------------------------------------------------------------------- plaintext


async def test_a_token_is_not_sent_in_plaintext_to_a_non_loopback_address(
    memory_url: str,
) -> None:
    broker = await broker_naming(memory_url, NOWHERE)
    try:
        with pytest.raises(UntrustedBroker) as caught:
            await connect(memory_url, token=ADMIN, config=fast_config())
        message = str(caught.value)
        assert NOWHERE in message
        for fix in ("tls_ca", "tls_fingerprint", "allow_plaintext_token", "--tls-cert"):
            assert fix in message
        # A call refuses too, before any connection is opened.
        client = RemoteClient(storage_of(memory_url), fast_config(token=ADMIN))
        try:
            with pytest.raises(UntrustedBroker):
                await client.push(b"x")
            with pytest.raises(UntrustedBroker):
                await client.stats()
            assert client.connects == 0
        finally:
            await client.close()
        assert broker.document.stats.pushed == 0
    finally:
        await broker.stop()


async def test_allowing_a_plaintext_token_warns_once_and_the_calls_go_through(
    memory_url: str, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.WARNING, logger="osqueue")
    ip = non_loopback_ip()
    server_config = ServerConfig(listen=f"{ip}:0", token=ADMIN)
    async with BrokerServer(memory_url, server_config, quiet_broker_config()) as server:
        assert server.address is not None
        assert server.address.startswith(f"{ip}:")
        served = [r for r in caplog.records if r.__dict__.get("action") == "plaintext_tokens"]
        assert len(served) == 1  # the server says it too
        assert "PLAINTEXT" in served[0].getMessage()

        with pytest.raises(UntrustedBroker):  # the default still refuses
            await connect(memory_url, token=ADMIN, config=fast_config())
        config = fast_config(token=ADMIN, allow_plaintext_token=True)
        async with connect(memory_url, config=config) as client:
            assert isinstance(client, RemoteClient)
            await client.push(b"in the clear")
            conn = client.connection.current
            assert conn is not None
            client.connection.drop(conn)  # a second connection: no second warning
            assert (await client.stats()).pushed == 1
            assert client.connects == 2
        sent = [r for r in caplog.records if r.__dict__.get("action") == "plaintext_token"]
        assert len(sent) == 1
        assert server.address in sent[0].getMessage()
        assert sent[0].levelno == logging.WARNING


async def test_the_server_warns_only_when_tokens_cross_the_network_in_plaintext(
    tls_files: CertFiles, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.WARNING, logger="osqueue.server")
    for config, warns in (
        (ServerConfig(listen="0.0.0.0:0", token=ADMIN), True),
        (ServerConfig(listen="127.0.0.1:0", token=ADMIN), False),
        (ServerConfig(listen="0.0.0.0:0", insecure=True), False),  # no token to leak
        (
            ServerConfig(
                listen="0.0.0.0:0", token=ADMIN, tls_cert=tls_files.cert, tls_key=tls_files.key
            ),
            False,
        ),
    ):
        caplog.clear()
        server = await serve(None, config)
        await server.stop(0)
        warned = [r for r in caplog.records if r.__dict__.get("action") == "plaintext_tokens"]
        assert len(warned) == (1 if warns else 0), config


# --------------------------------------------------------------------------- pinning


class Recorder(grpc.aio.ServerInterceptor):  # type: ignore[misc]
    """Records every call a server receives, with its metadata."""

    def __init__(self) -> None:
        self.calls: list[tuple[str, Any]] = []

    async def intercept_service(
        self, continuation: Callable[[Any], Awaitable[Any]], details: Any
    ) -> Any:
        self.calls.append((details.method, details.invocation_metadata))
        return await continuation(details)


@pytest.fixture
async def impostor(tls_files: CertFiles) -> AsyncIterator[tuple[str, Recorder]]:
    """A TLS server with another certificate (valid for 127.0.0.1) that takes any token."""
    recorder = Recorder()
    server = grpc.aio.server(interceptors=[recorder])
    server.add_generic_rpc_handlers((QueueService(FakeCalls()).rpc_handler(),))
    key, cert = read_bytes(tls_files.other_key), read_bytes(tls_files.other_cert)
    port = server.add_secure_port("127.0.0.1:0", grpc.ssl_server_credentials([(key, cert)]))
    await server.start()
    try:
        yield f"127.0.0.1:{port}", recorder
    finally:
        await server.stop(0)


def tls_server(tls_files: CertFiles, **overrides: Any) -> ServerConfig:
    values: dict[str, Any] = {
        "listen": "127.0.0.1:0",
        "tls_cert": tls_files.cert,
        "tls_key": tls_files.key,
        "token": ADMIN,
    }
    values.update(overrides)
    return ServerConfig(**values)


async def test_the_server_reports_the_fingerprint_clients_pin(tls_files: CertFiles) -> None:
    expected = cert_fingerprint(tls_files.cert)
    assert fingerprint_of_pem(read_bytes(tls_files.cert)) == expected
    server = await serve(None, tls_server(tls_files))
    try:
        assert server.tls_fingerprint == expected
    finally:
        await server.stop(0)
    plain = await serve(None, ServerConfig(listen="127.0.0.1:0"))
    assert plain.tls_fingerprint is None
    await plain.stop(0)


@pytest.mark.parametrize("with_ca", [False, True])
async def test_a_pinned_broker_serves_the_client(
    memory_url: str, tls_files: CertFiles, with_ca: bool
) -> None:
    pin = with_colons(cert_fingerprint(tls_files.cert))
    async with BrokerServer(memory_url, tls_server(tls_files), quiet_broker_config()) as server:
        config = fast_config(
            token=ADMIN, tls_fingerprint=pin, tls_ca=tls_files.cert if with_ca else None
        )
        async with connect(memory_url, config=config) as q:
            await q.push(b"pinned")
            [job] = await q.claim("w")
            assert job.payload == b"pinned"
            await q.complete(job)
            assert (await q.stats()).broker_address == server.address


async def test_a_pin_mismatch_is_refused_before_the_token_is_sent(
    memory_url: str, tls_files: CertFiles, impostor: tuple[str, Recorder]
) -> None:
    address, recorder = impostor
    pin = cert_fingerprint(tls_files.cert)
    broker = await broker_naming(memory_url, address)  # the document now names the impostor
    try:
        config = fast_config(token=ADMIN, tls_fingerprint=pin)
        with pytest.raises(UntrustedBroker) as caught:
            await connect(memory_url, config=config)
        message = str(caught.value)
        assert address in message
        assert pin in message
        assert cert_fingerprint(tls_files.other_cert) in message  # what it presented
        client = RemoteClient(storage_of(memory_url), config)
        try:
            with pytest.raises(UntrustedBroker):
                await client.push(b"x")
            assert client.connects == 0
        finally:
            await client.close()
        assert recorder.calls == []  # no call at all, so no token
        # A CA that did not sign the broker's certificate is refused the same way.
        config = fast_config(token=ADMIN, tls_fingerprint=pin, tls_ca=tls_files.cert)
        with pytest.raises(UntrustedBroker) as caught:
            await connect(memory_url, config=config)
        assert "tls_ca" in str(caught.value)
        assert recorder.calls == []
    finally:
        await broker.stop()


async def test_the_pinned_channel_trusts_that_certificate_alone(
    tls_files: CertFiles, impostor: tuple[str, Recorder]
) -> None:
    """What gRPC gets after a pin check: a reconnect that meets another certificate
    (someone else now at the address) fails its TLS handshake, so no call goes out."""
    impostor_address, recorder = impostor
    server = await serve(FakeCalls(), tls_server(tls_files))
    try:
        trust = Trust(fast_config(token=ADMIN, tls_fingerprint=cert_fingerprint(tls_files.cert)))
        credentials = await trust.credentials_for(server.address)
        for address, works in ((server.address, True), (impostor_address, False)):
            async with grpc.aio.secure_channel(address, credentials) as channel:
                stub = pb_grpc.QueueStub(channel)  # type: ignore[misc]
                call = stub.Stats(pb.StatsRequest(), metadata=bearer_metadata(ADMIN), timeout=5)
                if works:
                    assert (await call).version == 1
                else:
                    with pytest.raises(grpc.aio.AioRpcError) as caught:
                        await call
                    assert caught.value.code() == grpc.StatusCode.UNAVAILABLE
        assert recorder.calls == []
    finally:
        await server.stop(0)


@pytest.mark.parametrize("listening", [True, False])
async def test_a_pinned_address_without_tls_is_unavailable_and_gets_no_token(
    memory_url: str, tls_files: CertFiles, listening: bool
) -> None:
    """A plaintext server (or none) where the pin expects TLS: the client cannot
    fetch a certificate, so it keeps looking (as for a broker that is down)."""
    fake = FakeCalls()
    server = await serve(fake, ServerConfig(listen="127.0.0.1:0"))
    if not listening:
        await server.stop(0)
    broker = await broker_naming(memory_url, server.address)
    try:
        config = fast_config(
            token=ADMIN, tls_fingerprint=cert_fingerprint(tls_files.cert), timeout_s=0.5
        )
        client = await connect(memory_url, config=config)  # not fatal at connect
        try:
            with pytest.raises(BrokerUnavailable) as caught:
                await client.stats()
            assert "cannot fetch its TLS certificate" in str(caught.value)
            assert client.connects == 0
        finally:
            await client.close()
        assert fake.entered == 0
    finally:
        await broker.stop()
        await server.stop(0)


# --------------------------------------------------------------------------- access levels


def leveled(**overrides: Any) -> ServerConfig:
    values: dict[str, Any] = {
        "listen": "127.0.0.1:0",
        "token": ADMIN,
        "write_token": WRITE,
        "read_token": READ,
    }
    values.update(overrides)
    return ServerConfig(**values)


async def test_a_read_token_may_call_stats_only_and_is_refused_before_decoding() -> None:
    fake = FakeCalls()
    server: RunningServer = await serve(fake, leveled())
    try:
        async with grpc.aio.insecure_channel(server.address) as channel:
            stub = pb_grpc.QueueStub(channel)  # type: ignore[misc]
            read = bearer_metadata(READ)
            assert (await stub.Stats(pb.StatsRequest(), metadata=read)).version == 1
            assert fake.entered == 1
            for name, request in (
                ("Push", pb.PushRequest(jobs=[pb.NewJob(id="a", queue="q")])),
                ("RetryDead", pb.DeadRequest()),
                ("Cancel", pb.CancelRequest(ids=["a"])),
                ("Result", pb.ResultRequest(id="a")),
            ):
                with pytest.raises(grpc.aio.AioRpcError) as caught:
                    await getattr(stub, name)(request, metadata=read)
                assert caught.value.code() == grpc.StatusCode.PERMISSION_DENIED
                details = caught.value.details() or ""
                assert name in details
                assert "read token" in details
            with pytest.raises(grpc.aio.AioRpcError) as caught:
                async for _ in stub.ClaimStream(
                    pb.ClaimRequest(worker="w", queues=["q"], max_jobs=1), metadata=read
                ):
                    pass
            assert caught.value.code() == grpc.StatusCode.PERMISSION_DENIED
            raw = channel.unary_unary("/osqueue.v1.Queue/Push")
            with pytest.raises(grpc.aio.AioRpcError) as caught:
                await raw(b"\x0a\xff\xff\xff\x7f", metadata=read)
            assert caught.value.code() == grpc.StatusCode.PERMISSION_DENIED
            assert fake.entered == 1  # nothing refused reached the client
    finally:
        await server.stop(0)


def admin_calls(q: RemoteClient) -> list[tuple[str, Callable[[], Awaitable[object]]]]:
    return [
        ("Cancel", lambda: q.cancel("01J00000000000000000000000")),
        ("RetryDead", lambda: q.retry_dead()),
        ("PurgeDead", lambda: q.purge_dead()),
    ]


async def test_each_token_gets_its_level_through_the_remote_client(memory_url: str) -> None:
    async with BrokerServer(memory_url, leveled(), quiet_broker_config()) as server:
        assert server.broker is not None
        async with connect(memory_url, config=fast_config(token=READ)) as reader:
            assert isinstance(reader, RemoteClient)
            assert (await reader.stats()).pushed == 0
            with pytest.raises(PermissionDenied) as caught:
                await reader.push(b"x")
            assert "Push" in str(caught.value)
            assert isinstance(caught.value, Unauthenticated)  # old handlers still catch it
            with pytest.raises(PermissionDenied) as caught:
                await reader.retry_dead()
            assert "RetryDead" in str(caught.value)
            with pytest.raises(PermissionDenied) as caught:
                await reader.claim("w")
            assert "Claim" in str(caught.value)
        assert server.broker.document.stats.pushed == 0

        async with connect(memory_url, config=fast_config(token=WRITE)) as writer:
            assert isinstance(writer, RemoteClient)
            await writer.push(b"a", queue="w")
            [job] = await writer.claim("w", ["w"])
            await writer.heartbeat(job)
            await writer.complete(job)
            assert (await writer.stats()).completed == 1
            for name, call in admin_calls(writer):
                with pytest.raises(PermissionDenied) as caught:
                    await call()
                assert name in str(caught.value)
                assert "admin token" in str(caught.value)


async def test_the_admin_token_may_call_every_rpc(memory_url: str) -> None:
    async with (
        BrokerServer(memory_url, leveled(), quiet_broker_config()),
        connect(memory_url, config=fast_config(token=ADMIN)) as q,
    ):
        assert isinstance(q, RemoteClient)
        await q.push(b"1", queue="a", max_attempts=1)  # Push
        [first] = await q.claim("w", ["a"])  # Claim
        await q.heartbeat(first)  # Heartbeat
        await q.fail(first, error="boom")  # Fail: dead after its one attempt
        assert (await q.stats()).dead == 1  # Stats
        assert await q.retry_dead() == 1  # RetryDead
        assert await q.purge_dead() == 0  # PurgeDead: allowed, nothing dead now
        await q.push(b"2", queue="a")
        streamed: list[Job] = []
        async for jobs in q.claim_stream("w", ["a"], max_jobs=2, wait_s=5):  # ClaimStream
            streamed += jobs
        assert len(streamed) == 2
        await q.release(streamed[0])  # Release
        await q.complete(streamed[1])  # Complete
        assert (await q.result(streamed[1].id)).status == "done"  # Result
        await q.cancel(streamed[0].id)  # Cancel
        stats = await q.stats()
        assert (stats.completed, stats.dead) == (1, 0)
        await q.schedule("beat", queue="a", every_s=60)  # Schedule
        assert [s.name for s in await q.schedules()] == ["beat"]  # ListSchedules
        assert await q.unschedule("beat")  # Unschedule
        assert (await q.set_queue("a", paused=True)).paused  # SetQueue
        with pytest.raises(InvalidInput, match="not set aside"):  # ReadmitSegment: let in
            await q.readmit_segment("segments/a/nothing-set-aside")
        called = {
            "Push", "Claim", "Heartbeat", "Fail", "Stats", "RetryDead", "PurgeDead",
            "ClaimStream", "Release", "Complete", "Cancel", "Result",
            "Schedule", "ListSchedules", "Unschedule", "SetQueue", "ReadmitSegment",
        }  # fmt: skip
        assert called == set(pb.DESCRIPTOR.services_by_name["Queue"].methods_by_name)


async def test_health_needs_no_token_whatever_the_levels() -> None:
    from grpc_health.v1 import health_pb2, health_pb2_grpc

    server = await serve(None, leveled())
    try:
        async with grpc.aio.insecure_channel(server.address) as channel:
            stub = health_pb2_grpc.HealthStub(channel)
            reply = await stub.Check(health_pb2.HealthCheckRequest(service=""), timeout=5)
            assert reply.status == health_pb2.HealthCheckResponse.SERVING
    finally:
        await server.stop(0)


def test_fingerprint_helpers_agree_with_ssl(tls_files: CertFiles) -> None:
    der = ssl.PEM_cert_to_DER_cert(Path(tls_files.cert).read_text())
    assert hashlib.sha256(der).hexdigest() == cert_fingerprint(tls_files.cert)
