"""Real object-store servers on loopback, for the tests (and one benchmark).

``MemoryStorage`` (``osqueue.storage``) is the in-process fake; the servers
here let the same code run against a real S3 API (moto), Azure Blob API
(Azurite), and a GCS XML-API shim with generation semantics.
"""

from __future__ import annotations

from servers.servers import (
    AzuriteServer,
    GcsShimServer,
    MotoS3Server,
    ServerError,
    free_port,
)

__all__ = ["AzuriteServer", "GcsShimServer", "MotoS3Server", "ServerError", "free_port"]
