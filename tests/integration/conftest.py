"""Fixtures for remote mode: a broker and its gRPC server in this process, on port 0.

``queue_url`` runs each test over every storage backend (``backends.BACKENDS``:
memory, file, moto's S3 and Azurite);
``broker_server`` starts a :class:`~osqueue.server.BrokerServer` there (it
advertises its bound port in the queue document), and ``remote`` connects a
:class:`~osqueue.client.remote.RemoteClient` the way users do: by URL only.
"""

from __future__ import annotations

import uuid
from collections.abc import AsyncIterator, Iterator
from pathlib import Path

import pytest
from backends import BACKENDS, backend_url
from remote_helpers import CertFiles, fast_config, quiet_broker_config, self_signed

from osqueue.client.remote import RemoteClient, connect
from osqueue.server.runner import BrokerServer
from osqueue.server.server import ServerConfig
from osqueue.storage import MemoryStorage


@pytest.fixture(params=BACKENDS)
def queue_url(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[str]:
    with backend_url(request, request.param, tmp_path, "remote") as url:
        yield url


@pytest.fixture
def memory_url() -> Iterator[str]:
    name = f"remote-{uuid.uuid4().hex}"
    yield f"memory://{name}"
    MemoryStorage.drop(name)


@pytest.fixture
async def broker_server(queue_url: str) -> AsyncIterator[BrokerServer]:
    server = BrokerServer(queue_url, ServerConfig(listen="127.0.0.1:0"), quiet_broker_config())
    await server.start()
    try:
        yield server
    finally:
        await server.stop()


@pytest.fixture
async def remote(queue_url: str, broker_server: BrokerServer) -> AsyncIterator[RemoteClient]:
    client = await connect(queue_url, config=fast_config())
    assert isinstance(client, RemoteClient)
    try:
        yield client
    finally:
        await client.close()


@pytest.fixture(scope="session")
def tls_files(tmp_path_factory: pytest.TempPathFactory) -> CertFiles:
    """A self-signed certificate for 127.0.0.1/localhost, and an unrelated one."""
    directory = tmp_path_factory.mktemp("tls")
    cert, key = self_signed("osqueue test broker")
    other, other_key = self_signed("somebody else")
    (directory / "cert.pem").write_bytes(cert)
    (directory / "key.pem").write_bytes(key)
    (directory / "other.pem").write_bytes(other)
    (directory / "other-key.pem").write_bytes(other_key)
    return CertFiles(
        cert=str(directory / "cert.pem"),
        key=str(directory / "key.pem"),
        other_cert=str(directory / "other.pem"),
        other_key=str(directory / "other-key.pem"),
    )
