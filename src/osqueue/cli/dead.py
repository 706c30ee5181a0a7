"""``osqueue dead URL retry|purge``: act on dead-lettered jobs (through the broker).

Dead jobs beyond a queue's newest ``dead_keep_jobs`` sit in dead segments
(docs/segments.md "Dead letters"): a retry or purge of all of them, or by
filter, goes one segment per commit and prints its progress; a run stopped
half way is finished by running it again (no job is retried twice).
"""

from __future__ import annotations

import asyncio
from typing import Annotated

import typer

from osqueue.cli import exits
from osqueue.cli.options import (
    Url,
    connecting,
)
from osqueue.inspect.admin import DeadAction, DeadFilters, on_dead
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
    all_: Annotated[
        bool,
        typer.Option(
            "--all",
            envvar="OSQUEUE_DEAD_ALL",
            help="Every dead job (the default when no --id is given).",
        ),
    ] = False,
    queue: Annotated[
        str | None, typer.Option("--queue", "-q", envvar="OSQUEUE_QUEUE", help="Only this queue's.")
    ] = None,
    error: Annotated[
        str | None,
        typer.Option(
            "--error",
            envvar="OSQUEUE_DEAD_ERROR",
            help="Only those whose last error holds this text.",
        ),
    ] = None,
    since: Annotated[
        float | None,
        typer.Option(
            "--since",
            envvar="OSQUEUE_DEAD_SINCE",
            help="Only those that died at or after (Unix s).",
        ),
    ] = None,
    until: Annotated[
        float | None,
        typer.Option(
            "--until", envvar="OSQUEUE_DEAD_UNTIL", help="Only those that died before (Unix s)."
        ),
    ] = None,
    *,
    options: ClientOptions,
) -> None:
    """Retry or purge dead-lettered jobs (list them with: osqueue jobs URL --status dead)."""
    if all_ and ids:
        raise typer.BadParameter("--all and --id name different jobs: give one of them")
    filters = DeadFilters(queue, error, since, until)
    count = asyncio.run(_act(options, action, ids or None, filters))
    verb = "retried" if action is DeadAction.retry else "purged"
    typer.echo(f"{verb} {exits.counted(count, 'dead job')}")
    if ids and count < len(ids):
        exits.warn(f"{len(ids) - count} of the given ids were not dead jobs")


async def _act(
    options: ClientOptions, action: DeadAction, ids: list[str] | None, filters: DeadFilters
) -> int:
    async with open_client(options) as client:
        return await on_dead(client, action, ids, filters, progress=_progress)


def _progress(jobs: int, left: int) -> None:
    typer.echo(f"{jobs} so far, {exits.counted(left, 'dead segment')} left", err=True)
