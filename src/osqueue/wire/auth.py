"""Bearer tokens as they travel: the metadata key, the scheme, the token rules,
and which access each RPC needs.

Both sides import this: the remote client to present a token
(:func:`bearer_metadata`), the server to check it
(:class:`osqueue.server.auth.BearerTokenInterceptor`).

A server has up to three tokens, one per :class:`Access` level; a token may
call every RPC whose level (:data:`METHOD_ACCESS`) is at or below its own.
"""

from __future__ import annotations

from collections.abc import Mapping
from enum import IntEnum
from pathlib import Path
from types import MappingProxyType

from osqueue.errors import InvalidInput

METADATA_KEY = "authorization"
#: The standard health service answers without a token (it tells only whether
#: the queue is served here), so load balancers and orchestrators can probe it.
HEALTH_METHODS = "/grpc.health.v1.Health/"
#: The path prefix of the queue service's RPCs.
QUEUE_METHODS = "/osqueue.v1.Queue/"
SCHEME = "Bearer "
_MAX_TOKEN_CHARS = 4096


class Access(IntEnum):
    """What a token may do; each level includes the ones below it."""

    #: Look: the queue's figures (status, metrics, the dashboard).
    READ = 1
    #: Produce and work: push, claim, and the holder's calls on the jobs it claimed.
    WRITE = 2
    #: Change what others pushed: cancel, retry and purge dead letters.
    ADMIN = 3

    @property
    def label(self) -> str:
        return self.name.lower()


#: Every RPC of ``osqueue.v1.Queue`` and the least access that may call it.  A
#: method missing here needs ``ADMIN`` (a new RPC is refused until classified;
#: a test checks that the table covers the service).
METHOD_ACCESS: Mapping[str, Access] = MappingProxyType(
    {
        "Stats": Access.READ,
        "Push": Access.WRITE,
        "Claim": Access.WRITE,
        "ClaimStream": Access.WRITE,
        "Heartbeat": Access.WRITE,
        "Complete": Access.WRITE,
        "Fail": Access.WRITE,
        "Release": Access.WRITE,
        "Result": Access.WRITE,
        "Cancel": Access.ADMIN,
        "RetryDead": Access.ADMIN,
        "ReadmitSegment": Access.ADMIN,
        "PurgeDead": Access.ADMIN,
        # Scheduling: listing shows the schedules' payloads (not for read-only tokens);
        # changing them, or a queue's settings (pause included), is administration.
        "ListSchedules": Access.WRITE,
        "Schedule": Access.ADMIN,
        "Unschedule": Access.ADMIN,
        "SetQueue": Access.ADMIN,
    }
)


def method_name(method: str) -> str:
    """``"/osqueue.v1.Queue/Push"`` -> ``"Push"``."""
    return method.rpartition("/")[2] or method


def access_needed(method: str) -> Access | None:
    """The access a call of ``method`` (a full gRPC path) needs; None: no token at all."""
    if method.startswith(HEALTH_METHODS):
        return None
    if method.startswith(QUEUE_METHODS):
        return METHOD_ACCESS.get(method_name(method), Access.ADMIN)
    return Access.ADMIN


def methods_allowed(access: Access) -> list[str]:
    """The queue RPCs a token with ``access`` may call, in table order."""
    return [name for name, needed in METHOD_ACCESS.items() if needed <= access]


def check_token(token: str, field: str = "token") -> str:
    """Return ``token`` if it can travel in gRPC metadata (printable ASCII, no spaces)."""
    if not token:
        raise InvalidInput("must not be empty", field=field)
    if len(token) > _MAX_TOKEN_CHARS:
        raise InvalidInput(f"is longer than {_MAX_TOKEN_CHARS} characters", field=field)
    if not all("!" <= ch <= "~" for ch in token):
        raise InvalidInput("must be printable ASCII without spaces", field=field)
    return token


def read_token_file(path: str | Path, field: str = "token_file") -> str:
    """Read a token from a file (surrounding whitespace and the final newline dropped)."""
    try:
        text = Path(path).read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as exc:
        raise InvalidInput(f"cannot read {str(path)!r}: {exc}", field=field) from exc
    return check_token(text.strip(), field)


def resolve_token(token: str | None, token_file: str | Path | None) -> str | None:
    """The token given directly or in a file (not both); None when neither is given."""
    if token is not None and token_file is not None:
        raise InvalidInput("give a token or a token file, not both", field="token_file")
    if token_file is not None:
        return read_token_file(token_file)
    return check_token(token) if token is not None else None


def bearer_metadata(token: str) -> tuple[tuple[str, str], ...]:
    """The call metadata a client sends to present ``token``."""
    return ((METADATA_KEY, SCHEME + token),)
