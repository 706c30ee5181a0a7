"""HTML from the package's templates (Jinja2, autoescaped) and the filters they use.

Every value a page shows passes through Jinja2's autoescaping, payload previews
and error messages included, and the pages carry no inline script (the
Content-Security-Policy forbids it), so a payload cannot run code in the page.
"""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any
from urllib.parse import quote

import jinja2

from osqueue.inspect.jobs import job_times
from osqueue.inspect.status import age_text


def ts(seconds: float | None) -> str:
    """Epoch seconds as ``YYYY-MM-DD HH:MM:SS`` UTC."""
    if seconds is None:
        return "-"
    return datetime.fromtimestamp(seconds, UTC).strftime("%Y-%m-%d %H:%M:%S")


def dt(value: datetime | None) -> str:
    return "-" if value is None else ts(value.timestamp())


def num(value: int | float | None) -> str:
    if value is None:
        return "-"
    if isinstance(value, float):
        return f"{value:,.1f}"
    return f"{value:,}"


def size(n: int | None) -> str:
    if n is None:
        return "-"
    for unit in ("B", "KiB", "MiB", "GiB"):
        if n < 1024 or unit == "GiB":
            return f"{n:,} {unit}" if unit == "B" else f"{n:,.1f} {unit}"
        n = n / 1024  # type: ignore[assignment]
    return f"{n}"  # pragma: no cover


def age(seconds: float | None) -> str:
    return age_text(seconds)


def until(at: float | None, now: float) -> str:
    """A time ahead as people read it: ``in 10m0s`` (``due`` once it has passed)."""
    if at is None:
        return "-"
    if at <= now:
        return "due"
    return f"in {age_text(at - now)}"


def ago(at: float | None, now: float) -> str:
    """A time past as people read it: ``10m0s ago``."""
    if at is None:
        return "-"
    return f"{age_text(max(0.0, now - at))} ago"


def segment(name: str) -> str:
    """A queue name or job id as one URL path segment: every ``/``, ``?``, ``#``
    and ``%`` encoded, so ``../queues/victim`` stays one segment and cannot
    climb to another object's address.  (A name that is only dots, ``.`` or
    ``..``, is a dot segment to a browser however it is encoded: its links and
    forms go nowhere, which is safe, rather than to another object.)"""
    return quote(name, safe="")


def environment() -> jinja2.Environment:
    env = jinja2.Environment(
        loader=jinja2.PackageLoader("osqueue.dashboard", "templates"),
        autoescape=True,
        undefined=jinja2.StrictUndefined,
        trim_blocks=True,
        lstrip_blocks=True,
    )
    env.filters.update(
        ts=ts, dt=dt, num=num, size=size, age=age, segment=segment, until=until, ago=ago
    )
    env.globals.update(job_times=job_times)
    return env


class Renderer:
    def __init__(self) -> None:
        self._env = environment()

    def page(self, template: str, **context: Any) -> str:
        return self._env.get_template(template).render(**context)
