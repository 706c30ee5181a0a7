"""The standard gRPC health service (``grpc.health.v1.Health``) of a broker's server.

Probes (load balancers, ``grpc_health_probe``, Kubernetes' gRPC probes) ask
without a token.  The overall status (service ``""``) is ``SERVING`` while the
server runs; ``osqueue.v1.Queue`` is ``SERVING`` only while a broker is
attached and not draining, so it tells the active broker from a standby.

Unlike the reference servicer, a ``Watch`` stream ends once the server stops
(after telling ``NOT_SERVING``), so an open watch never holds a shutdown for
the whole grace period.
"""

from __future__ import annotations

import asyncio
from typing import Any

import grpc
from grpc_health.v1 import health_pb2, health_pb2_grpc

#: The health service name of the queue (the proto's full service name).
QUEUE_SERVICE = "osqueue.v1.Queue"
SERVING: int = health_pb2.HealthCheckResponse.SERVING
NOT_SERVING: int = health_pb2.HealthCheckResponse.NOT_SERVING
_UNKNOWN: int = health_pb2.HealthCheckResponse.SERVICE_UNKNOWN


class HealthService(health_pb2_grpc.HealthServicer):  # type: ignore[misc]
    def __init__(self, queue_serving: bool) -> None:
        self._status: dict[str, int] = {
            "": SERVING,
            QUEUE_SERVICE: SERVING if queue_serving else NOT_SERVING,
        }
        self._changed = asyncio.Event()
        self._closed = False

    def set_queue_serving(self, serving: bool) -> None:
        self._set(QUEUE_SERVICE, SERVING if serving else NOT_SERVING)

    def close(self) -> None:
        """Everything ``NOT_SERVING`` for good; open watches end after saying so."""
        for service in self._status:
            self._set(service, NOT_SERVING)
        self._closed = True
        self._notify()

    def _set(self, service: str, status: int) -> None:
        if self._closed or self._status.get(service) == status:
            return
        self._status[service] = status
        self._notify()

    def _notify(self) -> None:
        changed, self._changed = self._changed, asyncio.Event()
        changed.set()

    async def Check(self, request: Any, context: Any) -> Any:
        status = self._status.get(request.service)
        if status is None:
            await context.abort(grpc.StatusCode.NOT_FOUND, f"no service {request.service!r}")
        return health_pb2.HealthCheckResponse(status=status)

    async def Watch(self, request: Any, context: Any) -> None:
        last: int | None = None
        while True:
            changed = self._changed  # taken before writing: a change meanwhile sets it
            status = self._status.get(request.service, _UNKNOWN)
            if status != last:
                await context.write(health_pb2.HealthCheckResponse(status=status))
                last = status
            if self._closed:
                return
            await changed.wait()


def add_health(server: Any, queue_serving: bool) -> HealthService:
    """Register a :class:`HealthService` on a ``grpc.aio`` server (before it starts)."""
    health = HealthService(queue_serving)
    health_pb2_grpc.add_HealthServicer_to_server(health, server)
    return health
