"""``osqueue top URL``: a live terminal view of a queue, refreshed every second.

Per queue: depth, ready, claimed, dead, push/s, complete/s and the oldest
waiting age; the broker (address, epoch, lease, commit rate); the workers
holding jobs with their heartbeat ages.  ``q`` quits (Ctrl-C too).

Like ``osqueue status`` it reads the queue document from storage, so it needs
no broker and never disturbs one.  Rates are counter deltas between two reads.
The document counts pushes and completions per queue (its ``queue_totals``,
read by :func:`osqueue.inspect.history.flows_of`), so every queue has its
own push/s and complete/s from the second read on.  The commit rate is
document versions per second; ops per commit and the p99 commit time come
from the summary the serving broker keeps in the document
(:class:`~osqueue.inspect.brokerlog.DocumentMetrics`).
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import sys
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from typing import Annotated, Any

import typer
from rich.console import Console, Group
from rich.live import Live
from rich.table import Table
from rich.text import Text

from osqueue.cli.console import printable, screen, shown
from osqueue.cli.options import Url
from osqueue.cli.status import queue_cell, set_aside_text
from osqueue.errors import OsqueueError
from osqueue.inspect.brokerlog import BrokerLog, CommitFigures, CommitMetrics, DocumentMetrics
from osqueue.inspect.history import FLOWS, Flow, flows_of, rate
from osqueue.inspect.snapshot import Snapshot, SnapshotSource
from osqueue.inspect.status import age_text

#: at most this many workers are listed (the busiest first)
MAX_WORKERS = 15


def top(
    url: Url,
    interval_s: Annotated[
        float,
        typer.Option("--interval-s", envvar="OSQUEUE_INTERVAL_S", min=0.1, help="Refresh period."),
    ] = 1.0,
) -> None:
    """A live view of the queue at URL: queues, rates, broker, workers; q quits.

    Reads the queue document from storage every --interval-s (no broker needed).
    """
    asyncio.run(_run(url, interval_s))


@dataclass(slots=True)
class Rates:
    """Per-second rates between the last two reads (None until there are two)."""

    total: dict[str, float] | None = None
    per_queue: dict[str, dict[str, float]] = field(default_factory=dict)


class RateMeter:
    """Counter deltas between consecutive snapshots."""

    def __init__(self) -> None:
        self._last: tuple[float, Flow, dict[str, Flow]] | None = None

    def update(self, snapshot: Snapshot) -> Rates:
        total, per_queue = flows_of(snapshot)
        t = snapshot.read_at
        last, self._last = self._last, (t, total, per_queue)
        if last is None:
            return Rates()
        t0, total0, per_queue0 = last
        seconds = t - t0
        rates = Rates(total={n: rate(total0.get(n), total.get(n), seconds) for n in FLOWS})
        for q, flow in per_queue.items():
            before = per_queue0.get(q, Flow())
            rates.per_queue[q] = {n: rate(before.get(n), flow.get(n), seconds) for n in FLOWS}
        return rates


def _rate(rates: dict[str, float] | None, name: str) -> str:
    return "-" if rates is None else f"{rates[name]:,.1f}"


def render(
    snapshot: Snapshot,
    rates: Rates,
    commit_rate: float | None,
    figures: CommitFigures | None,
    now: float,
    problem: str | None = None,
    screen_of: Console | None = None,
) -> Group:
    status = snapshot.status(now)
    head = Text()
    head.append("osqueue top", style="bold")
    head.append("  q quits", style="dim")
    head.append(
        f"  version {status['version']:,}  {time.strftime('%H:%M:%S', time.gmtime(now))} UTC"
    )
    # the URL last: a narrow terminal cuts it, not what the screen is about
    head.append(f"  {printable(snapshot.url)}\n", style="bold")
    head.append_text(_broker_line(status, commit_rate, figures))
    if problem:
        head.append(f"\nlast read failed: {printable(problem)}", style="red")
    aside = set_aside_text(status["set_aside_segments"])
    upper = Group(head, _queue_table(status, rates), *([aside] if aside is not None else []))
    room: int | None = None
    if screen_of is not None:  # the rows left for workers below the rest and their header
        used = len(screen_of.render_lines(upper, screen_of.options, pad=False))
        room = screen_of.height - used - 2
    return Group(upper, _worker_table(snapshot, now, room))


def _broker_line(
    status: dict[str, Any], commit_rate: float | None, figures: CommitFigures | None
) -> Text:
    line = Text()
    broker = status["broker"]
    if broker is None:
        line.append("broker: none yet", style="yellow")
    else:
        left = broker["lease_remaining_s"]
        style = "green" if broker["live"] else "yellow"
        line.append(f"broker {printable(broker['address'] or '(stopped)')}", style=style)
        lease = f"{age_text(left)} left" if left > 0 else f"expired {age_text(-left)} ago"
        line.append(f"  epoch {broker['epoch']}  lease {lease}")
    commits = "-" if commit_rate is None else f"{commit_rate:.1f}"
    ops = (
        "-"
        if figures is None or figures.ops_per_commit is None
        else f"{figures.ops_per_commit:.1f}"
    )
    p99 = (
        "-"
        if figures is None or figures.p99_commit_s is None
        else f"{figures.p99_commit_s * 1000:.1f} ms"
    )
    line.append(f"\ncommits/s {commits}  ops/commit {ops}  p99 commit {p99}")
    return line


def _queue_table(status: dict[str, Any], rates: Rates) -> Table:
    table = Table(show_edge=False, pad_edge=False, title_justify="left")
    columns = ("queue", "depth", "ready", "claimed", "dead", "push/s", "complete/s", "oldest")
    for column in columns:
        table.add_column(column, justify="left" if column == "queue" else "right")
    for name, q in status["queues"].items():
        per_queue = rates.per_queue.get(name)
        table.add_row(
            queue_cell(name, q),
            f"{q['depth']:,}",
            f"{q['ready']:,}",
            f"{q['claimed']:,}",
            Text(f"{q['dead']:,}", style="red" if q["dead"] else ""),
            _rate(per_queue, "pushed"),
            _rate(per_queue, "completed"),
            age_text(q["oldest_age_s"]),
        )
    table.add_row(
        Text("total", style="bold"),
        f"{status['depth']:,}",
        "",
        f"{status['claimed']:,}",
        f"{status['dead']:,}",
        _rate(rates.total, "pushed"),
        _rate(rates.total, "completed"),
        age_text(status["oldest_age_s"]),
    )
    return table


def _worker_table(snapshot: Snapshot, now: float, room: int | None = None) -> Table | Text:
    """The workers holding jobs, busiest first: at most ``MAX_WORKERS`` rows and at
    most ``room`` lines (the screen's), the last saying how many were left out."""
    holders = snapshot.holders(now)
    if not holders:
        return Text("no worker holds a job", style="dim")
    fits = MAX_WORKERS if room is None else max(0, min(MAX_WORKERS, room))
    shown_n = len(holders) if len(holders) <= fits else max(0, fits - 1)
    if shown_n == 0 and fits < 1:
        return Text(f"… {len(holders)} workers (no room: a taller terminal shows them)")
    table = Table(show_edge=False, pad_edge=False)
    for column in ("worker", "jobs", "queues", "oldest heartbeat", "newest heartbeat"):
        table.add_column(
            column,
            justify="left" if column in ("worker", "queues") else "right",
            no_wrap=True,
            overflow="ellipsis",
        )
    for h in holders[:shown_n]:
        table.add_row(
            shown(h.worker),
            f"{h.jobs:,}",
            shown(", ".join(h.queues)),
            age_text(h.oldest_heartbeat_age_s),
            age_text(h.newest_heartbeat_age_s),
        )
    if len(holders) > shown_n:
        table.add_row(Text(f"… {len(holders) - shown_n} more", style="dim"), "", "", "", "")
    return table


@contextlib.contextmanager
def _keys(on_quit: Callable[[], None]) -> Iterator[None]:
    """Call ``on_quit`` when ``q`` is typed (stdin in cbreak mode, read by the loop
    without blocking); nothing when stdin is not a terminal."""
    if not sys.stdin.isatty():
        yield
        return
    import termios
    import tty

    fd = sys.stdin.fileno()
    saved = termios.tcgetattr(fd)
    loop = asyncio.get_running_loop()

    def readable() -> None:
        with contextlib.suppress(OSError):
            if b"q" in os.read(fd, 64).lower():
                on_quit()

    tty.setcbreak(fd)
    loop.add_reader(fd, readable)
    try:
        yield
    finally:
        loop.remove_reader(fd)
        termios.tcsetattr(fd, termios.TCSADRAIN, saved)


async def _run(url: str, interval_s: float, metrics: CommitMetrics | None = None) -> None:
    source = SnapshotSource(url, refresh_s=interval_s)
    brokerlog = BrokerLog()
    source.observe(brokerlog.observe)
    meter = RateMeter()
    if metrics is None:
        from_document = DocumentMetrics()
        source.observe(from_document.observe)
        metrics = from_document
    stop = asyncio.Event()
    try:
        snapshot = await source.refresh()  # no queue at URL: one error line, not a blank screen
        rates = meter.update(snapshot)
        problem: str | None = None
        with _keys(stop.set), Live(console=screen(), screen=True, auto_refresh=False) as live:
            while True:
                figures = await metrics.figures()
                frame = render(
                    snapshot,
                    rates,
                    brokerlog.commit_rate(),
                    figures,
                    time.time(),
                    problem,
                    screen_of=live.console,
                )
                live.update(frame, refresh=True)
                with contextlib.suppress(TimeoutError):
                    await asyncio.wait_for(stop.wait(), source.next_delay_s())
                if stop.is_set():
                    break
                try:
                    snapshot = await source.refresh()
                except OsqueueError as exc:
                    problem = str(exc)  # keep showing the last good read
                else:
                    problem = None
                    rates = meter.update(snapshot)
    finally:
        await source.close()
