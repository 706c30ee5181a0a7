"""Bearer tokens on every call, TLS with a generated certificate, and safe listening."""

from __future__ import annotations

from pathlib import Path

import grpc
import pytest
from remote_helpers import CertFiles, FakeCalls, fast_config

from osqueue.client.remote import RemoteClient, connect
from osqueue.errors import BrokerUnavailable, InvalidInput, Unauthenticated
from osqueue.server.runner import BrokerServer
from osqueue.server.server import ServerConfig, serve
from osqueue.storage import MemoryStorage
from osqueue.wire._pb import queue_pb2 as pb
from osqueue.wire._pb import queue_pb2_grpc as pb_grpc
from osqueue.wire.auth import bearer_metadata

TOKEN = "s3cret-token_42"


async def test_calls_without_the_right_token_are_refused_before_decoding() -> None:
    fake = FakeCalls()
    server = await serve(fake, ServerConfig(listen="127.0.0.1:0", token=TOKEN))
    try:
        async with grpc.aio.insecure_channel(server.address) as channel:
            stub = pb_grpc.QueueStub(channel)  # type: ignore[misc]
            for metadata in (None, bearer_metadata("wrong"), (("authorization", TOKEN),)):
                with pytest.raises(grpc.aio.AioRpcError) as caught:
                    await stub.Push(
                        pb.PushRequest(jobs=[pb.NewJob(id="a", queue="q")]), metadata=metadata
                    )
                assert caught.value.code() == grpc.StatusCode.UNAUTHENTICATED
                with pytest.raises(grpc.aio.AioRpcError) as caught:
                    async for _ in stub.ClaimStream(
                        pb.ClaimRequest(worker="w", queues=["q"], max_jobs=1), metadata=metadata
                    ):
                        pass
                assert caught.value.code() == grpc.StatusCode.UNAUTHENTICATED
            # Garbage from an unauthenticated caller is not even parsed.
            raw = channel.unary_unary("/osqueue.v1.Queue/Push")
            with pytest.raises(grpc.aio.AioRpcError) as caught:
                await raw(b"\x0a\xff\xff\xff\x7f")
            assert caught.value.code() == grpc.StatusCode.UNAUTHENTICATED
            assert fake.entered == 0
            stats = await stub.Stats(pb.StatsRequest(), metadata=bearer_metadata(TOKEN))
            assert stats.version == 1
            assert fake.entered == 1
    finally:
        await server.stop(0)


@pytest.mark.parametrize("token", [None, "wrong-token"])
async def test_remote_client_with_a_missing_or_wrong_token_raises(
    memory_url: str, token: str | None
) -> None:
    async with BrokerServer(memory_url, ServerConfig(listen="127.0.0.1:0", token=TOKEN)) as server:
        client = await connect(memory_url, token=token, config=fast_config())
        try:
            with pytest.raises(Unauthenticated):
                await client.push(b"x")
            with pytest.raises(Unauthenticated):
                await client.stats()
        finally:
            await client.close()
        assert server.broker is not None
        assert server.broker.document.stats.pushed == 0


async def test_token_from_a_file(memory_url: str, tmp_path: Path) -> None:
    token_file = tmp_path / "token"
    token_file.write_text(TOKEN + "\n")
    async with (
        BrokerServer(memory_url, ServerConfig(listen="127.0.0.1:0", token_file=str(token_file))),
        connect(memory_url, token=TOKEN, config=fast_config()) as client,
    ):
        await client.push(b"x")
        assert (await client.stats()).pushed == 1


async def test_token_settings_are_checked(tmp_path: Path) -> None:
    with pytest.raises(InvalidInput) as caught:
        await serve(None, ServerConfig(listen="127.0.0.1:0", token="a", token_file="b"))
    assert caught.value.field == "token_file"
    with pytest.raises(InvalidInput) as caught:
        await serve(None, ServerConfig(listen="127.0.0.1:0", token="has space"))
    assert caught.value.field == "token"
    empty = tmp_path / "empty"
    empty.write_text("\n")
    with pytest.raises(InvalidInput) as caught:
        await serve(None, ServerConfig(listen="127.0.0.1:0", token_file=str(empty)))
    assert caught.value.field == "token_file"


async def test_non_loopback_listen_needs_a_token_or_insecure() -> None:
    with pytest.raises(InvalidInput) as caught:
        await serve(None, ServerConfig(listen="0.0.0.0:0"))
    assert caught.value.field == "token"
    assert "insecure" in str(caught.value)
    for config in (
        ServerConfig(listen="0.0.0.0:0", insecure=True),
        ServerConfig(listen="0.0.0.0:0", token=TOKEN),
    ):
        server = await serve(None, config)
        assert server.port > 0
        await server.stop(0)


async def test_tls_with_a_generated_certificate(memory_url: str, tls_files: CertFiles) -> None:
    async with BrokerServer(
        memory_url,
        ServerConfig(
            listen="127.0.0.1:0",
            tls_cert=tls_files.cert,
            tls_key=tls_files.key,
            token=TOKEN,
        ),
    ) as server:
        async with connect(
            memory_url, token=TOKEN, tls_ca=tls_files.cert, config=fast_config()
        ) as q:
            await q.push(b"over tls")
            [job] = await q.claim("w")
            assert job.payload == b"over tls"
            assert (await q.stats()).broker_address == server.address
        # A client that does not speak TLS, or trusts another CA, never gets through.
        for config in (
            fast_config(timeout_s=1.0),
            fast_config(timeout_s=1.0, tls_ca=tls_files.other_cert),
        ):
            client = RemoteClient(MemoryStorage(memory_url.removeprefix("memory://")), config)
            try:
                with pytest.raises(BrokerUnavailable):
                    await client.stats()
            finally:
                await client.close()


async def test_tls_needs_both_files(tls_files: CertFiles) -> None:
    with pytest.raises(InvalidInput) as caught:
        await serve(None, ServerConfig(listen="127.0.0.1:0", tls_cert=tls_files.cert))
    assert caught.value.field == "tls_key"
    with pytest.raises(InvalidInput) as caught:
        await serve(
            None,
            ServerConfig(listen="127.0.0.1:0", tls_cert="/nonexistent.pem", tls_key=tls_files.key),
        )
    assert caught.value.field == "tls_cert"
