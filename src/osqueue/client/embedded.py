"""An in-process broker started by the client itself: ``connect(url, embedded=True)``.

When no live broker holds the queue's lease, the client starts one in this
process and talks to it directly (no gRPC).  The broker advertises no address
unless its config gives one, so other processes cannot reach it; this is for
single-process use: scripts, tests, notebooks.

Whether a broker is live is judged as a standby judges it
(:mod:`osqueue.broker.lease.watch`), never by ``lease_until``: no document, no
owner or a released lease (a graceful stop) start a broker at once; otherwise
the client watches the document until a new version shows the owner alive (then
it is used), or until it has seen none for the lease's length and the margin
(then a broker starts here).
"""

from __future__ import annotations

import logging
from types import TracebackType
from typing import TYPE_CHECKING

from osqueue.broker.config import BrokerConfig
from osqueue.broker.inproc.client import LocalClient
from osqueue.broker.lease.watch import LeaseWatch
from osqueue.client.discovery import Discovery
from osqueue.clock import Clock, SystemClock
from osqueue.storage.port import Storage

if TYPE_CHECKING:
    from osqueue.broker import Broker

log = logging.getLogger(__name__)


class EmbeddedClient(LocalClient):
    """``broker.client()`` of a broker this client started; ``close()`` stops the broker."""

    def __init__(self, broker: Broker, *, owns_storage: bool = True) -> None:
        super().__init__(broker)
        self._broker = broker  # the whole broker: this client stops it
        self._owns_storage = owns_storage
        self._closed = False

    async def __aenter__(self) -> EmbeddedClient:
        return self

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        await self.close()

    async def close(self) -> None:
        """Stop the broker (it flushes and releases its lease), then close the store."""
        if self._closed:
            return
        self._closed = True
        try:
            await self._broker.stop()
        finally:
            if self._owns_storage:
                await self._broker.storage.close()


async def start_embedded(
    storage: Storage, config: BrokerConfig | None = None, *, clock: Clock | None = None
) -> EmbeddedClient | None:
    """Start a broker here if no live broker holds the lease; None if one does."""
    from osqueue.broker import Broker

    config = config or BrokerConfig()
    clock = clock or SystemClock()
    if await _live_owner(Discovery(storage), config, clock):
        return None
    broker = Broker(storage, config, clock=clock)
    await broker.start()
    log.info("started an embedded broker", extra={"action": "embedded_start", "broker": broker.id})
    return EmbeddedClient(broker)


async def _live_owner(discovery: Discovery, config: BrokerConfig, clock: Clock) -> bool:
    """Watch the document until its owner shows itself alive (a new version: True)
    or its lease runs out (False), as a standby would judge it."""
    watch = LeaseWatch(config.clock_skew_margin_s)
    first: int | None = None
    while True:
        found = await discovery.read_owner()
        if found is None:
            return False
        version, owner = found
        left = watch.see(version, owner, clock.monotonic(), clock.now())
        if not left or owner is None:
            return False
        if first is None:
            first = version
        elif version != first:
            log.info(
                "a live broker holds the queue; not starting an embedded one",
                extra={"action": "embedded_skip", "broker": owner.id},
            )
            return True
        # An idle owner writes every third of its lease: look a few times per third.
        await clock.sleep(min(left, owner.lease_s / 8))
