"""The storage backends the storage-facing suites run on, one fresh store per test.

``memory`` (in-process), ``file`` (a temporary directory), ``s3`` (moto's S3
server, single-threaded) and ``azure`` (Azurite), plus ``gcs`` (the GCS XML-API
shim of :mod:`osqueue.testing.gcs_shim`) where a suite asks for it.  The
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
