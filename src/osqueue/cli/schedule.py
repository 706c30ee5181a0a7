"""``osqueue schedule URL add|list|remove|pause|resume``: periodic jobs, held in
the queue document.

``add``, ``remove``, ``pause`` and ``resume`` go through the broker (only it
writes the document; ``pause`` and ``resume`` read the schedule through the
broker and put it back with ``paused`` set); ``list`` reads the document from
storage, so it works while no broker runs.
"""

from __future__ import annotations

import asyncio
import enum
import json
import re
import time
from typing import Annotated, Any

import typer
from rich.table import Table

from osqueue.api import ScheduleInfo
from osqueue.cli import exits
from osqueue.cli.console import shown, stdout
from osqueue.cli.options import AsJson, Url, connecting
from osqueue.errors import InvalidInput, NotFound
from osqueue.inspect.admin import scheduling_of, set_paused
from osqueue.inspect.document import read_document
from osqueue.inspect.options import ClientOptions, open_client
from osqueue.inspect.status import age_text
from osqueue.state.schedules import schedule_info


class ScheduleAction(enum.StrEnum):
    add = "add"
    list = "list"
    remove = "remove"
    pause = "pause"
    resume = "resume"


class CatchUpChoice(enum.StrEnum):
    once = "once"
    skip = "skip"


_UNITS = {"": 1.0, "s": 1.0, "m": 60.0, "h": 3600.0, "d": 86400.0}
_DURATION = re.compile(r"^\s*(\d+(?:\.\d+)?)\s*([smhd]?)\s*$")


def parse_every(text: str) -> float:
    """``30s``, ``5m``, ``1h``, ``2d`` or plain seconds -> seconds."""
    m = _DURATION.match(text)
    if m is None:
        raise InvalidInput(f"{text!r} is not a duration such as 30s, 5m, 1h or 2d", field="every")
    return float(m.group(1)) * _UNITS[m.group(2)]


@connecting
def schedule(
    url: Url,
    action: Annotated[
        ScheduleAction,
        typer.Argument(help="add (or replace) a schedule, list them, remove, pause or resume one."),
    ],
    name: Annotated[
        str | None,
        typer.Argument(
            help="The schedule's name (add, remove, pause, resume).", show_default=False
        ),
    ] = None,
    cron: Annotated[
        str | None,
        typer.Option("--cron", envvar="OSQUEUE_CRON", help='Five cron fields, e.g. "*/5 * * * *".'),
    ] = None,
    every: Annotated[
        str | None,
        typer.Option(
            "--every",
            envvar="OSQUEUE_EVERY",
            help="Fire every 30s, 5m, 1h, 2d (on the multiples since the epoch, UTC).",
        ),
    ] = None,
    tz: Annotated[
        str | None,
        typer.Option("--tz", envvar="OSQUEUE_TZ", help="Time zone of --cron (default UTC)."),
    ] = None,
    queue: Annotated[
        str | None,
        typer.Option("--queue", "-q", envvar="OSQUEUE_QUEUE", help="Queue the jobs go to (add)."),
    ] = None,
    data: Annotated[
        str,
        typer.Option("--data", "-d", envvar="OSQUEUE_DATA", help="Each job's payload (UTF-8)."),
    ] = "",
    priority: Annotated[
        int, typer.Option("--priority", "-p", envvar="OSQUEUE_PRIORITY", help="Lower runs first.")
    ] = 0,
    max_attempts: Annotated[
        int,
        typer.Option("--max-attempts", envvar="OSQUEUE_MAX_ATTEMPTS", min=1, help="Then dead."),
    ] = 5,
    catch_up: Annotated[
        CatchUpChoice,
        typer.Option(
            "--catch-up",
            envvar="OSQUEUE_CATCH_UP",
            help="Ticks missed while no broker served: one job for all (once) or none (skip).",
        ),
    ] = CatchUpChoice.once,
    as_json: AsJson = False,
    *,
    options: ClientOptions,
) -> None:
    """Add, list, remove, pause or resume periodic jobs; each tick pushes exactly one job.

    Examples: osqueue schedule URL add nightly --cron "0 3 * * *" --tz Europe/Paris
    --queue reports --data '{"kind": "nightly"}';  osqueue schedule URL add beat
    --every 30s --queue health;  osqueue schedule URL list;  osqueue schedule URL
    remove beat;  osqueue schedule URL pause beat (its ticks are skipped, no job);
    osqueue schedule URL resume beat (from its next tick; missed ticks never fire).
    """
    if action is ScheduleAction.list:
        doc = asyncio.run(read_document(url))
        infos = [schedule_info(s) for s in sorted(doc.schedules, key=lambda s: s.name)]
        _show(infos, as_json)
        return
    if name is None:
        raise InvalidInput(f"{action.value} needs the schedule's NAME", field="name")
    if action is ScheduleAction.remove:
        removed = asyncio.run(_remove(options, name))
        if not removed:
            raise NotFound(
                f"no schedule {name!r} at {url} (`osqueue schedule {url} list` shows them)"
            )
        typer.echo(f"removed schedule {name}")
        return
    if action in (ScheduleAction.pause, ScheduleAction.resume):
        paused = action is ScheduleAction.pause
        info = asyncio.run(_set_paused(options, name, paused))
        if as_json:
            typer.echo(json.dumps(info_dict(info)))
        elif paused:
            typer.echo(f"paused schedule {info.name}: its ticks push no job until resumed")
        else:
            typer.echo(f"resumed schedule {info.name}: next run {_when(info.next_run_at)}")
        return
    if queue is None:
        raise InvalidInput("add needs --queue", field="queue")
    if (cron is None) == (every is None):
        raise InvalidInput("give exactly one of --cron and --every", field="cron")
    every_s = parse_every(every) if every is not None else None
    spec: dict[str, Any] = {
        "queue": queue,
        "payload": data.encode(),
        "cron": cron,
        "every_s": every_s,
        "tz": tz,
        "priority": priority,
        "max_attempts": max_attempts,
        "catch_up": catch_up.value,
    }
    info = asyncio.run(_add(options, name, spec))
    if as_json:
        typer.echo(json.dumps(info_dict(info)))
    else:
        typer.echo(f"scheduled {info.name}: next run {_when(info.next_run_at)}")


async def _add(options: ClientOptions, name: str, spec: dict[str, Any]) -> ScheduleInfo:
    async with open_client(options) as client:
        return await scheduling_of(client).schedule(name, **spec)  # type: ignore[no-any-return]


async def _set_paused(options: ClientOptions, name: str, paused: bool) -> ScheduleInfo:
    async with open_client(options) as client:
        return await set_paused(client, name, paused, options.url)


async def _remove(options: ClientOptions, name: str) -> bool:
    async with open_client(options) as client:
        return bool(await scheduling_of(client).unschedule(name))


def info_dict(info: ScheduleInfo) -> dict[str, Any]:
    """One schedule as JSON (times as epoch seconds; the payload as text when it is)."""
    try:
        payload: str | None = info.payload.decode()
    except UnicodeDecodeError:
        payload = None
    return {
        "name": info.name,
        "queue": info.queue,
        "cron": info.cron,
        "tz": info.tz,
        "every_s": info.every_s,
        "catch_up": info.catch_up,
        "priority": info.priority,
        "max_attempts": info.max_attempts,
        "payload": payload,
        "payload_bytes": len(info.payload),
        "next_run_at": info.next_run_at,
        "last_run_at": info.last_run_at,
        "last_job_id": info.last_job_id,
        "note": info.note,
        "paused": info.paused,
    }


def _when(ts: float | None) -> str:
    if ts is None:
        return "-"
    text = time.strftime("%Y-%m-%d %H:%M:%S", time.gmtime(ts))
    delta = ts - time.time()
    rel = f"in {age_text(delta)}" if delta >= 0 else f"{age_text(-delta)} ago"
    return f"{text}Z ({rel})"


def _show(infos: list[ScheduleInfo], as_json: bool) -> None:
    if as_json:
        for info in infos:
            typer.echo(json.dumps(info_dict(info)))
        return
    table = Table(show_edge=False, pad_edge=False)
    for column in ("name", "queue", "when", "next run", "last run", "last job", "state", "note"):
        table.add_column(column, no_wrap=column not in ("note",), overflow="fold")
    for info in infos:
        when = (
            info.cron + (f" ({info.tz})" if info.tz else "")
            if info.cron
            else f"every {info.every_s:g}s"
        )
        table.add_row(
            shown(info.name),
            shown(info.queue),
            shown(when),
            _when(info.next_run_at),
            _when(info.last_run_at),
            shown(info.last_job_id),
            "paused" if info.paused else "active",
            shown(exits.one_line(info.note or "")),
        )
    console = stdout()
    console.print(table)
    if not infos:
        console.print("[dim]no schedules[/]")
