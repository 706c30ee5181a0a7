"""Bearer-token authentication for the gRPC server: who may call what.

Every call must carry ``authorization: Bearer <token>`` in its metadata (the
health service aside).  A server has up to three tokens (:class:`Tokens`), one
per access level of :class:`~osqueue.wire.auth.Access`: the admin token may
call everything, a write token what producers and workers need, a read token
only ``Stats``.  :class:`BearerTokenInterceptor` finds the presented token's
level in constant time and refuses, before the request is even decoded, a
call without a known token (``UNAUTHENTICATED``) or one that needs more than
the token's level (``PERMISSION_DENIED``, naming the method).
"""

from __future__ import annotations

import hmac
import logging
from collections.abc import AsyncIterator, Awaitable, Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import grpc

from osqueue.errors import InvalidInput, OsqueueError, PermissionDenied, Unauthenticated
from osqueue.wire.auth import (
    METADATA_KEY,
    SCHEME,
    Access,
    access_needed,
    check_token,
    method_name,
    methods_allowed,
    resolve_token,
)
from osqueue.wire.status import grpc_code, to_status, trailers

log = logging.getLogger(__name__)

Handler = Any  # grpc.RpcMethodHandler (grpc ships no type stubs)
Continuation = Callable[[Any], Awaitable[Handler]]


@dataclass(frozen=True, slots=True)
class Tokens:
    """The tokens a server accepts, one per access level (only ``admin`` is required).

    :meth:`access_of` takes the ``Bearer <token>`` value as it arrives, so an
    HTTP endpoint (metrics, a dashboard) can check an ``Authorization`` header
    with the same tokens and grant the read level.
    """

    admin: str
    write: str | None = None
    read: str | None = None

    def __post_init__(self) -> None:
        given = [(name, t) for name, t in self.by_name() if t is not None]
        for name, token in given:
            check_token(token, field=_FIELDS[name])
        values = [t for _, t in given]
        if len(set(values)) != len(values):
            raise InvalidInput(
                "the admin, write and read tokens must differ (one token, one access level)",
                field="read_token" if self.read is not None else "write_token",
            )

    @classmethod
    def resolve(
        cls,
        token: str | None,
        token_file: str | Path | None,
        *,
        write: tuple[str | None, str | Path | None] = (None, None),
        read: tuple[str | None, str | Path | None] = (None, None),
    ) -> Tokens | None:
        """The tokens given directly or in files (each: one or the other); None when no
        admin token is given, which is refused if a write or read token is."""
        admin = resolve_token(token, token_file)
        writer = _resolve_level("write", *write)
        reader = _resolve_level("read", *read)
        if admin is None:
            if writer is not None or reader is not None:
                lesser = "write_token" if writer is not None else "read_token"
                raise InvalidInput(
                    "needs the admin token too (token or token_file): without it every "
                    "caller could do everything",
                    field=lesser,
                )
            return None
        return cls(admin, writer, reader)

    def by_name(self) -> tuple[tuple[str, str | None], ...]:
        return (("admin", self.admin), ("write", self.write), ("read", self.read))

    def access_of(self, presented: bytes) -> Access | None:
        """The level of the token whose ``Bearer`` value is ``presented``; None: no match.

        Every configured token is compared, each in constant time, so the time
        taken tells nothing about which one (or how much of one) matched.
        """
        found: Access | None = None
        for level, token in ((Access.ADMIN, self.admin), (Access.WRITE, self.write)):
            if token is not None and hmac.compare_digest(presented, _bearer(token)):
                found = level
        if self.read is not None and hmac.compare_digest(presented, _bearer(self.read)):
            found = Access.READ
        return found


_FIELDS = {"admin": "token", "write": "write_token", "read": "read_token"}


def _bearer(token: str) -> bytes:
    return (SCHEME + token).encode("ascii")


def _resolve_level(name: str, token: str | None, token_file: str | Path | None) -> str | None:
    field = _FIELDS[name]
    if token is not None and token_file is not None:
        raise InvalidInput("give a token or a token file, not both", field=f"{field}_file")
    try:
        return resolve_token(token, token_file)
    except InvalidInput as exc:  # name this level's field, not the admin token's
        wrong = f"{field}_file" if token_file is not None else field
        raise InvalidInput(_strip_field(exc), field=wrong) from exc


def _strip_field(exc: InvalidInput) -> str:
    prefix = f"{exc.field}: " if exc.field else ""
    return exc.message.removeprefix(prefix)


class BearerTokenInterceptor(grpc.aio.ServerInterceptor):  # type: ignore[misc]
    """Refuse every call whose token is missing, wrong, or below the method's level."""

    def __init__(self, tokens: Tokens | str) -> None:
        self.tokens = tokens if isinstance(tokens, Tokens) else Tokens(tokens)

    def _verdict(self, method: str, needed: Access, metadata: Any) -> OsqueueError | None:
        """None when the call may go on, else why not."""
        presented = [v for k, v in (metadata or ()) if k == METADATA_KEY]
        if not presented:
            return Unauthenticated(
                "no bearer token: give --token, --token-file or OSQUEUE_TOKEN (osqueue CLI),"
                " or connect(token=...) from Python"
            )
        value = presented[0]
        given = value.encode("utf-8", "replace") if isinstance(value, str) else bytes(value)
        access = self.tokens.access_of(given) if len(presented) == 1 else None
        if access is None:
            return Unauthenticated("the bearer token is wrong")
        if access < needed:
            name = method_name(method)
            return PermissionDenied(
                f"{name} needs the {needed.label} token; this is the {access.label} token, "
                f"which may call only {', '.join(methods_allowed(access))}"
            )
        return None

    async def intercept_service(self, continuation: Continuation, details: Any) -> Handler:
        needed = access_needed(details.method)
        if needed is None:  # health probes carry no token
            return await continuation(details)
        refusal = self._verdict(details.method, needed, details.invocation_metadata)
        handler = await continuation(details)
        if refusal is None or handler is None:
            return handler
        log.info(
            "refused a call",
            extra={
                "action": "auth_refused",
                "method": details.method,
                "why": refusal.message,
                "kind": type(refusal).__name__,
            },
        )
        return _refusing(handler, refusal)


def _refusing(handler: Handler, refusal: OsqueueError) -> Handler:
    """A handler of the same kind as ``handler`` that aborts with ``refusal``'s status."""
    status = to_status(refusal)

    async def abort(context: Any) -> None:
        await context.abort(grpc_code(status), status.message, trailers(status))

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
