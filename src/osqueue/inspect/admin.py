"""The few changes both the ``osqueue`` command and the dashboard make through the
broker (only the broker writes the document): retrying or purging dead jobs,
pausing or resuming a schedule.  Each takes an open client
(:func:`~osqueue.inspect.options.open_client`)."""

from __future__ import annotations

import enum
import inspect
from collections.abc import Callable, Mapping
from typing import Any, NamedTuple

from osqueue.api import DeadOptions, ScheduleInfo
from osqueue.errors import NotFound, OsqueueError


class DeadAction(enum.StrEnum):
    retry = "retry"
    purge = "purge"


class DeadFilters(NamedTuple):
    """Which dead jobs (every field None: no limit; docs/segments.md "Dead letters")."""

    queue: str | None = None
    error: str | None = None
    since: float | None = None
    until: float | None = None


async def on_dead(
    client: object,
    action: DeadAction,
    ids: list[str] | None,
    filters: DeadFilters = DeadFilters(),
    progress: Callable[[int, int], None] | None = None,
) -> int:
    """Retry or purge the dead jobs ``ids`` (None: all of them, or those ``filters``
    admit) through ``client``; how many there were.  ``progress`` hears of each
    dead segment done, where the client goes segment by segment (in-process)."""
    method = getattr(client, f"{action.value}_dead", None)
    if method is None:
        raise OsqueueError(f"this client ({type(client).__name__}) cannot {action.value} dead jobs")
    params = inspect.signature(method).parameters
    kwargs: dict[str, object] = {k: v for k, v in filters._asdict().items() if v is not None}
    # a method that takes ``**options: Unpack[DeadOptions]`` takes every filter
    takes = {*params} | ({*DeadOptions.__annotations__} if _var_keyword(params) else set())
    missing = [k for k in kwargs if k not in takes]
    if missing:
        raise OsqueueError(f"this client ({type(client).__name__}) cannot filter by --{missing[0]}")
    if progress is not None and "progress" in takes:
        kwargs["progress"] = progress
    count = await method(ids, **kwargs)
    if not isinstance(count, int):
        raise OsqueueError(f"{action.value}_dead returned {count!r}, expected a count")
    return count


def _var_keyword(params: Mapping[str, inspect.Parameter]) -> bool:
    return any(p.kind is inspect.Parameter.VAR_KEYWORD for p in params.values())


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
