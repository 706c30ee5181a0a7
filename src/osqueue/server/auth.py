"""Bearer-token authentication for the gRPC server.

Every call must carry ``authorization: Bearer <token>`` in its metadata; the
:class:`BearerTokenInterceptor` compares it in constant time and refuses
anything else with ``UNAUTHENTICATED`` before the request is even decoded.
"""

from __future__ import annotations

import hmac
import logging
from collections.abc import AsyncIterator, Awaitable, Callable
from typing import Any

import grpc

from osqueue.errors import Unauthenticated
from osqueue.wire.auth import HEALTH_METHODS, METADATA_KEY, SCHEME, check_token
from osqueue.wire.status import to_status, trailers

log = logging.getLogger(__name__)

Handler = Any  # grpc.RpcMethodHandler (grpc ships no type stubs)
Continuation = Callable[[Any], Awaitable[Handler]]


class BearerTokenInterceptor(grpc.aio.ServerInterceptor):  # type: ignore[misc]
    """Refuse every call whose bearer token is missing or wrong."""

    def __init__(self, token: str) -> None:
        self._expected = (SCHEME + check_token(token)).encode("ascii")

    def _verdict(self, metadata: Any) -> str | None:
        """None when the call is authenticated, else why not."""
        presented = [v for k, v in (metadata or ()) if k == METADATA_KEY]
        if not presented:
            return "no bearer token: pass token= (or set OSQUEUE_TOKEN)"
        value = presented[0]
        given = value.encode("utf-8", "replace") if isinstance(value, str) else bytes(value)
        # compare_digest runs in time independent of where the bytes differ.
        if len(presented) == 1 and hmac.compare_digest(given, self._expected):
            return None
        return "the bearer token is wrong"

    async def intercept_service(self, continuation: Continuation, details: Any) -> Handler:
        if details.method.startswith(HEALTH_METHODS):  # probes carry no token
            return await continuation(details)
        why = self._verdict(details.invocation_metadata)
        handler = await continuation(details)
        if why is None or handler is None:
            return handler
        log.info(
            "refused an unauthenticated call",
            extra={"action": "auth_refused", "method": details.method, "why": why},
        )
        return _refusing(handler, why)


def _refusing(handler: Handler, why: str) -> Handler:
    """A handler of the same kind as ``handler`` that aborts with UNAUTHENTICATED."""
    status = to_status(Unauthenticated(why))

    async def abort(context: Any) -> None:
        await context.abort(grpc.StatusCode.UNAUTHENTICATED, status.message, trailers(status))

    async def unary(request: object, context: Any) -> None:
        await abort(context)

    async def streaming(request: object, context: Any) -> AsyncIterator[bytes]:
        await abort(context)
        yield b""  # pragma: no cover (abort raises)

    # No deserializer: a refused request is never decoded.
    if handler.unary_unary is not None:
        return grpc.unary_unary_rpc_method_handler(unary)
    if handler.unary_stream is not None:
        return grpc.unary_stream_rpc_method_handler(streaming)
    if handler.stream_unary is not None:
        return grpc.stream_unary_rpc_method_handler(unary)
    return grpc.stream_stream_rpc_method_handler(streaming)
