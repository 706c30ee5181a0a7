"""``osqueue cancel URL --id ID...``: take live jobs out of the queue (through the broker)."""

from __future__ import annotations

import asyncio
from typing import Annotated

import typer

from osqueue.cli import exits
from osqueue.cli.options import (
    Url,
    connecting,
)
from osqueue.errors import JobNotFound
from osqueue.inspect.options import ClientOptions, open_client


@connecting
def cancel(
    url: Url,
    ids: Annotated[
        list[str],
        typer.Option(
            "--id",
            envvar="OSQUEUE_IDS",
            help="The id of a job to cancel: queued, delayed, claimed or dead (repeat it).",
            show_default=False,
        ),
    ],
    *,
    options: ClientOptions,
) -> None:
    """Cancel jobs: they leave the queue unfinished (a worker holding one gets LeaseLost)."""
    wanted = list(dict.fromkeys(ids))  # each id once, in the order given
    outcomes = asyncio.run(_cancel(options, wanted))
    failed = {job_id: exc for job_id, exc in zip(wanted, outcomes, strict=True) if exc is not None}
    typer.echo(f"cancelled {exits.counted(len(wanted) - len(failed), 'job')}")
    others = [exc for exc in failed.values() if not isinstance(exc, JobNotFound)]
    if others:  # the broker unreachable, a bad id, ...: the first one says why
        raise others[0]
    if failed:
        raise JobNotFound(
            f"no live job {', '.join(failed)} (already finished or cancelled, or never pushed)"
        )


async def _cancel(options: ClientOptions, ids: list[str]) -> list[BaseException | None]:
    """One outcome per id: None (cancelled) or the error it got."""
    async with open_client(options) as client:
        return list(await asyncio.gather(*(client.cancel(i) for i in ids), return_exceptions=True))
