"""The dead-letter RPCs of ``osqueue.v1.Queue``: RetryDead and PurgeDead.

:class:`DeadLetterRpcs` is the part of :class:`~osqueue.server.service.QueueService`
that serves them (admin token only: :mod:`osqueue.server.auth`).  A client
without dead-letter administration answers ``UNIMPLEMENTED``.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any, Protocol, runtime_checkable

import grpc

from osqueue.api import QueueClient
from osqueue.server.limits import RequestChecker
from osqueue.wire._pb import queue_pb2 as pb

Context = Any  # grpc.aio.ServicerContext (grpc ships no type stubs)


@runtime_checkable
class DeadAdmin(Protocol):
    async def retry_dead(self, ids: Sequence[str] | None = None) -> int: ...

    async def purge_dead(self, ids: Sequence[str] | None = None) -> int: ...


class DeadLetterRpcs:
    """The dead-letter handlers; the service supplies ``_client`` and ``check``."""

    check: RequestChecker
    _client: QueueClient | None

    async def _dead_admin(self, context: Context) -> DeadAdmin:
        if isinstance(self._client, DeadAdmin):
            return self._client
        await context.abort(
            grpc.StatusCode.UNIMPLEMENTED, "this broker's client has no dead-letter administration"
        )
        raise AssertionError("context.abort returned")  # pragma: no cover

    async def retry_dead(self, request: pb.DeadRequest, context: Context) -> pb.CountResponse:
        ids = self.check.dead(request)
        admin = await self._dead_admin(context)
        return pb.CountResponse(count=await admin.retry_dead(ids))

    async def purge_dead(self, request: pb.DeadRequest, context: Context) -> pb.CountResponse:
        ids = self.check.dead(request)
        admin = await self._dead_admin(context)
        return pb.CountResponse(count=await admin.purge_dead(ids))
