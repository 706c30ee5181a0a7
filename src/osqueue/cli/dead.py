"""``osqueue dead URL retry|purge``: act on dead-lettered jobs (through the broker).

Dead jobs beyond a queue's newest ``dead_keep_jobs`` sit in dead segments
(docs/segments.md "Dead letters"): a retry or purge of all of them, or by
filter, goes one segment per commit and prints its progress; a run stopped
half way is finished by running it again (no job is retried twice).
"""

from __future__ import annotations

import asyncio
import enum
import inspect
from collections.abc import Callable
from typing import Annotated, NamedTuple

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
    all_: Annotated[
        bool, typer.Option("--all", help="Every dead job (the default when no --id is given).")
    ] = False,
    queue: Annotated[str | None, typer.Option("--queue", help="Only this queue's.")] = None,
    error: Annotated[
        str | None, typer.Option("--error", help="Only those whose last error holds this text.")
    ] = None,
    since: Annotated[
        float | None, typer.Option("--since", help="Only those that died at or after (Unix s).")
    ] = None,
    until: Annotated[
        float | None, typer.Option("--until", help="Only those that died before (Unix s).")
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
    if all_ and ids:
        raise typer.BadParameter("--all and --id name different jobs: give one of them")
    filters = DeadFilters(queue, error, since, until)
    count = asyncio.run(_act(options, action, ids or None, filters))
    verb = "retried" if action is DeadAction.retry else "purged"
    typer.echo(f"{verb} {exits.counted(count, 'dead job')}")
    if ids and count < len(ids):
        exits.warn(f"{len(ids) - count} of the given ids were not dead jobs")


class DeadFilters(NamedTuple):
    """Which dead jobs (every field None: no limit)."""

    queue: str | None = None
    error: str | None = None
    since: float | None = None
    until: float | None = None


async def _act(
    options: ClientOptions, action: DeadAction, ids: list[str] | None, filters: DeadFilters
) -> int:
    async with open_client(options) as client:
        return await on_dead(client, action, ids, filters, progress=_progress)


def _progress(jobs: int, left: int) -> None:
    typer.echo(f"{jobs} so far, {exits.counted(left, 'dead segment')} left", err=True)


async def on_dead(
    client: object,
    action: DeadAction,
    ids: list[str] | None,
    filters: DeadFilters = DeadFilters(),
    progress: Callable[[int, int], None] | None = None,
) -> int:
    """Retry or purge the dead jobs ``ids`` (None: all of them, or those ``filters``
    admit) through ``client``; how many there were.  ``progress`` hears of each
    dead segment done, where the client goes segment by segment (in-process).
    (``osqueue dashboard`` acts through this too.)"""
    method = getattr(client, f"{action.value}_dead", None)
    if method is None:
        raise OsqueueError(f"this client ({type(client).__name__}) cannot {action.value} dead jobs")
    params = inspect.signature(method).parameters
    kwargs: dict[str, object] = {k: v for k, v in filters._asdict().items() if v is not None}
    missing = [k for k in kwargs if k not in params]
    if missing:
        raise OsqueueError(f"this client ({type(client).__name__}) cannot filter by --{missing[0]}")
    if progress is not None and "progress" in params:
        kwargs["progress"] = progress
    count = await method(ids, **kwargs)
    if not isinstance(count, int):
        raise OsqueueError(f"{action.value}_dead returned {count!r}, expected a count")
    return count
