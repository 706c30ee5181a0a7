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


def log_handler() -> RichHandler:
    """The CLI's logging handler: stderr, rich tracebacks, messages never markup."""
    return _LogHandler(console=stderr(), show_path=False, rich_tracebacks=True, markup=False)


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
