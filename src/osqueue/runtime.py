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
"""

from __future__ import annotations

import asyncio
import gc
import os
from collections.abc import Coroutine
from typing import Any, TypeVar

from osqueue.errors import InvalidInput

T = TypeVar("T")

EVENT_LOOP_VARIABLE = "OSQUEUE_EVENT_LOOP"
LOOPS = ("auto", "uvloop", "asyncio")
#: (generation 0, 1, 2) collection thresholds for osqueue's own processes.
GC_THRESHOLDS = (20_000, 50, 100)


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
