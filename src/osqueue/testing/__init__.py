"""Test helpers that ship with osqueue: real object-store servers on loopback.

``MemoryStorage`` (``osqueue.storage``) is the in-process fake; the servers
here let the same code run against a real S3 API (moto) and Azure Blob API
(Azurite).
"""

from __future__ import annotations

from osqueue.testing.servers import AzuriteServer, MotoS3Server, ServerError, free_port

__all__ = ["AzuriteServer", "MotoS3Server", "ServerError", "free_port"]
