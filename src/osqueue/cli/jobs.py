"""``osqueue jobs URL``: list the jobs in the queue document (a snapshot from storage)."""

from __future__ import annotations

import asyncio
import enum
import json
import time
from typing import Annotated, Any

import typer
from rich.table import Table
from rich.text import Text

from osqueue.cli import exits
from osqueue.cli.console import stdout
from osqueue.cli.options import AsJson, Url
from osqueue.cli.snapshot import read_document
from osqueue.state import StoredJob


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
    as_json: AsJson = False,
) -> None:
    """List live and dead jobs, in claim order (priority, then FIFO).

    Reads the queue document from storage (a consistent snapshot; no broker
    needed).  Completed jobs leave the document once archived.  --json prints
    one JSON object per job per line.
    """
    doc = asyncio.run(read_document(url))
    now = time.time()
    selected = sorted(
        (
            j
            for j in doc.jobs.values()
            if (queue is None or j.queue == queue) and (state is None or j.status == state.value)
        ),
        key=lambda j: (j.queue, j.priority, j.seq),
    )
    shown = selected[:limit] if limit else selected
    if as_json:
        for job in shown:
            typer.echo(json.dumps(job_dict(job)))
        return
    console = stdout()
    console.print(_table(shown, now))
    if len(shown) < len(selected):
        console.print(f"[dim]{len(selected) - len(shown)} more; raise --limit or use --json[/]")


def job_dict(job: StoredJob) -> dict[str, Any]:
    """One job as JSON: the document's fields, times as epoch seconds, no payload bytes."""
    claim = job.claim
    return {
        "id": job.id,
        "queue": job.queue,
        "status": job.status,
        "priority": job.priority,
        "attempts": job.attempts,
        "max_attempts": job.max_attempts,
        "key": job.key,
        "created_at": job.created_at.timestamp(),
        "run_at": job.run_at.timestamp() if job.run_at else None,
        "first_claimed_at": job.first_claimed_at.timestamp() if job.first_claimed_at else None,
        "worker": claim.worker if claim else None,
        "token": claim.token if claim else None,
        "heartbeat_at": claim.heartbeat_at.timestamp() if claim else None,
        "last_error": job.last_error,
        "payload_bytes": job.payload_size,
        "payload_ref": job.payload_ref,
        "group": job.group,
        "after": list(job.after),
    }


_STYLE = {"waiting": "yellow", "queued": "", "claimed": "cyan", "dead": "red", "done": "green"}


def _table(selected: list[StoredJob], now: float) -> Table:
    table = Table(show_edge=False, pad_edge=False)
    for column in ("id", "queue", "status", "prio", "tries", "age", "worker", "last error"):
        table.add_column(column, no_wrap=column != "last error", overflow="fold")
    for job in selected:
        age = now - job.created_at.timestamp()
        status: str = job.status
        if job.status == "queued" and job.run_at is not None and job.run_at.timestamp() > now:
            status = f"queued (in {job.run_at.timestamp() - now:.0f}s)"
        elif job.status == "waiting":
            status = f"waiting ({len(job.after)} parent{'' if len(job.after) == 1 else 's'})"
        table.add_row(
            job.id,
            job.queue,
            Text(status, style=_STYLE[job.status]),
            str(job.priority),
            f"{job.attempts}/{job.max_attempts}",
            f"{age:.0f}s",
            job.claim.worker if job.claim else "",
            exits.one_line(job.last_error or "")[:200],
        )
    return table
