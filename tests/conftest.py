"""Session-wide fixtures: the real object-store servers, started once and stopped at the end.

They start lazily, the first time a test asks for them (through
``backends.backend_url`` or by name), so a run that needs none
(``pytest tests/unit/test_state.py``) never launches them.
"""

from __future__ import annotations

from collections.abc import Iterator

import pytest
from servers import AzuriteServer, GcsShimServer, MotoS3Server


@pytest.fixture(scope="session")
def moto_server() -> Iterator[MotoS3Server]:
    """moto's S3 API (single-threaded) with the bucket ``osqueue-test``."""
    with MotoS3Server() as server:
        yield server


@pytest.fixture(scope="session")
def azurite_server() -> Iterator[AzuriteServer]:
    """Azurite's Blob API with the container ``osqueue-test``."""
    with AzuriteServer() as server:
        yield server


@pytest.fixture(scope="session")
def gcs_shim() -> Iterator[GcsShimServer]:
    """The GCS XML-API shim (generation preconditions) with the bucket ``osqueue-test``."""
    with GcsShimServer() as server:
        yield server
