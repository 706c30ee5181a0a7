"""Compare-and-set object storage: the port and its adapters (knows nothing of queues).

``from_url`` opens a store by URL; the adapters can also be built directly.
The errors every adapter raises are re-exported here for convenience.
"""

from __future__ import annotations

from osqueue.errors import (
    Conflict,
    InvalidInput,
    MissingExtra,
    NotFound,
    OutcomeUnknown,
    StorageError,
)
from osqueue.storage.cloud import CloudStorage
from osqueue.storage.faults import FaultConfig, FaultyStorage
from osqueue.storage.file import FileStorage
from osqueue.storage.memory import MemoryStorage
from osqueue.storage.port import Blob, Capabilities, Storage
from osqueue.storage.url import from_url

__all__ = [
    "Blob",
    "Capabilities",
    "CloudStorage",
    "Conflict",
    "FaultConfig",
    "FaultyStorage",
    "FileStorage",
    "InvalidInput",
    "MemoryStorage",
    "MissingExtra",
    "NotFound",
    "OutcomeUnknown",
    "Storage",
    "StorageError",
    "from_url",
]
