"""Helpers for the Spark tests: a broker served on its own loop thread, waiting on
conditions, and reading the archive with plain storage calls.

Spark calls block, and Spark's Python workers (where the ``osqueue`` data
source runs) are separate processes that reach the queue through its broker
over gRPC.  So brokers here run on their own event loop thread
(:class:`ServedBroker`), and tests talk to them with blocking calls.
"""

from __future__ import annotations

import json
import time
from collections.abc import Callable, Coroutine, Iterator
from contextlib import contextmanager
from typing import Any, TypeVar

from osqueue.broker import BrokerConfig
from osqueue.broker.inproc.client import LocalClient
from osqueue.client.loop_thread import LoopThread
from osqueue.server.runner import BrokerServer
from osqueue.server.server import ServerConfig
from osqueue.spark import blocking
from osqueue.spark.archive import ARCHIVE_PREFIX
from osqueue.state import StoredJob
from osqueue.storage import Storage

T = TypeVar("T")


class ServedBroker:
    """A broker and its gRPC server on a private event loop thread."""

    def __init__(self, url: str, config: BrokerConfig) -> None:
        self.url = url
        self.loop = LoopThread("test-broker")
        self.server = BrokerServer(url, ServerConfig(listen="127.0.0.1:0"), config)
        self.loop.run(self.server.start())
        assert self.server.broker is not None
        self.broker = self.server.broker
        self.client: LocalClient = self.broker.client()

    @property
    def address(self) -> str:
        assert self.server.address is not None
        return self.server.address

    def run(self, coro: Coroutine[Any, Any, T]) -> T:
        return self.loop.run(coro)

    def jobs(self) -> list[StoredJob]:
        """The document's jobs, copied on the broker's loop (it updates them in place)."""

        async def copy() -> list[StoredJob]:
            return list(self.broker.document.jobs.values())

        return self.run(copy())

    def close(self) -> None:
        try:
            self.loop.run(self.server.stop())
        finally:
            self.loop.close()


@contextmanager
def served_broker(url: str, **config: Any) -> Iterator[ServedBroker]:
    served = ServedBroker(url, BrokerConfig(**config))
    try:
        yield served
    finally:
        served.close()


def wait_until(predicate: Callable[[], bool], *, timeout_s: float, what: str) -> None:
    """Poll ``predicate`` (a condition on state another process or thread changes)."""
    deadline = time.monotonic() + timeout_s
    while not predicate():
        if time.monotonic() > deadline:
            raise TimeoutError(f"timed out after {timeout_s} s waiting for {what}")
        time.sleep(0.05)


def archive_records(url: str) -> list[dict[str, Any]]:
    """Every line of the queue's archive objects, read with plain storage calls."""

    async def read(store: Storage) -> list[dict[str, Any]]:
        out = []
        for key in await store.list(ARCHIVE_PREFIX):
            out.extend(json.loads(line) for line in (await store.get(key)).splitlines())
        return out

    return blocking.with_storage(url, read)


def archived_ids(url: str) -> list[str]:
    return [str(record["id"]) for record in archive_records(url)]


def archive_wait_s(config: BrokerConfig) -> float:
    """How long a serving broker may take to write the archive objects of the
    completions it has committed: it writes each right after its commit, and
    retries a failed write with backoff up to ``retry_cap_s``; a broker that
    cannot write to its store for a whole ``lease_s`` has lost the queue.
    Twice that, for a loaded machine."""
    return 2 * (config.lease_s + config.retry_cap_s)


def wait_archived(served: ServedBroker, count: int) -> None:
    """Wait until the archive objects hold ``count`` jobs (what a reader lists)."""
    wait_until(
        lambda: len(archived_ids(served.url)) >= count,
        timeout_s=archive_wait_s(served.broker.config),
        what=f"{count} archived",
    )
