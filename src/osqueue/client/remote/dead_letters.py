"""The remote client's dead-letter calls: ``retry_dead`` and ``purge_dead``.

:class:`DeadLetterRpcs` is the part of :class:`~osqueue.client.remote.RemoteClient`
that sends them: one unary RPC each, retried like every call (the broker
needs an admin token for both).
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Sequence
from typing import Any, TypeVar

from osqueue.client.remote.connection import Conn
from osqueue.client.remote.failover import Failover
from osqueue.client.remote.requests import dead_request
from osqueue.wire._pb import queue_pb2_grpc as pb_grpc

R = TypeVar("R")
Metadata = tuple[tuple[str, str], ...] | None


class DeadLetterRpcs:
    """``retry_dead`` and ``purge_dead`` over gRPC; the client supplies the rest."""

    failover: Failover
    _metadata: Metadata
    _unary: Callable[[Callable[[Conn, float], Awaitable[R]]], Awaitable[R]]

    async def retry_dead(self, ids: Sequence[str] | None = None) -> int:
        """Put dead jobs back in their queues (all of them when ``ids`` is None)."""
        return await self._dead_rpc(lambda stub: stub.RetryDead, ids)

    async def purge_dead(self, ids: Sequence[str] | None = None) -> int:
        """Delete dead jobs (all of them when ``ids`` is None)."""
        return await self._dead_rpc(lambda stub: stub.PurgeDead, ids)

    async def _dead_rpc(
        self, pick: Callable[[pb_grpc.QueueAsyncStub], Any], ids: Sequence[str] | None
    ) -> int:
        """One dead-letter RPC (``pick`` chooses the stub method), retried like every call."""
        request = dead_request(ids)

        async def attempt(conn: Conn, deadline: float) -> int:
            response = await pick(conn.stub)(
                request, timeout=self.failover.attempt_timeout(deadline), metadata=self._metadata
            )
            return int(response.count)

        return await self._unary(attempt)
