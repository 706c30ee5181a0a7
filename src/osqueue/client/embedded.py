"""An in-process broker started by the client itself: ``connect(url, embedded=True)``.

When no live broker holds the queue's lease, the client starts one in this
process and talks to it directly (no gRPC).  The broker advertises no address
unless its config gives one, so other processes cannot reach it; this is for
single-process use: scripts, tests, notebooks.
"""

from __future__ import annotations

import logging
import time
from types import TracebackType
from typing import TYPE_CHECKING

from osqueue.broker.local import LocalClient
from osqueue.client.discovery import Discovery
from osqueue.storage.port import Storage

if TYPE_CHECKING:
    from osqueue.broker import Broker, BrokerConfig

log = logging.getLogger(__name__)


class EmbeddedClient(LocalClient):
    """``broker.client()`` of a broker this client started; ``close()`` stops the broker."""

    def __init__(self, broker: Broker, *, owns_storage: bool = True) -> None:
        super().__init__(broker)
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
            await self.broker.stop()
        finally:
            if self._owns_storage:
                await self.broker.storage.close()


async def start_embedded(
    storage: Storage, config: BrokerConfig | None = None
) -> EmbeddedClient | None:
    """Start a broker here if no live broker holds the lease; None if one does."""
    from osqueue.broker import Broker

    location = await Discovery(storage).locate()
    if location is not None and location.live(time.time()):
        log.info(
            "a live broker holds the queue; not starting an embedded one",
            extra={"action": "embedded_skip", "broker": location.broker_id},
        )
        return None
    broker = Broker(storage, config)
    await broker.start()
    log.info("started an embedded broker", extra={"action": "embedded_start", "broker": broker.id})
    return EmbeddedClient(broker)
