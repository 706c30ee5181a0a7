"""The four storage backends a test can run on, each as a fresh, empty store.

``memory`` (a named in-process store), ``file`` (a temporary directory), ``s3``
(moto's server, single-threaded) and ``azure`` (Azurite); the last two come
from the session fixtures in ``tests/conftest.py`` and start the first time a
test asks for them.  A module parametrises a fixture over :data:`BACKENDS` and
calls :func:`backend_url`::

    @pytest.fixture(params=BACKENDS)
    def url(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[str]:
        yield from backend_url(request, tmp_path, "segments")
"""

from __future__ import annotations

import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest

from osqueue.storage import MemoryStorage

BACKENDS = ["memory", "file", "s3", "azure"]


def backend_url(request: pytest.FixtureRequest, tmp_path: Path, prefix: str) -> Iterator[str]:
    """Yield the URL of a fresh store on ``request.param``'s backend (and drop a
    memory store afterwards)."""
    name: str = request.param
    unique = f"{prefix}-{uuid.uuid4().hex[:12]}"
    if name == "memory":
        yield f"memory://{unique}"
        MemoryStorage.drop(unique)
    elif name == "file":
        directory = tmp_path / unique
        directory.mkdir()
        yield directory.as_uri()
    elif name == "s3":
        yield request.getfixturevalue("moto_server").url(f"{prefix}/{unique}")
    elif name == "azure":
        yield request.getfixturevalue("azurite_server").url(f"{prefix}/{unique}")
    else:
        raise ValueError(f"no backend {name!r}")
