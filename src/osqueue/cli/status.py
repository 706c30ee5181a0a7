"""``osqueue status URL``: the queue at a glance, read from storage (no broker needed)."""

from __future__ import annotations

import asyncio
import json
import time
from datetime import UTC, datetime
from typing import Annotated, Any

import typer
from rich.console import Group
from rich.live import Live
from rich.table import Table
from rich.text import Text

from osqueue.api import QueueStats, Stats
from osqueue.cli.console import printable, screen, shown, stdout
from osqueue.cli.options import AsJson, Url
from osqueue.cli.snapshot import read_document
from osqueue.state import Document, stats_of


def status(
    url: Url,
    as_json: AsJson = False,
    watch: Annotated[
        bool,
        typer.Option("--watch", "-w", envvar="OSQUEUE_WATCH", help="Refresh until Ctrl-C."),
    ] = False,
    interval_s: Annotated[
        float,
        typer.Option(
            "--interval-s", envvar="OSQUEUE_INTERVAL_S", min=0.1, help="Refresh period (--watch)."
        ),
    ] = 1.0,
) -> None:
    """Depth per queue, claimed, dead, oldest waiting age, version, broker address and lease.

    Jobs of a deep backlog that sit in segment objects count in the depth and
    show as "spilled" (counted from the document's references; no segment is
    read).  Segments set aside (their object missing or failing its check) are
    listed with their key and job count; their jobs are not in the depth.

    Reads the queue document directly from storage, so it works with no broker
    running.  --json prints one JSON object (one per refresh with --watch).
    """
    if watch:
        try:
            asyncio.run(_watch(url, as_json, interval_s))
        except KeyboardInterrupt:
            return  # Ctrl-C is how --watch ends
        return
    snapshot = status_of(url, asyncio.run(read_document(url)), time.time())
    if as_json:
        typer.echo(json.dumps(snapshot))
    else:
        stdout().print(render(snapshot))


async def _watch(url: str, as_json: bool, interval_s: float) -> None:
    if as_json:
        while True:
            snapshot = status_of(url, await read_document(url), time.time())
            typer.echo(json.dumps(snapshot))
            await asyncio.sleep(interval_s)
    with Live(Text("reading..."), console=screen(), auto_refresh=False, transient=False) as live:
        while True:
            snapshot = status_of(url, await read_document(url), time.time())
            live.update(render(snapshot), refresh=True)
            await asyncio.sleep(interval_s)


def status_of(url: str, doc: Document, now: float) -> dict[str, Any]:
    """The status as a JSON-ready dict (the ``--json`` output)."""
    doc.index.promote_due(doc.jobs, now)
    stats: Stats = stats_of(doc, now)
    owner = doc.broker
    broker: dict[str, Any] | None = None
    if owner is not None:
        until = owner.lease_until.timestamp()
        broker = {
            "id": owner.id,
            "address": owner.address,
            "epoch": owner.epoch,
            "lease_until": _iso(until),
            "lease_remaining_s": round(until - now, 3),
            "live": until > now and owner.address is not None,
        }
    queues = {
        name: {
            "depth": q.depth,
            "ready": q.depth - q.delayed,
            "delayed": q.delayed,
            "spilled": q.spilled,
            "claimed": q.claimed,
            "dead": q.dead,
            "oldest_age_s": None if q.oldest_age_s is None else round(q.oldest_age_s, 3),
            "waiting": q.waiting,
            "paused": q.paused,
            "set_aside": q.set_aside,
            **_totals(q),
        }
        for name, q in sorted(stats.queues.items())
    }
    aside = [
        {
            "key": e.ref.key,
            "queue": e.ref.queue,
            "priority": e.ref.priority,
            "first_seq": e.ref.first_seq,
            "last_seq": e.ref.last_seq,
            "jobs": e.ref.remaining,
            "reason": e.reason,
            "at": e.at.isoformat().replace("+00:00", "Z"),
        }
        for e in doc.segments.set_aside_of()
    ]
    ages = [q["oldest_age_s"] for q in queues.values() if q["oldest_age_s"] is not None]
    return {
        "url": url,
        "version": doc.version,
        "document_bytes": stats.document_bytes,
        "tombstones": stats.tombstones,
        "broker": broker,
        "depth": stats.depth,
        "spilled": sum(q.spilled for q in stats.queues.values()),
        "segments": sum(1 for _ in doc.segments),
        "set_aside": sum(entry["jobs"] for entry in aside),
        "set_aside_segments": aside,
        "claimed": stats.claimed,
        "dead": stats.dead,
        "oldest_age_s": max(ages) if ages else None,
        "pushed": doc.stats.pushed,
        "completed": doc.stats.completed,
        "failed": doc.stats.failed,
        "reclaimed": doc.stats.reclaimed,
        "queues": queues,
    }


def _totals(q: QueueStats) -> dict[str, int]:
    """A queue's counters over its life (kept by the document per known queue)."""
    return {
        "pushed_total": q.pushed_total,
        "completed_total": q.completed_total,
        "failed_total": q.failed_total,
        "dead_total": q.dead_total,
    }


def queue_cell(name: str, q: dict[str, Any]) -> Text:
    """A queue's name as the tables show it, marked when the queue is paused."""
    cell = shown(name)
    if q.get("paused"):
        cell.append(" paused", style="bold yellow")
    return cell


def render(snapshot: dict[str, Any]) -> Group:
    """The status as rich renderables: a header and a table per queue."""
    broker = snapshot["broker"]
    head = Text()
    head.append(printable(snapshot["url"]), style="bold")
    segments = snapshot.get("segments", 0)
    head.append(
        f"  version {snapshot['version']}  {snapshot['document_bytes']:,} bytes"
        f"  {snapshot['tombstones']:,} dedupe tombstones"
        + (f"  {snapshot['spilled']:,} jobs in {segments:,} segments" if segments else "")
        + "\n"
    )
    if broker is None:
        head.append("broker: none (no broker has owned this queue yet)", style="yellow")
    else:
        remaining = broker["lease_remaining_s"]
        lease = (
            f"lease {age_text(remaining)} left"
            if remaining > 0
            else f"lease expired {age_text(-remaining)} ago"
        )
        style = "green" if broker["live"] else "yellow"
        address = broker["address"] or "(stopped: no address)"
        head.append(f"broker: {printable(address)}", style=style)
        head.append(f"  epoch {broker['epoch']}  {lease}  until {broker['lease_until']}")
        head.append(f"  id {printable(broker['id'])}", style="dim")
    head.append(
        f"\npushed {snapshot['pushed']:,}  completed {snapshot['completed']:,}  "
        f"failed {snapshot['failed']:,}  reclaimed {snapshot['reclaimed']:,}"
    )
    table = Table(show_edge=False, pad_edge=False)
    columns = ("queue", "depth", "ready", "delayed", "spilled", "claimed", "dead", "oldest waiting")
    for column in columns:
        table.add_column(column, justify="left" if column == "queue" else "right")
    for name, q in snapshot["queues"].items():
        table.add_row(
            queue_cell(name, q),
            f"{q['depth']:,}",
            f"{q['ready']:,}",
            f"{q['delayed']:,}",
            Text(f"{q['spilled']:,}", style="dim" if not q["spilled"] else ""),
            f"{q['claimed']:,}",
            Text(f"{q['dead']:,}", style="red" if q["dead"] else ""),
            age_text(q["oldest_age_s"]),
        )
    table.add_row(
        Text("total", style="bold"),
        f"{snapshot['depth']:,}",
        "",
        "",
        f"{snapshot['spilled']:,}",
        f"{snapshot['claimed']:,}",
        f"{snapshot['dead']:,}",
        age_text(snapshot["oldest_age_s"]),
    )
    aside = set_aside_text(snapshot.get("set_aside_segments", []))
    return Group(head, table, aside) if aside is not None else Group(head, table)


def set_aside_text(entries: list[dict[str, Any]]) -> Text | None:
    """The segments set aside, one line each (key, job count, reason), or None."""
    if not entries:
        return None
    jobs = sum(e["jobs"] for e in entries)
    text = Text(
        f"{len(entries):,} segments set aside ({jobs:,} jobs not claimable; "
        "restore each object, then `osqueue segments readmit URL KEY`):",
        style="red",
    )
    for e in entries:
        text.append(
            printable(
                f"\n  {e['key']}  queue {e['queue']} p{e['priority']} seq {e['first_seq']}-"
                f"{e['last_seq']}  {e['jobs']:,} jobs  since {e['at']}: {e['reason']}"
            )
        )
    return text


def age_text(seconds: float | None) -> str:
    """An age or a span, one way everywhere: ``4.2s``, ``43s``, ``1m43s``, ``2m0s``,
    ``15m27s``, ``3h5m``, ``2d4h`` (or ``-`` for none)."""
    if seconds is None:
        return "-"
    if seconds < 10:
        return f"{max(0.0, seconds):.1f}s"
    total = int(seconds)
    if total < 60:
        return f"{total}s"
    minutes, secs = divmod(total, 60)
    if minutes < 60:
        return f"{minutes}m{secs}s"
    hours, minutes = divmod(minutes, 60)
    if hours < 24:
        return f"{hours}h{minutes}m"
    days, hours = divmod(hours, 24)
    return f"{days}d{hours}h"


def _iso(ts: float) -> str:
    return datetime.fromtimestamp(ts, UTC).isoformat(timespec="milliseconds").replace("+00:00", "Z")
