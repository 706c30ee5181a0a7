"""``osqueue status URL``: the queue at a glance, read from storage (no broker needed)."""

from __future__ import annotations

import asyncio
import json
import time
from typing import Annotated, Any

import typer
from rich.console import Group
from rich.live import Live
from rich.table import Table
from rich.text import Text

from osqueue.cli.console import printable, screen, shown, stdout
from osqueue.cli.options import AsJson, Url
from osqueue.inspect.document import read_document
from osqueue.inspect.status import age_text, status_of


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
                f"\n  {e['key']}  queue {e['queue']}{_seqs(e)}  {e['jobs']:,} jobs  "
                f"since {e['at']}: {e['reason']}"
            )
        )
    return text


def _seqs(entry: dict[str, Any]) -> str:
    """`` p<priority> seq <first>-<last>`` of a set-aside entry (none for waiting children)."""
    if entry["first_seq"] is None:
        return ""
    return f" p{entry['priority']} seq {entry['first_seq']}-{entry['last_seq']}"
