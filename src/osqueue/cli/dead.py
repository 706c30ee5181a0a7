"""``osqueue dead URL retry|purge``: act on dead-lettered jobs (through the broker)."""

from __future__ import annotations

import asyncio
import enum
from typing import Annotated

import typer

from osqueue.cli import exits
from osqueue.cli.options import (
    AllowPlaintextToken,
    ClientOptions,
    Embedded,
    TlsCa,
    TlsFingerprint,
    Token,
    TokenFile,
    Url,
    open_client,
)
from osqueue.errors import OsqueueError


class DeadAction(enum.StrEnum):
    retry = "retry"
    purge = "purge"


def dead(
    url: Url,
    action: Annotated[
        DeadAction,
        typer.Argument(help="retry: queue them again with fresh attempts; purge: delete them."),
    ],
    ids: Annotated[
        list[str] | None,
        typer.Option(
            "--id", envvar="OSQUEUE_IDS", help="A dead job's id (repeat it); none: every dead job."
        ),
    ] = None,
    token: Token = None,
    token_file: TokenFile = None,
    tls_ca: TlsCa = None,
    tls_fingerprint: TlsFingerprint = None,
    allow_plaintext_token: AllowPlaintextToken = False,
    embedded: Embedded = False,
) -> None:
    """Retry or purge dead-lettered jobs (list them with: osqueue jobs URL --status dead)."""
    options = ClientOptions(
        url,
        token,
        token_file,
        tls_ca,
        embedded,
        tls_fingerprint=tls_fingerprint,
        allow_plaintext_token=allow_plaintext_token,
    )
    count = asyncio.run(_act(options, action, ids or None))
    verb = "retried" if action is DeadAction.retry else "purged"
    typer.echo(f"{verb} {exits.counted(count, 'dead job')}")
    if ids and count < len(ids):
        exits.warn(f"{len(ids) - count} of the given ids were not dead jobs")


async def _act(options: ClientOptions, action: DeadAction, ids: list[str] | None) -> int:
    async with open_client(options) as client:
        return await on_dead(client, action, ids)


async def on_dead(client: object, action: DeadAction, ids: list[str] | None) -> int:
    """Retry or purge the dead jobs ``ids`` (None: all of them) through ``client``;
    how many there were.  (``osqueue dashboard`` acts through this too.)"""
    method = getattr(client, f"{action.value}_dead", None)
    if method is None:
        raise OsqueueError(f"this client ({type(client).__name__}) cannot {action.value} dead jobs")
    count = await method(ids)
    if not isinstance(count, int):
        raise OsqueueError(f"{action.value}_dead returned {count!r}, expected a count")
    return count
