"""Arguments and options shared by several commands, and how they open a client.

Every option has an ``OSQUEUE_*`` environment variable (shown in ``--help``).
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from dataclasses import dataclass
from typing import Annotated

import typer

from osqueue.api import QueueClient

_CONN = "Connection"

Url = Annotated[
    str,
    typer.Argument(
        envvar="OSQUEUE_URL",
        show_envvar=True,
        help="The queue's storage URL: file:///dir, s3://bucket/prefix, gs://, az://, memory://name.",
    ),
]
Token = Annotated[
    str | None,
    typer.Option(
        "--token",
        envvar="OSQUEUE_TOKEN",
        help="Bearer token for the broker (prefer the variable or --token-file: "
        "arguments show in ps).",
        rich_help_panel=_CONN,
    ),
]
TokenFile = Annotated[
    str | None,
    typer.Option(
        "--token-file",
        envvar="OSQUEUE_TOKEN_FILE",
        help="File holding the bearer token.",
        rich_help_panel=_CONN,
    ),
]
TlsCa = Annotated[
    str | None,
    typer.Option(
        "--tls-ca",
        envvar="OSQUEUE_TLS_CA",
        help="PEM file of the CA that signed the broker's certificate (enables TLS).",
        rich_help_panel=_CONN,
    ),
]
TlsFingerprint = Annotated[
    str | None,
    typer.Option(
        "--tls-fingerprint",
        envvar="OSQUEUE_TLS_FINGERPRINT",
        help="SHA-256 fingerprint of the broker's certificate (hex, colons allowed; several "
        "separated by commas): enables TLS and refuses any other certificate.",
        rich_help_panel=_CONN,
    ),
]
AllowPlaintextToken = Annotated[
    bool,
    typer.Option(
        "--allow-plaintext-token",
        envvar="OSQUEUE_ALLOW_PLAINTEXT_TOKEN",
        help="Send the token to a non-loopback broker without TLS (warns; anyone on the "
        "network path can read it).",
        rich_help_panel=_CONN,
    ),
]
Embedded = Annotated[
    bool,
    typer.Option(
        "--embedded",
        envvar="OSQUEUE_EMBEDDED",
        help="Run a broker in this process when no live broker holds the lease.",
        rich_help_panel=_CONN,
    ),
]
MetricsListen = Annotated[
    str | None,
    typer.Option(
        "--metrics-listen",
        envvar="OSQUEUE_METRICS_LISTEN",
        help="host:port to serve Prometheus metrics on at /metrics, no token needed"
        " (port 0: any free port; needs osqueue\\[metrics]).",
    ),
]
Queue = Annotated[str, typer.Option("--queue", "-q", envvar="OSQUEUE_QUEUE", help="Queue name.")]
AsJson = Annotated[
    bool, typer.Option("--json", envvar="OSQUEUE_JSON", help="Print JSON instead of a table.")
]


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


@asynccontextmanager
async def open_client(options: ClientOptions) -> AsyncIterator[QueueClient]:
    """``osqueue.connect`` with the command's connection options; closed on exit."""
    from osqueue.client.remote import RemoteConfig, connect
    from osqueue.wire.auth import resolve_token

    config = RemoteConfig(
        token=resolve_token(options.token, options.token_file),
        tls_ca=options.tls_ca,
        tls_fingerprint=options.tls_fingerprint,
        allow_plaintext_token=options.allow_plaintext_token,
    )
    client = await connect(
        options.url, embedded=options.embedded, timeout_s=options.timeout_s, config=config
    )
    try:
        yield client
    finally:
        await client.close()
