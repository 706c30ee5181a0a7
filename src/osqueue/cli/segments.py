"""``osqueue segments list|readmit``: segments set aside, and putting one back.

A segment object (ready ``segments/``, delayed ``delayed/``, dead ``dead/``,
waiting children ``waiting/``) that is missing or does not match its
reference (the size and SHA-256 recorded at spill) is set aside by the
broker: its queue flows on without its jobs, which are neither lost nor used.  ``list`` shows
them (read from the document, no broker needed); once the object is restored
(from a backup, a bucket version), ``readmit`` asks the broker to check it and
put the reference back in seq order.
"""

from __future__ import annotations

import asyncio
import json
from typing import Annotated

import typer

from osqueue.cli import exits
from osqueue.cli.console import stdout
from osqueue.cli.options import (
    AsJson,
    Url,
    connecting,
)
from osqueue.cli.status import set_aside_text
from osqueue.errors import OsqueueError
from osqueue.inspect.document import read_document
from osqueue.inspect.options import ClientOptions, open_client
from osqueue.inspect.status import status_of

segments_app = typer.Typer(
    add_completion=False,
    no_args_is_help=True,
    help="Segments set aside (object missing or failing its check): list, readmit.",
)


@segments_app.command("list")
def list_set_aside(url: Url, as_json: AsJson = False) -> None:
    """The segments set aside: key, queue, seq range, job count, reason and time.

    Reads the queue document directly from storage (no broker needed)."""
    doc = asyncio.run(read_document(url))
    entries = status_of(url, doc, 0.0)["set_aside_segments"]
    if as_json:
        typer.echo(json.dumps(entries))
        return
    text = set_aside_text(entries)
    stdout().print(text if text is not None else "no segment is set aside")


@segments_app.command("readmit")
@connecting
def readmit(
    url: Url,
    key: Annotated[
        str,
        typer.Argument(help="The set-aside segment's key (segments/...), as `list` shows it."),
    ],
    *,
    options: ClientOptions,
) -> None:
    """Put a set-aside segment back in its queue, once its object is restored.

    The broker reads the object and checks it against the size and SHA-256
    its reference recorded at spill (and every job line); if it still fails,
    nothing changes and the error says what is wrong.  Otherwise its jobs are
    claimable again, in their place in claim order (an admin token is needed)."""
    count = asyncio.run(_readmit(options, key))
    typer.echo(f"readmitted {key}: {exits.counted(count, 'job')} claimable again")


async def _readmit(options: ClientOptions, key: str) -> int:
    async with open_client(options) as client:
        method = getattr(client, "readmit_segment", None)
        if method is None:
            raise OsqueueError(f"this client ({type(client).__name__}) cannot readmit segments")
        count = await method(key)
        if not isinstance(count, int):
            raise OsqueueError(f"readmit_segment returned {count!r}, expected a count")
        return count
