"""``osqueue archive URL``: the archive's days, checking its objects, deleting old days.

The broker writes one archive object per commit that completed jobs, under
``archive/date=YYYY-MM-DD/hour=HH/``, and never deletes or reads one back, so
the archive grows until something expires it: a bucket lifecycle rule, or
this command (``--older-than-days N --delete``), which deletes whole UTC days
before today minus N.  Keys under ``archive/`` that are not archive objects are
left alone.

``--verify`` reads every archive object (those a ``--delete`` keeps) and
reports each line that is not what the broker writes, with its key and line
number, without stopping at the first; any such line makes the command fail
(``CorruptDocument``, exit code 6) once the report is printed.  It also counts
the jobs archived by the queue's current incarnation (the objects whose key
names the document's ``queue_id``) against the document: every job
``stats.completed`` counts must be in one of them, but for the ``done`` jobs
still in the document (their object may not be written yet).  Fewer is a
shortfall, reported with the same exit code; more is noted only (an older
``queue.json`` restored counts again what it completes again).
"""

from __future__ import annotations

import asyncio
import json
from collections import defaultdict
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from typing import Annotated

import typer

from osqueue.broker.archive.objects import (
    PREFIX,
    BadLine,
    corrupt_lines,
    parse_key,
    read_lines,
)
from osqueue.cli import exits
from osqueue.cli.options import AsJson, Url
from osqueue.errors import CorruptDocument, InvalidInput, NotFound
from osqueue.inspect.archive import RECORDS, read_objects
from osqueue.inspect.document import read_blob
from osqueue.state import Document, decode
from osqueue.storage import from_url
from osqueue.storage.port import Storage

#: deletes (and reads, with --verify) in flight at once
_DELETES = 32


@dataclass
class Counted:
    """The document's completions against the jobs its incarnation archived."""

    queue_id: str
    #: ``stats.completed``: every job completed since the document was created
    completed: int
    #: done jobs still in the document (archived or not yet)
    pending: int
    #: jobs (distinct ids) in the incarnation's archive objects, but those pending
    archived: int

    @property
    def shortfall(self) -> int:
        """Completed jobs that left the document and are in no archive object."""
        return max(0, self.completed - self.pending - self.archived)

    @property
    def surplus(self) -> int:
        return max(0, self.archived - (self.completed - self.pending))


@dataclass
class Verified:
    """What ``--verify`` found: objects and lines read, the bad lines, and the count."""

    objects: int = 0
    lines: int = 0
    bad: list[BadLine] = field(default_factory=list)
    #: None: no document to count against (or one from before queue ids)
    count: Counted | None = None


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
    verify: Annotated[
        bool,
        typer.Option(
            "--verify",
            envvar="OSQUEUE_VERIFY",
            help="Read every archive object (those kept) and report each corrupt line; "
            "fails (exit code 6) if there is one.",
        ),
    ] = False,
    count: Annotated[
        bool,
        typer.Option(
            "--count/--no-count",
            envvar="OSQUEUE_COUNT",
            help="With --verify: count the jobs the queue archived against stats.completed "
            "and fail (exit code 6) on a shortfall.  --no-count once days of the current "
            "queue were expired (they would count as missing).",
        ),
    ] = True,
    as_json: AsJson = False,
) -> None:
    """List the archive's days (objects per day); check them with --verify; delete old
    days with --delete."""
    if delete and older_than_days is None:
        raise InvalidInput("--delete needs --older-than-days", field="older_than_days")
    cutoff = None
    if older_than_days is not None:
        cutoff = (datetime.now(UTC).date() - timedelta(days=older_than_days)).isoformat()
    days, old, verified = asyncio.run(_expire(url, cutoff, delete, verify, count))
    deleted = sum(len(days[day]) for day in old) if delete else 0
    if as_json:
        rows = [{"date": d, "objects": len(days[d]), "old": d in old} for d in sorted(days)]
        out: dict[str, object] = {"days": rows, "deleted_objects": deleted}
        if verified is not None:
            out["verify"] = _verify_json(verified)
        typer.echo(json.dumps(out))
    else:
        _print_days(days, old, older_than_days, delete)
        if delete:
            typer.echo(
                f"deleted {exits.counted(deleted, 'object')} of {exits.counted(len(old), 'day')}"
                f" before {cutoff}"
            )
        if verified is not None:
            _print_verified(verified)
    if verified is not None and verified.bad:
        raise corrupt_lines(verified.bad, shown=1)  # the report above lists them all
    if verified is not None and verified.count is not None and verified.count.shortfall:
        raise _shortfall(verified.count)


def _shortfall(count: Counted) -> CorruptDocument:
    return CorruptDocument(
        f"archive shortfall: {exits.counted(count.shortfall, 'completed job')} of queue "
        f"{count.queue_id} in no archive object (stats.completed {count.completed}, done "
        f"in the document {count.pending}, archived {count.archived})",
        path=PREFIX,
    )


def _print_days(
    days: dict[str, list[str]], old: list[str], older_than_days: int | None, delete: bool
) -> None:
    mark = "deleted" if delete else f"older than {older_than_days} days"
    for day in sorted(days):
        suffix = f"  ({mark})" if day in old else ""
        typer.echo(f"{day}  {exits.counted(len(days[day]), 'object'):>16}{suffix}")
    total = sum(len(keys) for keys in days.values())
    typer.echo(f"{exits.counted(total, 'archive object')} in {exits.counted(len(days), 'day')}")


def _print_verified(verified: Verified) -> None:
    read = f"{exits.counted(verified.objects, 'object')}, {exits.counted(verified.lines, 'line')}"
    typer.echo(f"verified {read}: {exits.counted(len(verified.bad), 'corrupt line')}")
    for bad in verified.bad:
        typer.echo(f"  {bad}")
    count = verified.count
    if count is None:
        typer.echo("count check skipped (--no-count, or no queue document with a queue id)")
        return
    typer.echo(
        f"queue {count.queue_id}: {count.completed} completed, {count.pending} done in the "
        f"document, {exits.counted(count.archived, 'job')} archived"
    )
    if count.shortfall:
        typer.echo(f"  SHORTFALL: {exits.counted(count.shortfall, 'completed job')} not archived")
    elif count.surplus:
        typer.echo(
            f"  {count.surplus} more archived than completed (an older queue.json restored?)"
        )


def _verify_json(verified: Verified) -> dict[str, object]:
    return {
        "objects": verified.objects,
        "lines": verified.lines,
        "corrupt": [
            {"key": b.key, "line": b.line, "offset": b.offset, "reason": b.reason}
            for b in verified.bad
        ],
        "count": None if verified.count is None else _count_json(verified.count),
    }


def _count_json(count: Counted) -> dict[str, object]:
    return {
        "queue_id": count.queue_id,
        "completed": count.completed,
        "pending": count.pending,
        "archived": count.archived,
        "shortfall": count.shortfall,
        "surplus": count.surplus,
    }


async def _expire(
    url: str, cutoff: str | None, delete: bool, verify: bool, count: bool
) -> tuple[dict[str, list[str]], list[str], Verified | None]:
    """Archive object keys by day, the days before ``cutoff`` (deleted with
    ``delete``), and with ``verify`` what reading the kept objects found (with
    ``count``, the count against the document too); NotFound if there is no
    queue at ``url`` at all."""
    storage = from_url(url)
    try:
        # The document first: a job it no longer holds had its archive object
        # written before this read, so before the listing below.
        doc = await _document(storage, url) if verify and count else None
        keys = await storage.list(PREFIX)
        if not keys and doc is None:  # a queue that archived nothing yet, or a mistyped URL?
            await read_blob(storage, url)
        days: dict[str, list[str]] = defaultdict(list)
        for key in keys:
            parsed = parse_key(key)
            if parsed is not None:
                days[parsed.day].append(key)
        old = [day for day in sorted(days) if cutoff is not None and day < cutoff]
        if delete:
            doomed = [key for day in old for key in days[day]]
            for start in range(0, len(doomed), _DELETES):
                chunk = doomed[start : start + _DELETES]
                await asyncio.gather(*(storage.delete(key) for key in chunk))
        verified = None
        if verify:
            gone = set(old) if delete else set()
            kept = sorted(
                key for day, day_keys in days.items() if day not in gone for key in day_keys
            )
            verified = await _verify(storage, kept, doc)
    finally:
        await storage.close()
    return days, old, verified


async def _document(storage: Storage, url: str) -> Document | None:
    """The queue document; None if there is none."""
    try:
        return decode((await read_blob(storage, url)).data)
    except NotFound:
        return None


async def _verify(storage: Storage, keys: list[str], doc: Document | None) -> Verified:
    """Read ``keys`` (a chunk at a time), check every line, and count the jobs the
    incarnation of ``doc`` archived against its completions."""
    verified = Verified()
    queue_id = doc.queue_id if doc is not None else None
    archived: set[str] = set()
    for start in range(0, len(keys), _DELETES):
        chunk = keys[start : start + _DELETES]
        blobs = await read_objects(storage, chunk, at_once=_DELETES)
        for key, data in zip(chunk, blobs, strict=True):
            if data is None:  # deleted since it was listed (a lifecycle rule)
                continue
            records, bad = read_lines(data, key, RECORDS)
            verified.objects += 1
            verified.lines += len(records) + len(bad)
            verified.bad.extend(bad)
            parsed = parse_key(key)
            if parsed is not None and parsed.queue_id == queue_id:
                archived.update(r.id for r in records)
    if doc is not None and queue_id is not None:
        done = doc.index.done
        verified.count = Counted(queue_id, doc.stats.completed, len(done), len(archived - done))
    return verified
