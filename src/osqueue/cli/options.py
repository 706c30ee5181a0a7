"""Arguments and options shared by several commands, and how they open a client.

Every option has an ``OSQUEUE_*`` environment variable (shown in ``--help``).
The options that say how to reach the broker are declared once, here: a
command that calls the broker takes one :class:`ClientOptions` parameter and
is wrapped in :func:`connecting`, which shows those options in its ``--help``
and builds the value from them.
"""

from __future__ import annotations

import functools
import inspect
from collections.abc import Callable
from typing import Annotated, Any, TypeVar

import typer

from osqueue.inspect.options import ClientOptions

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


R = TypeVar("R")


def _option(name: str, annotation: Any, default: object) -> inspect.Parameter:
    return inspect.Parameter(
        name, inspect.Parameter.KEYWORD_ONLY, default=default, annotation=annotation
    )


#: How a command reaches the broker, in the order ``--help`` lists them; each
#: name is the :class:`ClientOptions` field it fills.
CONNECTION: tuple[inspect.Parameter, ...] = (
    _option("token", Token, None),
    _option("token_file", TokenFile, None),
    _option("tls_ca", TlsCa, None),
    _option("tls_fingerprint", TlsFingerprint, None),
    _option("allow_plaintext_token", AllowPlaintextToken, False),
    _option("embedded", Embedded, False),
)


def connecting(command: Callable[..., R]) -> Callable[..., R]:
    """``command`` with its :class:`ClientOptions` parameter shown to Typer as the
    :data:`CONNECTION` options (in its place), and the value built from them and
    the command's ``url`` argument when it runs."""
    signature = inspect.signature(command, eval_str=True)
    params = list(signature.parameters.values())
    slots = [i for i, p in enumerate(params) if p.annotation is ClientOptions]
    if len(slots) != 1:
        raise TypeError(f"{command.__name__} needs one ClientOptions parameter to connect")
    slot = slots[0]
    target = params[slot].name
    shown = [
        *params[:slot],
        *(p.replace(kind=params[slot].kind) for p in CONNECTION),
        *params[slot + 1 :],
    ]

    @functools.wraps(command)
    def run(**given: Any) -> R:
        fields = {p.name: given.pop(p.name) for p in CONNECTION}
        given[target] = ClientOptions(given["url"], **fields)
        return command(**given)

    run.__signature__ = signature.replace(parameters=shown)  # type: ignore[attr-defined]
    run.__annotations__ = {p.name: p.annotation for p in shown} | {
        "return": signature.return_annotation
    }
    return run
