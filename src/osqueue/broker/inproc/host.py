"""What the in-process client needs of its broker.

:class:`~osqueue.broker.core.broker.Broker` is the one host; the client names
this protocol rather than the class, so the broker's facade can make its own
client (``Broker.client()``) without the two importing each other.
"""

from __future__ import annotations

import asyncio
from collections.abc import Sequence
from typing import Protocol

from osqueue.broker.cold.manager import SegmentManager
from osqueue.broker.config import BrokerConfig
from osqueue.broker.objects.payloads import Payloads
from osqueue.broker.objects.results import ResultObjects
from osqueue.clock import Clock
from osqueue.state import ClaimOp, Document, Op, Result
from osqueue.state.results import Answer


class BrokerHost(Protocol):
    """The broker as its in-process client sees it."""

    config: BrokerConfig
    clock: Clock
    payloads: Payloads
    results: ResultObjects
    segments: SegmentManager

    @property
    def document(self) -> Document: ...

    def add_op(self, op: Op) -> asyncio.Future[Result]: ...

    async def submit_many(self, ops: Sequence[Op]) -> list[Result]: ...

    async def claim(self, op: ClaimOp, wait_s: float) -> Result: ...

    async def finished(self, job_id: str, wait_s: float) -> Answer | None: ...

    def heard(self, worker: str, queues: tuple[str, ...]) -> None: ...
