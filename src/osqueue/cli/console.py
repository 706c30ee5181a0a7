"""The CLI's two consoles: results on stdout, everything else on stderr.

Both write to whatever ``sys.stdout``/``sys.stderr`` are at the time of each
print (tests swap them).  Output that is not a terminal is never wrapped or cut to 80
columns: a pipe gets whole lines.

Strings the CLI shows come partly from storage (a worker's error text, worker
names, a broker's address), which whoever can write the bucket or run a worker
chooses.  Written raw to a terminal, ``ESC [ 2 J`` clears the screen and
``ESC ] 8 ;;URL BEL`` plants a hyperlink.  So these consoles show every control
character (C0 but newline, DEL, C1, and the bidi overrides that reorder what is
read) as a visible escape such as ``\\x1b``, on a terminal and off one alike;
``--json`` output is JSON, which escapes them itself.  Rich markup is the other
way in (``[link=URL]``): a stored string goes into a table or a line as
:func:`shown`, text that is never read as markup.
"""

from __future__ import annotations

import logging
import re
import sys
import time
import traceback
from types import TracebackType
from typing import Any

from rich.console import Console, ConsoleRenderable
from rich.logging import RichHandler
from rich.text import Text

_PIPE_WIDTH = 240

_CONTROL = re.compile("[\x00-\x09\x0b-\x1f\x7f-\x9f\u061c\u200e\u200f\u202a-\u202e\u2066-\u2069]")


def _escaped(match: re.Match[str]) -> str:
    code = ord(match[0])
    return f"\\x{code:02x}" if code < 0x100 else f"\\u{code:04x}"


def printable(text: str) -> str:
    """``text`` with each control character as a visible escape (``\\x1b``);
    newlines stay."""
    return _CONTROL.sub(_escaped, text)


def shown(text: str | None, style: str = "") -> Text:
    """A stored string for a table cell or a line: escaped, never markup."""
    return Text(printable(text or ""), style=style)


class _Console(Console):
    """A rich console that escapes control characters in every string it renders."""

    def render_str(self, text: str, **options: Any) -> Text:
        return super().render_str(printable(text), **options)


class _LogHandler(RichHandler):
    """Log lines on stderr, their messages escaped too (they quote stored names)."""

    def render_message(self, record: logging.LogRecord, message: str) -> ConsoleRenderable:
        return super().render_message(record, printable(message))


#: Frames of a traceback shown in a log line (the innermost ones).
LOG_TRACEBACK_FRAMES = 30

_ExcInfo = tuple[type[BaseException], BaseException, TracebackType | None]


def _utc(seconds: float | None) -> time.struct_time:
    return time.gmtime(seconds)


class PlainFormatter(logging.Formatter):
    """``2026-11-25T16:47:43.512Z WARNING osqueue.client.worker.settle: message``:
    one line per record (ISO-8601 UTC), control characters escaped, a traceback
    (its innermost ``LOG_TRACEBACK_FRAMES`` frames) on the lines below."""

    default_time_format = "%Y-%m-%dT%H:%M:%S"
    default_msec_format = "%s.%03dZ"

    def __init__(self) -> None:
        super().__init__("%(asctime)s %(levelname)s %(name)s: %(message)s")
        self.converter = _utc

    def formatMessage(self, record: logging.LogRecord) -> str:
        return printable(super().formatMessage(record))

    def formatException(self, ei: _ExcInfo | tuple[None, None, None]) -> str:
        if ei[1] is None:
            return ""
        lines = traceback.format_exception(ei[1], limit=-LOG_TRACEBACK_FRAMES)
        return printable("".join(lines).rstrip())


class _TracebackFormatter(PlainFormatter):
    """The message alone (rich shows the time and level), a traceback as plain lines."""

    def __init__(self) -> None:
        logging.Formatter.__init__(self, "%(message)s")


class _PlainHandler(logging.StreamHandler):  # type: ignore[type-arg]
    """Plain lines on whatever ``sys.stderr`` is at each record (tests swap it)."""

    def __init__(self) -> None:
        super().__init__()
        self.setFormatter(PlainFormatter())

    @property
    def stream(self) -> Any:
        return sys.stderr

    @stream.setter
    def stream(self, value: Any) -> None:
        pass


def log_handler() -> logging.Handler:
    """The CLI's logging handler on stderr: on a terminal rich lines (messages never
    markup); off one plain lines, never padded or wrapped (:class:`PlainFormatter`)."""
    console = stderr()
    if not console.is_terminal:
        return _PlainHandler()
    handler = _LogHandler(
        console=console, show_path=False, markup=False, log_time_format="%H:%M:%S"
    )
    handler.setFormatter(_TracebackFormatter())  # plain traceback lines, bounded
    return handler


def stdout() -> Console:
    console = _Console(soft_wrap=True, highlight=False)
    if not console.is_terminal:
        console.width = _PIPE_WIDTH
    return console


def screen() -> Console:
    """A console for a live full-screen view (``osqueue top``): lines wrap at
    the terminal's width instead of running off it."""
    return _Console(highlight=False)


def stderr() -> Console:
    console = _Console(stderr=True, soft_wrap=True, highlight=False)
    if not console.is_terminal:
        console.width = _PIPE_WIDTH
    return console
