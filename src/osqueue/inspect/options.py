"""How a command or the dashboard reaches the broker of a queue: the connection
options in one value, and the client they open.

The CLI builds a :class:`ClientOptions` from its connection options (one place:
:func:`osqueue.cli.options.connecting`, which ``osqueue dashboard`` goes through
too: its configuration holds the value, its actions open their clients by it).
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from dataclasses import dataclass
from typing import TYPE_CHECKING

from osqueue.api import QueueClient

if TYPE_CHECKING:
    from osqueue.client.remote import RemoteConfig


@dataclass(frozen=True, slots=True)
class ClientOptions:
    """How a command reaches the broker of the queue at ``url``."""

    url: str
    token: str | None = None
    token_file: str | None = None
    tls_ca: str | None = None
    embedded: bool = False
    #: How long one call keeps trying (failovers included); None: the client's default.
    timeout_s: float | None = None
    tls_fingerprint: str | None = None
    allow_plaintext_token: bool = False


def remote_config(options: ClientOptions) -> RemoteConfig:
    """The remote client's configuration these options give: the token read (from
    ``token_file`` when given), the TLS options checked (a malformed
    ``tls_fingerprint`` is refused here, naming the field)."""
    from osqueue.client.remote import RemoteConfig
    from osqueue.wire.auth import resolve_token

    return RemoteConfig(
        token=resolve_token(options.token, options.token_file),
        tls_ca=options.tls_ca,
        tls_fingerprint=options.tls_fingerprint,
        allow_plaintext_token=options.allow_plaintext_token,
    )


@asynccontextmanager
async def open_client(options: ClientOptions) -> AsyncIterator[QueueClient]:
    """``osqueue.connect`` with the command's connection options; closed on exit."""
    from osqueue.client.remote import connect

    client = await connect(
        options.url,
        embedded=options.embedded,
        timeout_s=options.timeout_s,
        config=remote_config(options),
    )
    try:
        yield client
    finally:
        await client.close()
