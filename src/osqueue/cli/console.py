"""The CLI's two consoles: results on stdout, everything else on stderr.

Both write to whatever ``sys.stdout``/``sys.stderr`` are at the time of each
print (tests swap them).  Output that is not a terminal is never wrapped or cut to 80
columns: a pipe gets whole lines.
"""

from __future__ import annotations

from rich.console import Console

_PIPE_WIDTH = 240


def stdout() -> Console:
    console = Console(soft_wrap=True, highlight=False)
    if not console.is_terminal:
        console.width = _PIPE_WIDTH
    return console


def stderr() -> Console:
    console = Console(stderr=True, soft_wrap=True, highlight=False)
    if not console.is_terminal:
        console.width = _PIPE_WIDTH
    return console
