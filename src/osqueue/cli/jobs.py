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
from typing import Annotated, Any

import typer
from rich.markup import escape
from rich.table import Table
from rich.text import Text

from osqueue.broker.cold.read import (
    Listed,
    SortKey,
    cursor_text,
    find_spilled,
    list_jobs,
    parse_cursor,
    sort_key,
    spilled_count,
)
from osqueue.broker.objects.payloads import read_payload
from osqueue.cli import exits
from osqueue.cli.console import printable, shown, stdout
from osqueue.cli.options import AsJson, Url
from osqueue.cli.snapshot import read_blob
from osqueue.cli.status import age_text
from osqueue.errors import JobNotFound
from osqueue.state import Document, StoredJob, decode
from osqueue.storage import from_url


class JobState(enum.StrEnum):
    waiting = "waiting"
    queued = "queued"
    claimed = "claimed"
    dead = "dead"
    done = "done"


#: jobs read per page when --limit 0 asks for all of them
_PAGE = 10_000


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
    needed), and the segment objects of a deep backlog as far as the listing
    reaches.  Completed jobs leave the document once archived.  --json prints
    one JSON object per job per line; a listing cut by --limit ends with the
    cursor to pass as --after for the next page.  --payload ID prints one
    job's payload; a payload object that fails its check is an error naming
    the job and the object, and none of its bytes are written.
    """
    if payload is not None:
        _write_payload(asyncio.run(_payload(url, payload)))
        return
    start = parse_cursor(after) if after else None
    status = state.value if state is not None else None
    shown, left = asyncio.run(_listing(url, queue, status, limit, start))
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


async def _listing(
    url: str, queue: str | None, status: str | None, limit: int, after: SortKey | None
) -> tuple[list[Listed], int]:
    """The page (every job when ``limit`` is 0), and how many matching jobs follow
    it (from the first page: a count; after a cursor: 1 if any do)."""
    storage = from_url(url)
    try:

        async def read() -> Document:
            return decode((await read_blob(storage, url)).data)

        doc = await read()
        first = after is None
        shown: list[Listed] = []
        while True:
            want = limit - len(shown) + 1 if limit else _PAGE
            doc, page = await list_jobs(
                storage, read, doc, after=after, limit=want, queue=queue, status=status
            )
            shown.extend(page)
            if len(page) < want or (limit and len(shown) > limit):
                break
            after = sort_key(page[-1].job)
    finally:
        await storage.close()
    if not limit or len(shown) <= limit:
        return shown, 0
    left = _matching(doc, queue, status) - limit if first else 1
    return shown[:limit], max(1, left)


async def _payload(url: str, job_id: str) -> bytes:
    storage = from_url(url)
    try:
        doc = decode((await read_blob(storage, url)).data)
        job = doc.jobs.get(job_id)
        if job is None:
            job = await find_spilled(storage, doc, job_id)
        if job is None:
            raise JobNotFound(f"no live or dead job {job_id!r} at {url}")
        return await read_payload(storage, job)
    finally:
        await storage.close()


def _write_payload(data: bytes) -> None:
    """Raw to a pipe or file; on a terminal, as text with control characters escaped."""
    if not sys.stdout.isatty():
        sys.stdout.buffer.write(data)
        sys.stdout.buffer.flush()
        return
    text = data.decode("utf-8", "backslashreplace")
    typer.echo(printable(text))


def _matching(doc: Document, queue: str | None, status: str | None) -> int:
    index = doc.index
    names = [queue] if queue is not None else sorted(set(index.queues()) | doc.segments.queues())
    statuses = [status] if status is not None else [s.value for s in JobState]
    total = sum(index.count(q, s) for q in names for s in statuses)
    if status in (None, "queued"):
        total += spilled_count(doc, queue)
    return total


def job_dict(job: StoredJob, *, spilled: bool = False) -> dict[str, Any]:
    """One job as JSON: the document's fields, times as epoch seconds, no payload
    bytes; ``spilled``: it sits in a segment object (a deep backlog)."""
    claim = job.claim
    return {
        "id": job.id,
        "queue": job.queue,
        "status": job.status,
        "priority": job.priority,
        "seq": job.seq,
        "spilled": spilled,
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
        elif listed.segment is not None:
            status = "queued (spilled)"
        elif job.status == "waiting":
            status = f"waiting ({len(job.after)} parent{'' if len(job.after) == 1 else 's'})"
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
