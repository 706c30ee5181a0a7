"""How the CLI fails: one red line on stderr and an exit code per error class.

Scripts can tell failures apart by exit code (``osqueue push ... || case $?``);
``docs/operations.md`` lists the table.  A traceback is shown only with
``--debug``.
"""

from __future__ import annotations

import contextlib
import importlib
import os
import sys
import traceback

from rich.markup import escape

from osqueue import errors
from osqueue.cli.console import stderr

OK = 0
#: An OsqueueError without a more specific code.
ERROR = 1
#: Bad command line (click's own code for usage errors).
USAGE = 2
#: A bug: an exception that is not an OsqueueError.
INTERNAL = 70
#: ``osqueue result --wait-s``: the wait ran out before the job finished
#: (sysexits' EX_TEMPFAIL: ask again later).
NOT_FINISHED = 75
#: The user's own code given on the command line failed (a handler module that
#: raises or has a syntax error at import): its traceback is shown (EX_CONFIG).
CONFIG = 78
#: Stopped by Ctrl-C before finishing.
INTERRUPTED = 130
#: Standard output was closed by its reader (``osqueue ... | head``), as a shell
#: reports a process killed by SIGPIPE.
BROKEN_PIPE = 141

#: Most specific class first is not needed: the lookup walks the exception's MRO.
EXIT_CODES: dict[type[errors.OsqueueError], int] = {
    errors.OsqueueError: ERROR,
    errors.InvalidInput: 3,
    errors.NotFound: 4,
    errors.JobNotFound: 5,
    errors.CorruptDocument: 6,
    errors.Unauthenticated: 7,
    errors.BrokerUnavailable: 8,
    errors.NotBroker: 9,
    errors.StorageError: 10,
    errors.OutcomeUnknown: 11,
    errors.Conflict: 12,
    errors.LeaseLost: 13,
    errors.DuplicateKey: 14,
    errors.QueueFull: 15,
    errors.ResourceExhausted: 16,
    errors.MaybeCommitted: 17,
    errors.ShuttingDown: 18,
    errors.MissingExtra: 19,
    errors.UntrustedBroker: 20,
    errors.PermissionDenied: 21,
}


class UserCodeFailed(Exception):
    """Code the user named on the command line raised (not a bug of osqueue)."""

    def __init__(self, what: str, original: BaseException) -> None:
        super().__init__(f"{what}: {describe(original)}")
        self.original = original


def user_traceback(exc: BaseException) -> str:
    """``exc``'s traceback without the frames of osqueue and of the import machinery:
    what the user needs to fix their own code."""
    frames = [
        frame
        for frame in traceback.extract_tb(exc.__traceback__)
        if not frame.filename.startswith(("<frozen ", _OWN, _IMPORTLIB))
    ]
    lines = ["Traceback (most recent call last):\n"] if frames else []
    lines += traceback.format_list(frames)
    lines += traceback.format_exception_only(exc)
    return "".join(lines).rstrip()


_OWN = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))  # .../osqueue
_IMPORTLIB = os.path.dirname(importlib.__file__ or "importlib")


def exit_code(exc: BaseException) -> int:
    """The exit code for ``exc``: the closest class in :data:`EXIT_CODES`, else INTERNAL."""
    if isinstance(exc, UserCodeFailed):
        return CONFIG
    for cls in type(exc).__mro__:
        code = EXIT_CODES.get(cls)
        if code is not None:
            return code
    return INTERNAL


def counted(n: int, noun: str) -> str:
    """``"1 job"``, ``"2 jobs"``, ``"1,204 jobs"``: a count and its noun, for output lines."""
    return f"{n:,} {noun}{'' if n == 1 else 's'}"


def one_line(text: str) -> str:
    return " | ".join(part.strip() for part in text.strip().splitlines() if part.strip())


def describe(exc: BaseException) -> str:
    """``"ErrorName: message"`` on one line (the class name says the category)."""
    message = one_line(str(exc))
    name = type(exc).__name__
    return f"{name}: {message}" if message else name


def report(exc: BaseException, *, debug: bool) -> int:
    """Print ``exc`` as one red line (plus the traceback with ``debug``); return its code."""
    console = stderr()
    if debug:
        console.print(escape("".join(traceback.format_exception(exc)).rstrip()), style="dim")
    elif isinstance(exc, UserCodeFailed):
        console.print(escape(user_traceback(exc.original)), style="dim")
    ours = isinstance(exc, errors.OsqueueError | UserCodeFailed)
    label = "error" if ours else "internal error"
    text = one_line(str(exc)) if isinstance(exc, UserCodeFailed) else describe(exc)
    console.print(f"[bold red]{label}:[/] [red]{escape(text)}[/]")
    if not debug and not ours:
        console.print("[dim]run with --debug for the traceback[/]")
    return exit_code(exc)


def closed_stdout() -> int:
    """Standard output's reader went away: print nothing more, and say so by exit code.

    Standard output is pointed at ``/dev/null`` so the interpreter's final flush
    does not fail a second time.
    """
    with contextlib.suppress(OSError, ValueError):
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())
        os.close(devnull)
    return BROKEN_PIPE


def warn(message: str) -> None:
    stderr().print(f"[yellow]warning:[/] {escape(one_line(message))}")


def info(message: str) -> None:
    stderr().print(escape(message))
