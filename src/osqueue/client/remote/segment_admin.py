"""The remote client's segment call: ``readmit_segment``.

:class:`SegmentRpcs` is the part of :class:`~osqueue.client.remote.RemoteClient`
that sends it: one unary RPC, retried like every call (the broker needs an
admin token).
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import TypeVar

from osqueue.client.remote.connection import Conn
from osqueue.client.remote.failover import Failover
from osqueue.wire._pb import queue_pb2 as pb

R = TypeVar("R")
Metadata = tuple[tuple[str, str], ...] | None


class SegmentRpcs:
    """``readmit_segment`` over gRPC; the client supplies the rest."""

    failover: Failover
    _metadata: Metadata
    _unary: Callable[[Callable[[Conn, float], Awaitable[R]]], Awaitable[R]]

    async def readmit_segment(self, key: str) -> int:
        """Put the set-aside segment ``key`` back once its object is restored (the
        broker checks it first); returns the jobs readmitted."""
        request = pb.ReadmitSegmentRequest(key=key)

        async def attempt(conn: Conn, deadline: float) -> int:
            response = await conn.stub.ReadmitSegment(
                request, timeout=self.failover.attempt_timeout(deadline), metadata=self._metadata
            )
            return int(response.count)

        return await self._unary(attempt)
