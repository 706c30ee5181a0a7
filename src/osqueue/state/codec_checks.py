"""Decoding checks for schedules, queue settings, and the fields of jobs that
wait for parents or carry a group.

Each check names the field that is wrong (the codec turns it into a
:class:`~osqueue.errors.CorruptDocument` with the path); nothing is repaired.
"""

from __future__ import annotations

import math

from osqueue.errors import InvalidInput
from osqueue.state.model import Schedule, StoredJob, StoredSettings
from osqueue.state.schedules import Schedules, check_cron, check_every, check_name, check_tz
from osqueue.state.validate import MAX_RESULT_TTL_S, NAME_RE


def check_job_fields(job: StoredJob) -> tuple[str, str] | None:
    """``(field, problem)`` if the job's ``after`` or ``group`` does not hold, else None."""
    if job.status == "waiting":
        if not job.after:
            return "after", "a waiting job names the parents it waits for"
    elif job.after:
        return "after", f"a {job.status} job waits for no parent"
    if any(not parent for parent in job.after):
        return "after", "a parent id must not be empty"
    if job.group is not None and (not job.group or len(job.group) > 128):
        return "group", "must be 1-128 characters"
    return None


def queue_settings_of(raw: dict[str, StoredSettings]) -> dict[str, StoredSettings]:
    """The settings, checked (``ValueError("[queue].field: problem")`` if not)."""
    for queue, s in raw.items():
        where = f"[{queue!r}]"
        if not NAME_RE.match(queue):
            raise ValueError(f"{where}: {queue!r} is not a queue name")
        if s.rate_per_s is not None and not (math.isfinite(s.rate_per_s) and s.rate_per_s > 0):
            raise ValueError(f"{where}.rate_per_s: {s.rate_per_s} is not a positive rate")
        for name in ("burst", "max_claimed", "max_claimed_per_group"):
            value = getattr(s, name)
            if value is not None and value < 1:
                raise ValueError(f"{where}.{name}: {value} is below 1")
        ttl = s.result_ttl_s
        if ttl is not None and not (math.isfinite(ttl) and 0 < ttl <= MAX_RESULT_TTL_S):
            raise ValueError(f"{where}.result_ttl_s: {ttl} is not a TTL in seconds")
        if s.tokens is not None and not math.isfinite(s.tokens):
            raise ValueError(f"{where}.tokens: {s.tokens} is not a number")
        if (s.tokens is None) != (s.tokens_at is None):
            raise ValueError(f"{where}.tokens_at: tokens and tokens_at go together")
    return dict(raw)


def schedules_of(raw: list[Schedule]) -> Schedules:
    """The schedules, checked (``ValueError("[i].field: problem")`` if not)."""
    seen: set[str] = set()
    for i, s in enumerate(raw):
        where = f"[{i}]"
        try:
            check_name(s.name)
            if s.name in seen:
                raise InvalidInput(f"{s.name!r} is listed twice", field="name")
            seen.add(s.name)
            if not NAME_RE.match(s.queue):
                raise InvalidInput(f"{s.queue!r} is not a queue name", field="queue")
            if (s.cron is None) == (s.every_s is None):
                raise InvalidInput("a schedule has exactly one of cron and every_s", field="cron")
            check_tz(s.tz)
            if s.cron is not None:
                check_cron(s.cron, s.tz)
            else:
                assert s.every_s is not None
                check_every(s.every_s)
            if s.max_attempts < 1:
                raise InvalidInput(f"{s.max_attempts} is below 1", field="max_attempts")
        except InvalidInput as exc:
            field = exc.field or "name"
            message = exc.message.removeprefix(f"{field}: ")
            raise ValueError(f"{where}.{field}: {message}") from exc
    return Schedules(list(raw))
