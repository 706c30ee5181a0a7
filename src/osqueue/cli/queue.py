"""``osqueue queue URL NAME``: a queue's settings: pause, rate, caps on claimed jobs.

With no option it shows the settings (read from the document, no broker
needed); with options it changes them through the broker, in one op.  The
setting options have variables of their own (``OSQUEUE_QUEUE_RATE``,
``OSQUEUE_QUEUE_BURST``...), so a variable meant for another command (the
worker's ``OSQUEUE_BURST``) never changes a queue that was only to be shown.
"""

from __future__ import annotations

import asyncio
import json
import re
from dataclasses import asdict
from typing import Annotated, Any

import typer

from osqueue.api import QueueSettings
from osqueue.cli.options import Url, connecting
from osqueue.errors import InvalidInput, OsqueueError
from osqueue.inspect.document import read_document
from osqueue.inspect.options import ClientOptions, open_client
from osqueue.state.limits import settings_info

_PER = {"s": 1.0, "m": 60.0, "h": 3600.0}
_RATE = re.compile(r"^\s*(\d+(?:\.\d+)?)\s*(?:/\s*([smh]))?\s*$")


def parse_rate(text: str) -> float:
    """``50/s``, ``3000/m``, ``100/h`` or a plain number (per second) -> jobs per
    second; ``0`` or ``off`` removes the limit."""
    if text.strip().lower() in ("off", "none"):
        return 0.0
    m = _RATE.match(text)
    if m is None:
        raise InvalidInput(f"{text!r} is not a rate such as 50/s, 3000/m or 100/h", field="rate")
    return float(m.group(1)) / _PER[m.group(2) or "s"]


@connecting
def queue(
    url: Url,
    name: Annotated[str, typer.Argument(help="The queue.", show_default=False)],
    rate: Annotated[
        str | None,
        typer.Option(
            "--rate",
            envvar="OSQUEUE_QUEUE_RATE",
            help="Claims per second at most: 50/s, 3000/m, 100/h (0 or off: no limit).",
        ),
    ] = None,
    burst: Annotated[
        int | None,
        typer.Option(
            "--burst",
            envvar="OSQUEUE_QUEUE_BURST",
            min=0,
            help="Claims allowed at once after a quiet spell (default: one second's rate).",
        ),
    ] = None,
    max_claimed: Annotated[
        int | None,
        typer.Option(
            "--max-claimed",
            envvar="OSQUEUE_QUEUE_MAX_CLAIMED",
            min=0,
            help="Jobs claimed at once across all workers (0: no cap).",
        ),
    ] = None,
    max_claimed_per_group: Annotated[
        int | None,
        typer.Option(
            "--max-claimed-per-group",
            envvar="OSQUEUE_QUEUE_MAX_CLAIMED_PER_GROUP",
            min=0,
            help="Jobs of one group (push --group) claimed at once (0: no cap).",
        ),
    ] = None,
    result_ttl_s: Annotated[
        float | None,
        typer.Option(
            "--result-ttl-s",
            envvar="OSQUEUE_QUEUE_RESULT_TTL_S",
            min=0.0,
            help="Keep the queue's finished jobs' answers this long unless their push says"
            " (0: the broker's setting again).",
            show_default=False,
        ),
    ] = None,
    paused: Annotated[
        bool | None,
        typer.Option(
            "--pause/--resume",
            envvar="OSQUEUE_QUEUE_PAUSED",
            help="Stop claims from the queue (pushes still land), or let them go on.",
            show_default=False,
        ),
    ] = None,
    remove: Annotated[
        bool,
        typer.Option(
            "--remove",
            help="Forget the queue: status, top, the dashboard and the metrics stop "
            "listing it (refused while it holds live jobs or schedules).",
        ),
    ] = False,
    as_json: Annotated[
        bool, typer.Option("--json", envvar="OSQUEUE_JSON", help="Print JSON.")
    ] = False,
    *,
    options: ClientOptions,
) -> None:
    """Show or change a queue's settings, enforced at claim time by the broker.

    A queue is listed from its first push or setting until --remove.

    Example: osqueue queue URL index --rate 50/s --max-claimed 10
    --max-claimed-per-group 1;  osqueue queue URL emails --pause.
    """
    changes: dict[str, Any] = {
        "rate_per_s": parse_rate(rate) if rate is not None else None,
        "burst": burst,
        "max_claimed": max_claimed,
        "max_claimed_per_group": max_claimed_per_group,
        "paused": paused,
        "result_ttl_s": result_ttl_s,
    }
    if remove:
        if any(v is not None for v in changes.values()):
            raise InvalidInput("give --remove alone, without a setting", field="remove")
        asyncio.run(_set(options, name, {"remove": True}))
        typer.echo(json.dumps({"queue": name, "removed": True}) if as_json else f"{name}: removed")
        return
    if all(v is None for v in changes.values()):
        doc = asyncio.run(read_document(url))
        settings = settings_info(name, doc.queue_settings.get(name))
    else:
        settings = asyncio.run(_set(options, name, changes))
    if as_json:
        typer.echo(json.dumps(asdict(settings)))
    else:
        typer.echo(describe(settings))


async def _set(options: ClientOptions, name: str, changes: dict[str, Any]) -> QueueSettings:
    async with open_client(options) as client:
        set_queue = getattr(client, "set_queue", None)
        if set_queue is None:
            raise OsqueueError(f"this client ({type(client).__name__}) has no queue settings")
        result: QueueSettings = await set_queue(name, **changes)
        return result


def describe(s: QueueSettings) -> str:
    """One line: ``index: paused, rate 50/s (burst 50), max claimed 10, ...``."""
    parts = ["paused" if s.paused else "running"]
    if s.rate_per_s is not None:
        burst = f" (burst {s.burst})" if s.burst is not None else ""
        parts.append(f"rate {s.rate_per_s:g}/s{burst}")
    if s.max_claimed is not None:
        parts.append(f"max claimed {s.max_claimed}")
    if s.max_claimed_per_group is not None:
        parts.append(f"max claimed per group {s.max_claimed_per_group}")
    if len(parts) == 1:
        parts.append("no limits")
    if s.result_ttl_s is not None:
        parts.append(f"results kept {s.result_ttl_s:g}s")
    return f"{s.queue}: {', '.join(parts)}"
