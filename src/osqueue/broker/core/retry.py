"""How the broker waits after a storage error before it tries again."""

from __future__ import annotations

import logging

from osqueue.backoff import Backoff
from osqueue.broker.config import BrokerConfig
from osqueue.clock import Clock

log = logging.getLogger(__name__)


class StorageRetry:
    """The wait before the next try of a failed storage call (a document read or
    write, an archive write): ``retry_base_s * 2 ** attempt``, at most
    ``retry_cap_s``, on the broker's clock, with a warning in the log."""

    def __init__(self, config: BrokerConfig, clock: Clock) -> None:
        self._backoff = Backoff(config.retry_base_s, config.retry_cap_s)
        self._clock = clock

    async def wait(self, attempt: int, exc: BaseException) -> None:
        """Sleep before retry number ``attempt + 1`` of a call that failed with ``exc``."""
        delay = self._backoff.delay_s(attempt)
        log.warning(
            "storage error; retrying in %.2fs: %s",
            delay,
            exc,
            extra={"action": "retry", "attempt": attempt},
        )
        await self._clock.sleep(delay)
