"""``osqueue archive URL``: the archive's days, and deleting the old ones.

The broker writes one archive object per commit that completed jobs, under
``archive/date=YYYY-MM-DD/hour=HH/``, and never deletes or reads one back, so
the archive grows until something expires it: a bucket lifecycle rule, or
this command (``--older-than-days N --delete``), which deletes whole UTC days
before today minus N.  Keys under ``archive/`` that are not archive objects are
left alone.
"""

from __future__ import annotations

import asyncio
import json
import re
from collections import defaultdict
from datetime import UTC, datetime, timedelta
from typing import Annotated

import typer

from osqueue.broker.archive import PREFIX
from osqueue.cli import exits
from osqueue.cli.options import AsJson, Url
from osqueue.cli.snapshot import read_blob
from osqueue.errors import InvalidInput
from osqueue.storage import from_url

_DAY = re.compile(re.escape(PREFIX) + r"date=(\d{4}-\d{2}-\d{2})/hour=\d{2}/\d{20}\.jsonl")
#: deletes in flight at once
_DELETES = 32


def archive(
    url: Url,
    older_than_days: Annotated[
        int | None,
        typer.Option(
            "--older-than-days",
            envvar="OSQUEUE_OLDER_THAN_DAYS",
            min=1,
            help="Mark (with --delete: delete) the days before today (UTC) minus this many.",
        ),
    ] = None,
    delete: Annotated[
        bool,
        typer.Option(
            "--delete", envvar="OSQUEUE_DELETE", help="Delete the days --older-than-days marks."
        ),
    ] = False,
    as_json: AsJson = False,
) -> None:
    """List the archive's days (objects per day); delete old days with --delete."""
    if delete and older_than_days is None:
        raise InvalidInput("--delete needs --older-than-days", field="older_than_days")
    cutoff = None
    if older_than_days is not None:
        cutoff = (datetime.now(UTC).date() - timedelta(days=older_than_days)).isoformat()
    days, old = asyncio.run(_expire(url, cutoff, delete))
    deleted = sum(len(days[day]) for day in old) if delete else 0
    if as_json:
        rows = [{"date": d, "objects": len(days[d]), "old": d in old} for d in sorted(days)]
        typer.echo(json.dumps({"days": rows, "deleted_objects": deleted}))
        return
    mark = "deleted" if delete else f"older than {older_than_days} days"
    for day in sorted(days):
        suffix = f"  ({mark})" if day in old else ""
        typer.echo(f"{day}  {exits.counted(len(days[day]), 'object'):>16}{suffix}")
    total = sum(len(keys) for keys in days.values())
    typer.echo(f"{exits.counted(total, 'archive object')} in {exits.counted(len(days), 'day')}")
    if delete:
        typer.echo(
            f"deleted {exits.counted(deleted, 'object')} of {exits.counted(len(old), 'day')}"
            f" before {cutoff}"
        )


async def _expire(
    url: str, cutoff: str | None, delete: bool
) -> tuple[dict[str, list[str]], list[str]]:
    """Archive object keys by day, and the days before ``cutoff`` (deleted with
    ``delete``); NotFound if there is no queue at ``url`` at all."""
    storage = from_url(url)
    try:
        keys = await storage.list(PREFIX)
        if not keys:  # a queue that archived nothing yet, or a mistyped URL?
            await read_blob(storage, url)
        days: dict[str, list[str]] = defaultdict(list)
        for key in keys:
            match = _DAY.fullmatch(key)
            if match is not None:
                days[match[1]].append(key)
        old = [day for day in sorted(days) if cutoff is not None and day < cutoff]
        if delete:
            doomed = [key for day in old for key in days[day]]
            for start in range(0, len(doomed), _DELETES):
                chunk = doomed[start : start + _DELETES]
                await asyncio.gather(*(storage.delete(key) for key in chunk))
    finally:
        await storage.close()
    return days, old
