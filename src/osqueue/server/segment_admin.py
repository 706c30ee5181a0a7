"""The segment RPC of ``osqueue.v1.Queue``: ReadmitSegment.

:class:`SegmentRpcs` is the part of :class:`~osqueue.server.service.QueueService`
that serves it (admin token only: :mod:`osqueue.wire.auth`).  A client without
segment administration answers ``UNIMPLEMENTED``.
"""

from __future__ import annotations

from typing import Any, Protocol, runtime_checkable

import grpc

from osqueue.api import QueueClient
from osqueue.errors import InvalidInput
from osqueue.server.limits import RequestChecker
from osqueue.storage.keys import check_key
from osqueue.wire._pb import queue_pb2 as pb

Context = Any  # grpc.aio.ServicerContext (grpc ships no type stubs)


@runtime_checkable
class SegmentAdmin(Protocol):
    async def readmit_segment(self, key: str) -> int: ...


class SegmentRpcs:
    """The segment handler; the service supplies ``_client`` and ``check``."""

    check: RequestChecker
    _client: QueueClient | None

    async def readmit_segment(
        self, request: pb.ReadmitSegmentRequest, context: Context
    ) -> pb.CountResponse:
        if not request.key:
            raise InvalidInput("name the segment object's key", field="key")
        key = check_key(request.key, "key")
        if not isinstance(self._client, SegmentAdmin):
            await context.abort(
                grpc.StatusCode.UNIMPLEMENTED, "this broker's client has no segment administration"
            )
            raise AssertionError("context.abort returned")  # pragma: no cover
        return pb.CountResponse(count=await self._client.readmit_segment(key))
