"""``osqueue dead URL retry|purge``: act on dead-lettered jobs (through the broker)."""

from __future__ import annotations

import asyncio
from typing import Annotated

import typer

from osqueue.cli import exits
from osqueue.cli.options import (
    Url,
    connecting,
)
from osqueue.inspect.admin import DeadAction, on_dead
from osqueue.inspect.options import ClientOptions, open_client


@connecting
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
    *,
    options: ClientOptions,
) -> None:
    """Retry or purge dead-lettered jobs (list them with: osqueue jobs URL --status dead)."""
    count = asyncio.run(_act(options, action, ids or None))
    verb = "retried" if action is DeadAction.retry else "purged"
    typer.echo(f"{verb} {exits.counted(count, 'dead job')}")
    if ids and count < len(ids):
        exits.warn(f"{len(ids) - count} of the given ids were not dead jobs")


async def _act(options: ClientOptions, action: DeadAction, ids: list[str] | None) -> int:
    async with open_client(options) as client:
        return await on_dead(client, action, ids)
