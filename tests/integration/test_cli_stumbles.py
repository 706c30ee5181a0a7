"""What a new user stumbled on (issue 26), driven through ``python -m osqueue.cli``:
exit codes and exact messages."""

from __future__ import annotations

import subprocess
from pathlib import Path

from test_cli import (
    OSQUEUE,
    TIMEOUT_S,
    Proc,
    handlers_dir,
    procs,
    qdir,
    read_doc,
    seed,
    spawn,
    start_broker,
    url_of,
)

from osqueue.cli import exits
from osqueue.errors import InvalidInput

MIB = 1024 * 1024
__all__ = ["handlers_dir", "procs", "qdir"]  # fixtures, imported for their use here


def run(
    *args: str, stdin: bytes = b"", cwd: Path | None = None
) -> subprocess.CompletedProcess[bytes]:
    return subprocess.run(
        [*OSQUEUE, *args], input=stdin, capture_output=True, timeout=TIMEOUT_S, cwd=cwd
    )


def test_push_lines_with_a_bad_middle_line_pushes_nothing_and_names_the_line(
    qdir: Path, handlers_dir: Path, procs: list[Proc]
) -> None:
    start_broker(procs, handlers_dir, qdir)
    before = set(read_doc(qdir).jobs)
    lines = b"first\n" + b"x" * (5 * MIB) + b"\nthird\n"
    pushed = run("push", url_of(qdir), "--lines", stdin=lines)
    assert pushed.returncode == exits.EXIT_CODES[InvalidInput] == 3
    assert pushed.stdout == b""
    assert pushed.stderr.decode().splitlines() == [
        "error: InvalidInput: line 2: payload: is 5242880 bytes; at most 4194304"
        " (nothing was pushed)"
    ]
    assert set(read_doc(qdir).jobs) == before
