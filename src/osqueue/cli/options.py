"""Arguments and options shared by several commands, and how they open a client.

Every option has an ``OSQUEUE_*`` environment variable (shown in ``--help``).
"""

from __future__ import annotations

from typing import Annotated

import typer

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
