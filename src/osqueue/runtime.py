"""How osqueue's own processes run: the event loop and the garbage collector.

``osqueue broker``, ``osqueue work`` and ``osqueue bench`` are long-running
processes that answer thousands of small requests per commit.  They run on
``uvloop`` when it is installed (it is a dependency on Linux and macOS; its
callbacks and timers are C, where asyncio's are Python) and raise the garbage
collector's thresholds: a commit allocates tens of thousands of short-lived,
acyclic objects, and the default thresholds (700, 10, 10) run a collection
every few hundred ops and a full one over every live job far too often.

An embedded broker (``osqueue.Broker`` in your own program) leaves both to
you: call :func:`tune_gc` and run your program with :func:`run` (or
``uvloop.run``) to get the same.

``OSQUEUE_EVENT_LOOP`` chooses the loop: ``auto`` (the default: uvloop when
installed), ``uvloop`` (fail when it is not) or ``asyncio``.

Open files are the other budget such a process spends on others' behalf:
every connection a client opens holds one, and so does every storage write
the broker makes to renew its lease.  :func:`raise_open_files_limit` lifts the
soft limit to the hard one at start (1,024 is a common soft default); every
listener caps its connections (:func:`connection_cap`) so that a flood of
them leaves :data:`FD_RESERVE` files for storage and the rest.
"""

from __future__ import annotations

import asyncio
import gc
import logging
import os
from collections.abc import Coroutine
from typing import Any, TypeVar

from osqueue.errors import InvalidInput

T = TypeVar("T")

log = logging.getLogger(__name__)

EVENT_LOOP_VARIABLE = "OSQUEUE_EVENT_LOOP"
LOOPS = ("auto", "uvloop", "asyncio")
#: (generation 0, 1, 2) collection thresholds for osqueue's own processes.
GC_THRESHOLDS = (20_000, 50, 100)
#: Open files a process keeps out of its listeners' reach: storage reads and
#: writes (file:// holds two or three per operation in flight, a cloud store a
#: socket each), a small listener's few connections (metrics), and the
#: process's own (the loop, gRPC's pipes, logs).
FD_RESERVE = 256
#: Where the hard limit is "unlimited", the soft limit is raised to the first
#: of these the kernel takes (Linux's default nr_open, macOS's OPEN_MAX).
_UNLIMITED_TRIES = (1_048_576, 10_240)


def event_loop_choice() -> str:
    """The loop ``OSQUEUE_EVENT_LOOP`` asks for (``auto`` when unset)."""
    choice = os.environ.get(EVENT_LOOP_VARIABLE, "auto").strip().lower() or "auto"
    if choice not in LOOPS:
        raise InvalidInput(
            f"{choice!r} is not one of {', '.join(LOOPS)}", field=EVENT_LOOP_VARIABLE
        )
    return choice


def loop_name() -> str:
    """The loop :func:`run` would use: ``uvloop`` or ``asyncio``."""
    choice = event_loop_choice()
    if choice == "asyncio":
        return "asyncio"
    try:
        import uvloop  # noqa: F401
    except ImportError:
        if choice == "uvloop":
            raise InvalidInput(
                "uvloop is not installed (pip install uvloop)", field=EVENT_LOOP_VARIABLE
            ) from None
        return "asyncio"
    return "uvloop"


def run(main: Coroutine[Any, Any, T]) -> T:
    """``asyncio.run(main)`` on the loop :func:`loop_name` names."""
    try:
        name = loop_name()
    except InvalidInput:
        main.close()  # never awaited: say so quietly, the error says the rest
        raise
    if name == "uvloop":
        import uvloop

        return uvloop.run(main)
    return asyncio.run(main)


def tune_gc() -> None:
    """Raise the collector's thresholds for a process that serves a queue.

    Objects alive now (imports, configuration) move to the permanent
    generation, so full collections skip them.
    """
    gc.collect()
    gc.freeze()
    gc.set_threshold(*GC_THRESHOLDS)


def open_files_limit() -> int | None:
    """The open-files soft limit (None: unlimited, or no such limit on this platform)."""
    try:
        import resource
    except ImportError:  # pragma: no cover - Windows
        return None
    soft, _ = resource.getrlimit(resource.RLIMIT_NOFILE)
    return None if soft == resource.RLIM_INFINITY else soft


def raise_open_files_limit() -> int | None:
    """Raise the open-files soft limit to the hard limit; the soft limit after.

    Logged before and after.  Where the system refuses (a sandbox, a hard
    limit the kernel caps lower), the limit stays as it was: the listeners'
    caps follow whatever limit there is.
    """
    try:
        import resource
    except ImportError:  # pragma: no cover - Windows
        return None
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    tries: tuple[int, ...] = (hard,) if hard != resource.RLIM_INFINITY else _UNLIMITED_TRIES
    tries = tuple(t for t in tries if soft != resource.RLIM_INFINITY and t > soft)
    refused: Exception | None = None
    for target in tries:
        try:
            resource.setrlimit(resource.RLIMIT_NOFILE, (target, hard))
        except (ValueError, OSError) as exc:
            refused = exc
            continue
        log.info(
            "open-files limit raised from %s to %s",
            soft,
            target,
            extra={"action": "open_files", "before": soft, "after": target, "hard": hard},
        )
        return target
    if refused is None:
        log.info(
            "open-files limit %s (as high as it goes)",
            soft,
            extra={"action": "open_files", "soft": soft, "hard": hard},
        )
    else:
        log.warning(
            "open-files limit stays at %s: raising it to %s was refused: %s",
            soft,
            tries[0],
            refused,
            extra={"action": "open_files", "soft": soft, "hard": hard},
        )
    return open_files_limit()


def connection_cap(wanted: int, reserve: int, *, listener: str) -> int:
    """How many connections ``listener`` may hold: ``wanted``, or fewer when the
    open-files soft limit leaves less than that beside ``reserve`` files.

    A limit too low for the reserve still leaves a quarter of it to the
    listener (and says so: raise the limit).
    """
    limit = open_files_limit()
    if limit is None:
        return wanted
    room = limit - reserve
    cap = min(wanted, max(room, limit // 4, 1))
    if cap == wanted:
        return wanted
    extra = {"action": "connection_cap", "listener": listener, "cap": cap, "limit": limit}
    if cap > room:
        log.warning(
            "open-files limit %s is below %s files for storage and %s connections; %s "
            "connections capped at %s: raise the limit (ulimit -n, systemd LimitNOFILE=)",
            limit,
            reserve,
            listener,
            listener,
            cap,
            extra=extra,
        )
    else:
        log.info(
            "%s connections capped at %s by the open-files limit %s (%s kept for storage)",
            listener,
            cap,
            limit,
            reserve,
            extra=extra,
        )
    return cap
