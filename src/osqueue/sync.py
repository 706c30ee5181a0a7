"""Blocking twins of the async clients, for scripts and Spark executors.

    import osqueue.sync
    with osqueue.sync.connect("s3://bucket/q") as q:          # the live broker, over gRPC
        q.push(b"payload")
    with osqueue.sync.connect("file:///tmp/q", embedded=True) as q:  # or one in this process
        jobs = q.claim("w1", max_jobs=10)

Every call runs on one private event loop thread, so concurrent calls from many
threads still share one connection and coalesce into batches.  The twin is
derived from the async clients' protocol (see :mod:`osqueue.client.sync`).
"""

from __future__ import annotations

from osqueue.client.sync import SyncClient
from osqueue.client.sync import connect_sync as connect

__all__ = ["SyncClient", "connect"]
