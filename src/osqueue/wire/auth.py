"""Bearer tokens as they travel: the metadata key, the scheme, and the token rules.

Both sides import this: the remote client to present a token
(:func:`bearer_metadata`), the server to check it
(:class:`osqueue.server.auth.BearerTokenInterceptor`).
"""

from __future__ import annotations

from pathlib import Path

from osqueue.errors import InvalidInput

METADATA_KEY = "authorization"
#: The standard health service answers without a token (it tells only whether
#: the queue is served here), so load balancers and orchestrators can probe it.
HEALTH_METHODS = "/grpc.health.v1.Health/"
SCHEME = "Bearer "
_MAX_TOKEN_CHARS = 4096


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
