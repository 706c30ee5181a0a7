"""``osqueue jobs URL``: list the jobs in the queue document and its segments (a
snapshot from storage); ``--payload ID`` writes one job's payload instead, read
through the checked read every payload reader uses
(:func:`~osqueue.broker.objects.payloads.read_payload`)."""

from __future__ import annotations

import asyncio
import enum
import json
import sys
import time
from typing import Annotated

import typer
from rich.markup import escape
from rich.table import Table
from rich.text import Text

from osqueue.broker.cold.read import (
    Listed,
    cursor_text,
    parse_cursor,
    sort_key,
)
from osqueue.cli import exits
from osqueue.cli.console import printable, shown, stdout
from osqueue.cli.options import AsJson, Url
from osqueue.inspect.jobs import job_dict, list_page, payload_by_id
from osqueue.inspect.status import age_text


class JobState(enum.StrEnum):
    waiting = "waiting"
    queued = "queued"
    claimed = "claimed"
    dead = "dead"
    done = "done"


def jobs(
    url: Url,
    queue: Annotated[
        str | None,
        typer.Option("--queue", "-q", envvar="OSQUEUE_QUEUE", help="Only this queue."),
    ] = None,
    state: Annotated[
        JobState | None,
        typer.Option("--status", "-s", envvar="OSQUEUE_STATUS", help="Only jobs in this state."),
    ] = None,
    limit: Annotated[
        int,
        typer.Option(
            "--limit", "-n", envvar="OSQUEUE_LIMIT", min=0, help="At most this many (0: all)."
        ),
    ] = 100,
    after: Annotated[
        str | None,
        typer.Option(
            "--after",
            envvar="OSQUEUE_AFTER",
            help="Start after this QUEUE:PRIORITY:SEQ (the cursor a listing ends with).",
        ),
    ] = None,
    as_json: AsJson = False,
    payload: Annotated[
        str | None,
        typer.Option(
            "--payload",
            envvar="OSQUEUE_PAYLOAD",
            metavar="ID",
            help="Write this job's payload to standard output instead (raw bytes; escaped "
            "on a terminal), checked against the size and SHA-256 its push recorded.",
        ),
    ] = None,
) -> None:
    """List live and dead jobs, in claim order (priority, then FIFO).

    Reads the queue document from storage (a consistent snapshot; no broker
    needed), and the objects of cold jobs (a deep backlog, delayed jobs, dead
    segments, waiting children) as far as the listing reaches.  Completed
    jobs leave the document once archived.  --json prints one JSON object per
    job per line; a listing cut by --limit ends with the cursor to pass as
    --after for the next page.  --payload ID prints one
    job's payload; a payload object that fails its check is an error naming
    the job and the object, and none of its bytes are written.
    """
    if payload is not None:
        _write_payload(asyncio.run(payload_by_id(url, payload)))
        return
    start = parse_cursor(after) if after else None
    status = state.value if state is not None else None
    shown, left = asyncio.run(list_page(url, queue, status, limit, start))
    now = time.time()
    if as_json:
        for listed in shown:
            typer.echo(json.dumps(job_dict(listed.job, spilled=listed.segment is not None)))
        return
    console = stdout()
    console.print(_table(shown, now))
    if left and shown:
        cursor = cursor_text(sort_key(shown[-1].job))
        more = "more" if start is not None else f"{left} more"
        console.print(f"[dim]{more}; next page: --after '{escape(cursor)}' (or raise --limit)[/]")


def _write_payload(data: bytes) -> None:
    """Raw to a pipe or file; on a terminal, as text with control characters escaped."""
    if not sys.stdout.isatty():
        sys.stdout.buffer.write(data)
        sys.stdout.buffer.flush()
        return
    text = data.decode("utf-8", "backslashreplace")
    typer.echo(printable(text))


_STYLE = {"waiting": "yellow", "queued": "", "claimed": "cyan", "dead": "red", "done": "green"}


def _table(selected: list[Listed], now: float) -> Table:
    table = Table(show_edge=False, pad_edge=False)
    for column in ("id", "queue", "status", "prio", "tries", "age", "worker", "last error"):
        table.add_column(column, no_wrap=column != "last error", overflow="fold")
    for listed in selected:
        job = listed.job
        age = now - job.created_at.timestamp()
        status: str = job.status
        if job.status == "queued" and job.run_at is not None and job.run_at.timestamp() > now:
            status = f"queued (in {age_text(job.run_at.timestamp() - now)})"
        elif job.status == "waiting":
            cold = ", spilled" if listed.segment is not None else ""
            status = f"waiting ({len(job.after)} parent{'' if len(job.after) == 1 else 's'}{cold})"
        elif listed.segment is not None:
            status = f"{job.status} (spilled)"
        table.add_row(
            shown(job.id),
            shown(job.queue),
            Text(status, style=_STYLE[job.status]),
            str(job.priority),
            f"{job.attempts}/{job.max_attempts}",
            age_text(age),
            shown(job.claim.worker if job.claim else ""),
            shown(exits.one_line(job.last_error or "")[:200]),
        )
    return table
