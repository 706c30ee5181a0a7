"""The few changes both the ``osqueue`` command and the dashboard make through the
broker (only the broker writes the document): retrying or purging dead jobs,
pausing or resuming a schedule.  Each takes an open client
(:func:`~osqueue.inspect.options.open_client`)."""

from __future__ import annotations

import enum
from typing import Any

from osqueue.api import ScheduleInfo
from osqueue.errors import NotFound, OsqueueError


class DeadAction(enum.StrEnum):
    retry = "retry"
    purge = "purge"


async def on_dead(client: object, action: DeadAction, ids: list[str] | None) -> int:
    """Retry or purge the dead jobs ``ids`` (None: all of them) through ``client``;
    how many there were."""
    method = getattr(client, f"{action.value}_dead", None)
    if method is None:
        raise OsqueueError(f"this client ({type(client).__name__}) cannot {action.value} dead jobs")
    count = await method(ids)
    if not isinstance(count, int):
        raise OsqueueError(f"{action.value}_dead returned {count!r}, expected a count")
    return count


def spec_of(info: ScheduleInfo) -> dict[str, Any]:
    """The keyword arguments of ``schedule`` that put ``info`` back as it is."""
    return {
        "queue": info.queue,
        "payload": info.payload,
        "cron": info.cron,
        "every_s": info.every_s,
        "tz": info.tz,
        "priority": info.priority,
        "max_attempts": info.max_attempts,
        "catch_up": info.catch_up,
        "paused": info.paused,
    }


async def set_paused(client: object, name: str, paused: bool, where: str) -> ScheduleInfo:
    """Put schedule ``name`` back with ``paused`` set (NotFound: there is none)."""
    scheduling = scheduling_of(client)
    for info in await scheduling.schedules():
        if info.name == name:
            spec = spec_of(info) | {"paused": paused}
            return await scheduling.schedule(name, **spec)  # type: ignore[no-any-return]
    raise NotFound(f"no schedule {name!r} at {where} (`osqueue schedule {where} list` shows them)")


def scheduling_of(client: object) -> Any:
    """``client`` itself, if it has the schedule calls (OsqueueError if not)."""
    if not hasattr(client, "schedule"):
        raise OsqueueError(f"this client ({type(client).__name__}) has no schedules")
    return client
