"""Periodic jobs: schedules in the document, fired by the commits themselves.

A :class:`~osqueue.state.model.Schedule` names a queue, a payload and when
to fire: ``cron`` (five fields, read in UTC or the ``tz`` given; the
expression is parsed by croniter, never by hand) or ``every_s`` (ticks on the
multiples of ``every_s`` since the Unix epoch, so ``every_s=60`` fires at
the top of each minute, and many schedules fire in one commit).

Exactly once.  The document records each schedule's next tick
(``next_at``).  Every transition, before its ops, fires the schedules whose
``next_at`` has come (:func:`fire_due`): it pushes the tick's job and moves
``next_at`` on **in the same new version**, so a tick is recorded and its job
pushed by one compare-and-set write, or neither is.  The job's id is a
function of the schedule's name and the tick's time (:func:`tick_job_id`), so
even a tick replayed on an older document (a write that landed after all, a
broker that took over) pushes nothing twice: the push of an id that exists is
applied once.

Missed ticks (no broker served while they fell due, or the clock stepped):
the commit that finds several ticks due fires only the latest; with
``catch_up="once"`` that is one job for all of them, with ``"skip"`` the
latest tick is skipped too (no job) when it fell due more than
``schedule_grace_s`` before the commit.  A clock that steps back fires
nothing until it passes ``next_at`` again.

Paused schedules (``paused``, set by a :class:`~osqueue.state.ops.PutSchedule`):
their ticks still come due and are recorded as they are now, but as skipped
(``last_note`` says paused, no job pushed, ``next_at`` moves on), so a paused
schedule never piles up missed ticks.  Resuming is a put with ``paused=False``,
which (as every put) starts at the first tick after the commit: the ticks that
fell due while paused are never fired, not even once.  The broker's idle loop
does not wake for a paused schedule's ticks (:meth:`Schedules.next_due` leaves
them out: they are on a heap of their own); a commit that comes anyway records
them.

Pure: ``now`` is passed in.  The broker's idle timer wakes for the earliest
``next_at`` (:meth:`Schedules.next_due`).
"""

from __future__ import annotations

import functools
import heapq
import math
import re
import zoneinfo
from collections.abc import Callable, Iterator
from datetime import UTC, datetime

import msgspec
from croniter import CroniterError, croniter

from osqueue.api import CatchUp, ScheduleInfo
from osqueue.errors import InvalidInput, OsqueueError
from osqueue.state import validate
from osqueue.state.model import Schedule, to_datetime

MAX_NAME_CHARS = 40
NAME_RE = re.compile(rf"^[0-9A-Za-z_.:\-]{{1,{MAX_NAME_CHARS}}}$")
#: The shortest ``every_s`` (one tick a second).
MIN_EVERY_S = 1.0
#: The longest ``every_s``: a year.
MAX_EVERY_S = 366 * 24 * 3600.0
CATCH_UPS: tuple[CatchUp, ...] = ("once", "skip")

_encode = msgspec.json.Encoder().encode


# --------------------------------------------------------------------------- checks


def check_name(value: str, field: str = "name") -> str:
    if not isinstance(value, str) or not NAME_RE.match(value):
        raise InvalidInput(
            f"{value!r} is not a schedule name (1-{MAX_NAME_CHARS} characters of "
            "A-Z a-z 0-9 _ . : -)",
            field=field,
        )
    return value


@functools.lru_cache(maxsize=64)
def _zone(name: str) -> zoneinfo.ZoneInfo:
    return zoneinfo.ZoneInfo(name)


def check_tz(value: str | None, field: str = "tz") -> str | None:
    if value is None:
        return None
    if not isinstance(value, str) or not value or len(value) > 64:
        raise InvalidInput("must be an IANA time zone name such as Europe/Paris", field=field)
    try:
        _zone(value)
    except (zoneinfo.ZoneInfoNotFoundError, ValueError, OSError) as exc:
        raise InvalidInput(f"{value!r} is not a known time zone", field=field) from exc
    return value


#: The five cron fields: name, lowest and highest number, the names it takes.
_CRON_FIELDS: tuple[tuple[str, int, int, tuple[str, ...]], ...] = (
    ("minute", 0, 59, ()),
    ("hour", 0, 23, ()),
    ("day-of-month", 1, 31, ()),
    (
        "month",
        1,
        12,
        ("jan", "feb", "mar", "apr", "may", "jun", "jul", "aug", "sep", "oct", "nov", "dec"),
    ),
    ("day-of-week", 0, 7, ("sun", "mon", "tue", "wed", "thu", "fri", "sat")),
)
_CRON_ATOM = re.compile(r"^(\*|[0-9a-z]+(?:-[0-9a-z]+)?)(?:/([0-9]+))?$")


def _bad_cron_field(fields: list[str]) -> str | None:
    """Which field of a five-field expression is wrong, and why (None: none found)."""
    for text, (name, low, high, names) in zip(fields, _CRON_FIELDS, strict=True):
        for part in text.split(","):
            m = _CRON_ATOM.match(part.lower())
            if m is None:
                return f"{name} field: {part!r} is not a number, a range, a step or *"
            if m[2] is not None and int(m[2]) == 0:
                return f"{name} field: a step of 0 never moves"
            for bound in m[1].split("-") if m[1] != "*" else ():
                if bound.isdigit():
                    if not low <= int(bound) <= high:
                        return f"{name} field: {bound} is out of range {low}-{high}"
                elif bound not in names:
                    return f"{name} field: {part!r} is not a number in {low}-{high}"
    return None


def check_cron(value: str, tz: str | None, field: str = "cron") -> str:
    """A five-field cron expression croniter accepts (and that fires at all)."""
    if not isinstance(value, str) or len(value) > 256:
        raise InvalidInput("must be a cron expression of at most 256 characters", field=field)
    fields = value.split()
    if len(fields) != 5:
        raise InvalidInput(
            f"{value!r} has {len(fields)} fields; a cron expression has five "
            "(minute hour day-of-month month day-of-week)",
            field=field,
        )
    expr = " ".join(fields)
    try:
        valid = croniter.is_valid(expr)
    except (CroniterError, ValueError, KeyError, TypeError):
        valid = False
    if not valid:
        where = _bad_cron_field(fields)
        raise InvalidInput(
            f"{value!r}: {where}" if where else f"{value!r} is not a valid cron expression",
            field=field,
        )
    try:
        _cron_after(expr, tz, 0.0)
    except (CroniterError, ValueError, KeyError, TypeError) as exc:
        raise InvalidInput(f"{value!r} never fires", field=field) from exc
    return expr


def check_every(value: float, field: str = "every_s") -> float:
    if isinstance(value, bool) or not isinstance(value, int | float) or not math.isfinite(value):
        raise InvalidInput(f"must be a number of seconds, not {value!r}", field=field)
    if not MIN_EVERY_S <= value <= MAX_EVERY_S:
        raise InvalidInput(
            f"{value:g} is not between {MIN_EVERY_S:g} and {MAX_EVERY_S:g} seconds", field=field
        )
    if abs(value * 1000 - round(value * 1000)) > 1e-6:
        raise InvalidInput(f"{value!r} is finer than a millisecond", field=field)
    return float(value)


def check_paused(value: bool, field: str = "paused") -> bool:
    if not isinstance(value, bool):
        raise InvalidInput(f"must be true or false, not {value!r}", field=field)
    return value


def check_spec(
    *,
    name: str,
    queue: str,
    cron: str | None,
    tz: str | None,
    every_s: float | None,
    payload: bytes,
    priority: int,
    max_attempts: int,
    catch_up: str,
    max_payload_bytes: int,
) -> tuple[str | None, float | None]:
    """Check a schedule's fields (each error names its field); return ``(cron,
    every_s)`` normalised.  The in-process client, the remote client and the
    transition all apply this."""
    check_name(name)
    validate.new_job(queue, priority, 0.0, None, max_attempts)
    if not isinstance(payload, bytes):
        raise InvalidInput(f"must be bytes, not {type(payload).__name__}", field="payload")
    if len(payload) > max_payload_bytes:
        raise InvalidInput(
            f"{len(payload)} bytes is above the limit of {max_payload_bytes} for a schedule",
            field="payload",
        )
    if catch_up not in CATCH_UPS:
        raise InvalidInput(f"{catch_up!r} is not one of once, skip", field="catch_up")
    if (cron is None) == (every_s is None):
        raise InvalidInput("give exactly one of cron and every_s", field="cron")
    tz = check_tz(tz)
    if every_s is not None:
        if tz is not None:
            raise InvalidInput("applies to cron only (every_s counts from the epoch)", field="tz")
        return None, check_every(every_s)
    assert cron is not None
    return check_cron(cron, tz), None


# --------------------------------------------------------------------------- ticks


@functools.lru_cache(maxsize=4096)
def _cron_after(expr: str, tz: str | None, t: float) -> float:
    """The first tick of ``expr`` strictly after ``t`` (cached: schedules that share
    an expression share its ticks)."""
    zone = UTC if tz is None else _zone(tz)
    return float(croniter(expr, datetime.fromtimestamp(t, zone)).get_next(float))


@functools.lru_cache(maxsize=4096)
def _cron_before(expr: str, tz: str | None, t: float) -> float:
    zone = UTC if tz is None else _zone(tz)
    return float(croniter(expr, datetime.fromtimestamp(t, zone)).get_prev(float))


def _every_ms(every_s: float) -> int:
    return round(every_s * 1000)


def _ms(t: float) -> int:
    """``t`` in whole milliseconds, rounded down (a tick's own time maps to itself,
    whatever the float error of ``t * 1000``)."""
    return math.floor(t * 1000 + 1e-3)


def tick_after(schedule: Schedule, t: float) -> float:
    """The schedule's first tick strictly after ``t``."""
    if schedule.every_s is not None:
        step = _every_ms(schedule.every_s)
        return (_ms(t) // step + 1) * step / 1000
    assert schedule.cron is not None
    return _cron_after(schedule.cron, schedule.tz, t)


def latest_tick(schedule: Schedule, now: float) -> float:
    """The schedule's last tick at or before ``now``."""
    if schedule.every_s is not None:
        step = _every_ms(schedule.every_s)
        return (_ms(now) // step) * step / 1000
    assert schedule.cron is not None
    before = _cron_before(schedule.cron, schedule.tz, now)
    after = _cron_after(schedule.cron, schedule.tz, before)
    return after if after <= now else before


def tick_text(tick: float) -> str:
    """A tick as it appears in job ids: ``20260101T000500Z`` (``.250`` before the Z
    when the tick is not on a whole second)."""
    ms = round(tick * 1000)
    t = datetime.fromtimestamp(ms // 1000, UTC)
    text = f"{t.year:04d}{t.month:02d}{t.day:02d}T{t.hour:02d}{t.minute:02d}{t.second:02d}"
    return f"{text}.{ms % 1000:03d}Z" if ms % 1000 else f"{text}Z"


def tick_job_id(name: str, tick: float) -> str:
    """The id of the job a schedule's tick pushes: a function of the name and the
    tick alone, so a replayed tick pushes the same id (applied once)."""
    return f"{name}:{tick_text(tick)}"


def first_next_at(schedule: Schedule, now: float) -> float:
    """Where a new (or replaced) schedule starts: its first tick after ``now`` and
    after the tick its name last recorded."""
    start = now
    if schedule.last_at is not None:
        start = max(start, schedule.last_at.timestamp())
    return tick_after(schedule, start)


# --------------------------------------------------------------------------- the set


class Schedules:
    """A document's schedules by name, with heaps of due times (the active
    schedules', which wake the broker, and the paused ones') and a cache of each
    schedule's encoding (10,000 schedules cost a commit a byte join)."""

    __slots__ = ("_frags", "_heap", "_paused_heap", "_section", "_total", "by_name")

    def __init__(self, items: list[Schedule] | None = None) -> None:
        self.by_name: dict[str, Schedule] = {}
        self._frags: dict[str, bytes] = {}
        self._heap: list[tuple[float, str]] = []
        self._paused_heap: list[tuple[float, str]] = []
        self._section: bytes | None = None
        #: the encodings' total length, once every schedule has one (None: not yet)
        self._total: int | None = None
        for s in items or ():
            self.by_name[s.name] = s
            self._heap_of(s).append((s.next_at.timestamp(), s.name))
        heapq.heapify(self._heap)
        heapq.heapify(self._paused_heap)

    def _heap_of(self, schedule: Schedule) -> list[tuple[float, str]]:
        return self._paused_heap if schedule.paused else self._heap

    def copy(self) -> Schedules:
        new = Schedules()
        new.by_name = dict(self.by_name)
        new._frags = dict(self._frags)
        new._heap = list(self._heap)
        new._paused_heap = list(self._paused_heap)
        new._section = self._section
        new._total = self._total
        return new

    def __bool__(self) -> bool:
        return bool(self.by_name)

    def __len__(self) -> int:
        return len(self.by_name)

    def __iter__(self) -> Iterator[Schedule]:
        return iter(self.by_name.values())

    def __eq__(self, other: object) -> bool:
        if not isinstance(other, Schedules):
            return NotImplemented
        return list(self.by_name.items()) == list(other.by_name.items())

    __hash__ = None  # type: ignore[assignment]

    def get(self, name: str) -> Schedule | None:
        return self.by_name.get(name)

    def put(self, schedule: Schedule) -> None:
        """Add or replace (a replaced schedule keeps its place in the document).
        Its encoding is made here, so the section's size stays known without a
        join: a commit that fires 10,000 ticks checks the document's size at each
        of their pushes."""
        name = schedule.name
        frag = _encode(schedule)
        old = self._frags.get(name)
        if self._total is not None:
            if old is not None:
                self._total += len(frag) - len(old)
            elif name in self.by_name:  # replaced, its old encoding never made
                self._total = None
            else:
                self._total += len(frag)
        self.by_name[name] = schedule
        self._frags[name] = frag
        self._section = None
        heapq.heappush(self._heap_of(schedule), (schedule.next_at.timestamp(), name))

    def remove(self, name: str) -> Schedule | None:
        old = self.by_name.pop(name, None)
        if old is not None:
            frag = self._frags.pop(name, None)
            if self._total is not None:
                self._total = None if frag is None else self._total - len(frag)
            self._section = None
        return old

    def size_bytes(self) -> int:
        """``len(self.section())``, kept up to date by :meth:`put` and :meth:`remove`."""
        if self._section is not None:
            return len(self._section)
        total = self._total
        if total is None:
            frags = self._frags
            total = 0
            for name, s in self.by_name.items():
                frag = frags.get(name)
                if frag is None:
                    frag = frags[name] = _encode(s)
                total += len(frag)
            self._total = total
        return total + max(0, len(self.by_name) - 1)  # and the commas between

    def next_due(self) -> float | None:
        """The earliest ``next_at`` of an active schedule (stale heap entries, and
        those of schedules paused since, are dropped)."""
        heap = self._heap
        while heap:
            at, name = heap[0]
            s = self.by_name.get(name)
            if s is not None and s.next_at.timestamp() == at and not s.paused:
                return at
            heapq.heappop(heap)
        return None

    def due(self, now: float) -> list[Schedule]:
        """The schedules whose ``next_at`` has come, by name (they are taken off the
        heap: :meth:`put` each back with its new ``next_at``)."""
        out: dict[str, Schedule] = {}
        for heap in (self._heap, self._paused_heap):
            while heap and heap[0][0] <= now:
                at, name = heapq.heappop(heap)
                s = self.by_name.get(name)
                if s is not None and s.next_at.timestamp() == at:
                    out[name] = s
        return [out[name] for name in sorted(out)]

    def section(self) -> bytes:
        """The encoded inside of the ``schedules`` list (cached until one changes)."""
        section = self._section
        if section is None:
            frags = self._frags
            parts = []
            for name, s in self.by_name.items():
                frag = frags.get(name)
                if frag is None:
                    frag = frags[name] = _encode(s)
                parts.append(frag)
            section = self._section = b",".join(parts)
        return section


# --------------------------------------------------------------------------- firing


#: Pushes a tick's job (the transition's push: size cap, dedupe and all).
PushTick = Callable[[str, Schedule], object]


def fire_due(
    schedules: Schedules, now: float, grace_s: float, push: PushTick
) -> list[tuple[Schedule, float, str | None]]:
    """Fire every schedule whose tick has come: push its job (``push(job_id,
    schedule)``) and record the tick, in the document being built.  Returns
    ``(schedule, tick, job id or None)`` per schedule fired."""
    fired: list[tuple[Schedule, float, str | None]] = []
    for s in schedules.due(now):
        tick = latest_tick(s, now)
        job_id: str | None = tick_job_id(s.name, tick)
        note: str | None = None
        if s.paused:
            note = f"tick {tick_text(tick)} skipped: the schedule is paused"
            job_id = None
        elif s.catch_up == "skip" and now - tick > grace_s:
            note = f"tick {tick_text(tick)} skipped: due {now - tick:.0f}s before (catch_up=skip)"
            job_id = None
        else:
            assert job_id is not None
            try:
                push(job_id, s)
            except OsqueueError as exc:
                note = f"tick {tick_text(tick)} pushed no job: {exc.message}"
                job_id = None
        schedules.put(
            msgspec.structs.replace(
                s,
                next_at=to_datetime(tick_after(s, tick)),
                last_at=to_datetime(tick),
                last_job=job_id if job_id is not None else s.last_job,
                last_note=note,
            )
        )
        fired.append((s, tick, job_id))
    return fired


def schedule_info(s: Schedule) -> ScheduleInfo:
    """The public view of a stored schedule."""
    return ScheduleInfo(
        name=s.name,
        queue=s.queue,
        cron=s.cron,
        tz=s.tz,
        every_s=s.every_s,
        payload=s.payload,
        priority=s.priority,
        max_attempts=s.max_attempts,
        catch_up=s.catch_up,
        next_run_at=s.next_at.timestamp(),
        last_run_at=s.last_at.timestamp() if s.last_at is not None else None,
        last_job_id=s.last_job,
        note=s.last_note,
        paused=s.paused,
    )
