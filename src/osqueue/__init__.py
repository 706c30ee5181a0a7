"""osqueue: a durable job queue whose whole state is one JSON document on object storage.

Public names::

    import osqueue
    async with osqueue.Broker("file:///var/lib/q") as broker:
        q = broker.client()
        await q.push(b"payload")
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from osqueue.api import EncodedResult, Job, JobResult, NewJob, QueueClient, QueueStats, Stats
from osqueue.broker import Broker, BrokerConfig
from osqueue.broker.inproc.client import LocalClient
from osqueue.errors import (
    BrokerUnavailable,
    Conflict,
    CorruptDocument,
    DocumentGone,
    DuplicateKey,
    InvalidInput,
    JobNotFound,
    LeaseLost,
    MaybeCommitted,
    NotBroker,
    NotFound,
    OsqueueError,
    PermissionDenied,
    QueueFull,
    ResourceExhausted,
    ShuttingDown,
    StorageError,
    Unauthenticated,
    UntrustedBroker,
)
from osqueue.ids import new_id

if TYPE_CHECKING:
    from osqueue.client.connect import connect as connect

__version__ = "0.1.0"

_LAZY = {
    "connect": ("osqueue.client.connect", "connect"),
    "Worker": ("osqueue.client.worker", "Worker"),
    "Retry": ("osqueue.client.worker", "Retry"),
    "batch": ("osqueue.client.worker", "batch"),
    "current_context": ("osqueue.client.worker", "current_context"),
    "current_job_lost": ("osqueue.client.worker", "current_job_lost"),
    "JobContext": ("osqueue.client.worker", "JobContext"),
    "TypedQueue": ("osqueue.client.typed", "TypedQueue"),
}


def __getattr__(name: str) -> Any:
    """Import the heavier parts (gRPC client, worker) on first use."""
    if name in _LAZY:
        import importlib

        module, attr = _LAZY[name]
        return getattr(importlib.import_module(module), attr)
    raise AttributeError(f"module 'osqueue' has no attribute {name!r}")


__all__ = [
    "Broker",
    "BrokerConfig",
    "BrokerUnavailable",
    "Conflict",
    "CorruptDocument",
    "DocumentGone",
    "DuplicateKey",
    "EncodedResult",
    "InvalidInput",
    "Job",
    "JobNotFound",
    "JobResult",
    "LeaseLost",
    "LocalClient",
    "MaybeCommitted",
    "NewJob",
    "NotBroker",
    "NotFound",
    "OsqueueError",
    "PermissionDenied",
    "QueueClient",
    "QueueFull",
    "QueueStats",
    "ResourceExhausted",
    "ShuttingDown",
    "Stats",
    "StorageError",
    "Unauthenticated",
    "UntrustedBroker",
    "new_id",
]
