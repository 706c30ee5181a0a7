"""Input checks shared by every entry point (in-process client and gRPC).

Each raises :class:`~osqueue.errors.InvalidInput` naming the field; nothing is
applied to the document when a check fails.
"""

from __future__ import annotations

import math
import re
from collections.abc import Sequence

from osqueue.errors import InvalidInput

MAX_ID_CHARS = 64
MAX_QUEUE_CHARS = 128
ID_RE = re.compile(rf"^[0-9A-Za-z_.:\-]{{1,{MAX_ID_CHARS}}}$")
NAME_RE = re.compile(rf"^[0-9A-Za-z_.:/\-]{{1,{MAX_QUEUE_CHARS}}}$")
MAX_KEY_CHARS = 512
MAX_WORKER_CHARS = 256
MAX_DELAY_S = 366 * 24 * 3600.0
#: The longest a finished job's record (and result) may be kept: 30 days.
MAX_RESULT_TTL_S = 30 * 24 * 3600.0
MAX_ATTEMPTS = 1000
MAX_CLAIM = 10_000
MAX_ERROR_CHARS = 4096
PRIORITY_MIN, PRIORITY_MAX = -(2**31), 2**31 - 1


def job_id(value: str, field: str = "id") -> str:
    if not isinstance(value, str) or not ID_RE.match(value):
        raise InvalidInput(
            f"{value!r} is not a job id (1-{MAX_ID_CHARS} characters of A-Z a-z 0-9 _ . : -)",
            field=field,
        )
    return value


def new_job(
    queue: str, priority_: int, delay_s: float, key_: str | None, max_attempts: int
) -> float:
    """Check a push's fields (the rules of the document, in one place); return its
    delay in seconds.  The broker applies these to every push; the remote client
    applies them before sending, so a bad push fails without a round trip."""
    queue_name(queue)
    # Fast paths for the defaults; anything else gets the full check.
    if type(priority_) is not int or priority_ != 0:
        priority(priority_)
    delay = delay_s
    if type(delay) is not float or delay != 0.0:
        delay = seconds(delay, "delay_s") or 0.0
    if type(max_attempts) is not int or not 0 < max_attempts <= MAX_ATTEMPTS:
        count(max_attempts, "max_attempts", maximum=MAX_ATTEMPTS)
    if key_ is not None:
        key(key_)
    return delay


_KNOWN_QUEUES: set[str] = set()


def queue_name(value: str, field: str = "queue") -> str:
    if isinstance(value, str) and value in _KNOWN_QUEUES:  # a few names, each checked once
        return value
    if not isinstance(value, str) or not NAME_RE.match(value):
        raise InvalidInput(
            f"{value!r} is not a queue name (1-{MAX_QUEUE_CHARS} characters of "
            "A-Z a-z 0-9 _ . : / -)",
            field=field,
        )
    if len(_KNOWN_QUEUES) < 10_000:
        _KNOWN_QUEUES.add(value)
    return value


_KNOWN_QUEUE_LISTS: set[tuple[str, ...]] = set()
MAX_CLAIM_QUEUES = 64


def queue_names(value: Sequence[str], field: str = "queues") -> tuple[str, ...]:
    """A claim's queue list: 1-64 valid names (each list is checked once)."""
    if type(value) is tuple and value in _KNOWN_QUEUE_LISTS:
        return value
    if isinstance(value, str) or not isinstance(value, tuple | list):
        raise InvalidInput(
            f"must be a list of queue names, not {type(value).__name__}", field=field
        )
    value = tuple(value)
    if not value:
        raise InvalidInput("name at least one queue", field=field)
    count(len(value), field, maximum=MAX_CLAIM_QUEUES)
    for i, q in enumerate(value):
        queue_name(q, f"{field}[{i}]")
    if len(_KNOWN_QUEUE_LISTS) < 10_000:
        _KNOWN_QUEUE_LISTS.add(value)
    return value


_KNOWN_WORKERS: set[str] = set()


def worker_name(value: str, field: str = "worker") -> str:
    if type(value) is str and value in _KNOWN_WORKERS:  # checked once per name
        return value
    if not isinstance(value, str) or not 0 < len(value) <= MAX_WORKER_CHARS:
        raise InvalidInput(f"must be 1-{MAX_WORKER_CHARS} characters", field=field)
    if not value.isprintable():
        raise InvalidInput("must be printable text", field=field)
    if len(_KNOWN_WORKERS) < 100_000:
        _KNOWN_WORKERS.add(value)
    return value


def key(value: str | None, field: str = "key") -> str | None:
    if value is None:
        return None
    if not isinstance(value, str) or not 0 < len(value) <= MAX_KEY_CHARS:
        raise InvalidInput(f"must be 1-{MAX_KEY_CHARS} characters", field=field)
    return value


def priority(value: int, field: str = "priority") -> int:
    if isinstance(value, bool) or not isinstance(value, int):
        raise InvalidInput(f"must be an integer, not {type(value).__name__}", field=field)
    if not PRIORITY_MIN <= value <= PRIORITY_MAX:
        raise InvalidInput(f"{value} is outside [{PRIORITY_MIN}, {PRIORITY_MAX}]", field=field)
    return value


def seconds(value: float | None, field: str, *, maximum: float = MAX_DELAY_S) -> float | None:
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, int | float):
        raise InvalidInput(f"must be a number of seconds, not {type(value).__name__}", field=field)
    if not math.isfinite(value) or value < 0 or value > maximum:
        raise InvalidInput(f"{value} is not between 0 and {maximum:g} seconds", field=field)
    return float(value)


def count(value: int, field: str, *, minimum: int = 1, maximum: int) -> int:
    if isinstance(value, bool) or not isinstance(value, int):
        raise InvalidInput(f"must be an integer, not {type(value).__name__}", field=field)
    if not minimum <= value <= maximum:
        raise InvalidInput(f"{value} is outside [{minimum}, {maximum}]", field=field)
    return value


def token(value: int, field: str = "token") -> int:
    if isinstance(value, bool) or not isinstance(value, int) or value <= 0:
        raise InvalidInput(f"{value!r} is not a claim token", field=field)
    return value
