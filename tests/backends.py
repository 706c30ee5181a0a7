"""The storage backends the storage-facing suites run on, one fresh store per test.

``memory`` (in-process), ``file`` (a temporary directory), ``s3`` (moto's S3
server, single-threaded) and ``azure`` (Azurite), plus ``gcs`` (the GCS XML-API
shim of :mod:`servers.gcs_shim`) where a suite asks for it.  The
servers are the session fixtures of ``tests/conftest.py``; a suite that never
asks for a cloud backend never starts them.  A backend that cannot do
something says so through its ``Capabilities``; tests assert what the flag
implies and never skip.
"""

from __future__ import annotations

import uuid
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import pytest

from osqueue.storage import MemoryStorage
from osqueue.storage.port import Blob, Capabilities, Storage

#: The four backends every broker and storage suite runs on.
BACKENDS = ("memory", "file", "s3", "azure")
#: The same, with the GCS shim (the storage contract runs on it too).
BACKENDS_WITH_GCS = (*BACKENDS, "gcs")


@contextmanager
def backend_url(
    request: pytest.FixtureRequest, name: str, tmp_path: Path, label: str
) -> Iterator[str]:
    """A URL for a fresh, empty queue prefix on backend ``name``; memory stores are freed after."""
    unique = uuid.uuid4().hex[:12]
    if name == "memory":
        memory_name = f"{label}-{unique}"
        try:
            yield f"memory://{memory_name}"
        finally:
            MemoryStorage.drop(memory_name)
        return
    if name == "file":
        directory = tmp_path / f"{label} store {unique}"
        directory.mkdir()
        yield directory.as_uri()
        return
    fixture = {"s3": "moto_server", "azure": "azurite_server", "gcs": "gcs_shim"}.get(name)
    if fixture is None:
        raise ValueError(f"unknown backend {name!r}")
    yield request.getfixturevalue(fixture).url(f"{label}/{unique}")


class Wrapped:
    """A storage that passes every call to ``inner``: test wrappers subclass it and
    override only the calls they watch or hold back."""

    def __init__(self, inner: Storage) -> None:
        self.inner = inner

    @property
    def url(self) -> str:
        return self.inner.url

    @property
    def capabilities(self) -> Capabilities:
        return self.inner.capabilities

    async def read(self, key: str) -> Blob:
        return await self.inner.read(key)

    async def write(self, key: str, data: bytes, *, if_match: str | None) -> str:
        return await self.inner.write(key, data, if_match=if_match)

    async def put(self, key: str, data: bytes) -> None:
        await self.inner.put(key, data)

    async def get(self, key: str) -> bytes:
        return await self.inner.get(key)

    async def delete(self, key: str) -> None:
        await self.inner.delete(key)

    async def list(self, prefix: str = "") -> list[str]:
        return await self.inner.list(prefix)

    async def close(self) -> None:
        await self.inner.close()


class Counting(Wrapped):
    """A storage wrapper that records the keys read with ``get``."""

    def __init__(self, inner: Storage) -> None:
        super().__init__(inner)
        self.gets: list[str] = []

    async def get(self, key: str) -> bytes:
        self.gets.append(key)
        return await self.inner.get(key)
