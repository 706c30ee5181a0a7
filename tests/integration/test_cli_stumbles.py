"""What a new user stumbled on (issue 26), driven through ``python -m osqueue.cli``:
exit codes and exact messages."""

from __future__ import annotations

import os
import re
import signal
import socket
import subprocess
from concurrent.futures import ThreadPoolExecutor
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
from typer.main import get_command

import osqueue
from osqueue.cli import exits
from osqueue.cli.app import app
from osqueue.errors import BrokerUnavailable, InvalidInput, NotFound, Unauthenticated
from osqueue.inspect.status import age_text

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
        "error: InvalidInput: line 2: payload: 5242880 bytes is above the limit of 4194304"
        " (nothing was pushed)"
    ]
    assert set(read_doc(qdir).jobs) == before


def test_a_worker_variable_does_not_change_a_queue_that_is_only_shown(qdir: Path) -> None:
    seed(qdir)  # a stopped queue: showing needs no broker, writing would
    shown = subprocess.run(
        [*OSQUEUE, "queue", url_of(qdir), "images"],
        env={**os.environ, "OSQUEUE_BURST": "1", "OSQUEUE_AFTER": "x"},
        capture_output=True,
        timeout=TIMEOUT_S,
    )
    assert shown.returncode == 0, shown.stderr
    assert shown.stdout.decode() == "images: running, no limits\n"
    assert "images" not in read_doc(qdir).queue_settings


def test_one_variable_has_one_meaning_across_commands() -> None:
    """An ``OSQUEUE_*`` variable read by several commands is the same option in each
    (same name, same kind): one variable never means two things."""
    kinds: dict[str, set[tuple[str, bool, bool]]] = {}
    for command in get_command(app).commands.values():  # type: ignore[attr-defined]
        for param in command.params:
            envvar = getattr(param, "envvar", None)
            if isinstance(envvar, str):
                flag = bool(getattr(param, "is_flag", False))
                kind = (param.name or "", flag, bool(getattr(param, "multiple", False)))
                kinds.setdefault(envvar, set()).add(kind)
    # the worker reads the broker's heartbeat timeout under the broker's variable
    kinds.pop("OSQUEUE_HEARTBEAT_TIMEOUT_S")
    assert {env: k for env, k in kinds.items() if len(k) > 1} == {}


def test_a_handler_with_a_syntax_error_shows_where_and_exits_78(
    qdir: Path, handlers_dir: Path
) -> None:
    (handlers_dir / "typo_handlers.py").write_text("def handle(job)\n    return None\n")
    result = run("work", url_of(qdir), "-H", "typo_handlers:handle", cwd=handlers_dir)
    assert result.returncode == exits.CONFIG == 78
    assert result.stderr.decode().splitlines() == [
        f'  File "{handlers_dir / "typo_handlers.py"}", line 1',
        "    def handle(job)",
        "                   ^",
        "SyntaxError: expected ':'",
        "error: handler module 'typo_handlers' failed to import: SyntaxError: expected ':'"
        " (typo_handlers.py, line 1)",
    ]


def test_debug_is_taken_after_the_command_too(tmp_path: Path) -> None:
    missing = url_of(tmp_path / "nothere")
    result = run("status", missing, "--debug")
    assert result.returncode == exits.EXIT_CODES[NotFound]
    err = result.stderr.decode()
    assert "Traceback (most recent call last)" in err
    assert err.splitlines()[-1].startswith(f"error: NotFound: no queue at {missing}")


def test_the_exit_code_table_in_the_docs_is_the_one_in_exits() -> None:
    doc = (Path(__file__).parents[2] / "docs" / "operations.md").read_text()
    table = dict(
        (int(code), meaning) for code, meaning in re.findall(r"^\| (\d+) \| (.+) \|$", doc, re.M)
    )
    for cls, code in exits.EXIT_CODES.items():
        assert f"`{cls.__name__}`" in table[code], (code, cls)
    plain = {
        exits.OK,
        exits.ERROR,
        exits.USAGE,
        exits.INTERNAL,
        exits.NOT_FINISHED,
        exits.CONFIG,
        exits.INTERRUPTED,
        exits.BROKEN_PIPE,
    }
    assert set(table) == {*exits.EXIT_CODES.values(), *plain}


STAMP = r"\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{3}Z"
NO_ADDRESS = (
    "the queue document names no broker address (no broker running, a broker stopping,"
    " or an embedded broker in another process)"
)


def test_a_burst_worker_without_a_broker_says_so_then_exits_8(
    qdir: Path, handlers_dir: Path
) -> None:
    seed(qdir)  # a queue whose broker stopped
    url = url_of(qdir)
    result = run(
        "work",
        url,
        "-H",
        "cli_handlers:ok",
        "-q",
        "a",
        "--burst",
        "--retry-for-s",
        "5",
        cwd=handlers_dir,
    )
    assert result.returncode == exits.EXIT_CODES[BrokerUnavailable] == 8
    lines = result.stderr.decode().splitlines()
    assert re.fullmatch(
        rf"{STAMP} WARNING osqueue\.cli\.work: no broker is serving {re.escape(url)} for \d s"
        rf" \(tried: {re.escape(NO_ADDRESS)}\); the worker exits \(code 8\) if none answers"
        r" within 5 s",
        lines[1],
    ), lines
    assert lines[-1] == (
        f"error: BrokerUnavailable: no broker for {url} answered within 5s; last error: "
        + NO_ADDRESS
    )


def test_a_worker_without_a_broker_tells_and_stops_on_sigterm_with_info(
    qdir: Path, handlers_dir: Path, procs: list[Proc]
) -> None:
    seed(qdir)
    url = url_of(qdir)
    # a claim keeps trying for ten minutes: the warning comes from the watch, in seconds
    worker = spawn(
        procs,
        handlers_dir,
        "work",
        url,
        "-H",
        "cli_handlers:ok",
        "-q",
        "a",
        "--retry-for-s",
        "600",
        "--log-level",
        "info",
    )
    told = worker.expect(worker.err, r"no broker is serving")
    assert re.match(rf"{STAMP} WARNING osqueue\.cli\.work: ", told.string)
    assert "still trying; told again every 60 s" in told.string
    worker.popen.send_signal(signal.SIGTERM)
    stopping = worker.expect(worker.err, r"SIGTERM received")
    assert re.fullmatch(
        rf"{STAMP} INFO osqueue\.client\.worker\.worker: SIGTERM received: stopping gracefully",
        stopping.string,
    )
    assert worker.wait() == 0


def test_worker_logs_off_a_terminal_are_plain_lines_with_the_handlers_traceback(
    qdir: Path, handlers_dir: Path
) -> None:
    url = url_of(qdir)
    pushed = run("push", url, "--embedded", "--data", "bad-1", "-q", "a", cwd=handlers_dir)
    job_id = pushed.stdout.decode().strip()
    result = run(
        "work", url, "--embedded", "-H", "cli_handlers:ok", "-q", "a", "--burst", cwd=handlers_dir
    )
    assert result.returncode == 0, result.stderr
    lines = result.stderr.decode().splitlines()
    assert all(line == line.rstrip() and len(line) < 200 for line in lines), lines
    failed = [i for i, line in enumerate(lines) if " failed: " in line]
    assert len(failed) == 1, lines
    i = failed[0]
    assert re.fullmatch(
        rf"{STAMP} WARNING osqueue\.client\.worker\.settle: job {job_id} failed:"
        r" ValueError: cannot handle bad-1",
        lines[i],
    )
    assert lines[i + 1] == "Traceback (most recent call last):"
    assert any('cli_handlers.py", line 6, in ok' in line for line in lines[i + 2 :])
    assert lines[-1].startswith("worker ")
    assert lines[-1].endswith("stopped: processed 0, failed 1, retried 0, lost 0, released 0")


#: options that have no variable on purpose: one left set must not remove a queue
NO_VARIABLE = {("queue", "--remove")}


def test_every_commands_help_shows_each_options_variable_and_default() -> None:
    """``osqueue CMD -h`` on a wide terminal: each option's row names its variable
    and, when it has one, its default."""
    group = get_command(app)
    missing: list[str] = []
    commands = {n: c for n, c in group.commands.items() if n not in ("pipeline", "demo")}  # type: ignore[attr-defined]
    wide = {**os.environ, "TERMINAL_WIDTH": "1000"}

    def helped(name: str) -> str:
        return subprocess.run(
            [*OSQUEUE, name, "-h"],
            env=wide,
            capture_output=True,
            text=True,
            timeout=TIMEOUT_S,
            check=True,
        ).stdout

    # (a process each, a few at once: one by one they took 18 to 42 s)
    with ThreadPoolExecutor(max_workers=4) as pool:
        helps = dict(zip(commands, pool.map(helped, commands), strict=True))
    for name, command in commands.items():
        shown = helps[name]
        for param in command.params:
            if param.param_type_name != "option" or param.name == "help" or param.hidden:  # type: ignore[attr-defined]
                continue
            first = next(o for o in param.opts if o.startswith("--"))
            rows = [
                line
                for line in shown.splitlines()
                if re.match(rf"│[ *]+{re.escape(first)}[ /]", line)
            ]
            if len(rows) != 1:
                missing.append(f"{name} {first}: {len(rows)} rows")
                continue
            if (name, first) not in NO_VARIABLE and f"[env var: {param.envvar}]" not in rows[0]:
                missing.append(f"{name} {first}: no variable")
            if param.default not in (None, False, "") and "[default: " not in rows[0]:
                missing.append(f"{name} {first}: no default ({param.default!r})")
    assert missing == []
    for lazy in ("pipeline", "demo"):
        assert run(lazy, "-h").returncode == 0


def test_version_and_the_smaller_spellings(tmp_path: Path) -> None:
    version = run("--version")
    assert (version.returncode, version.stdout.decode()) == (0, f"osqueue {osqueue.__version__}\n")
    bare = run("status", "/tmp/q")
    assert bare.returncode == 3
    assert bare.stderr.decode().endswith("(did you mean file:///tmp/q?)\n")
    wide = {**os.environ, "TERMINAL_WIDTH": "1000"}
    for command in ("broker", "work"):
        helped = subprocess.run(
            [*OSQUEUE, command, "-h"], env=wide, capture_output=True, text=True, check=True
        )
        assert "needs osqueue[metrics])" in helped.stdout
    result_help = subprocess.run(
        [*OSQUEUE, "result", "-h"], env=wide, capture_output=True, text=True, check=True
    ).stdout
    assert "--wait-s" in result_help
    assert not re.search(r"--wait\b(?!-s)", result_help)  # the old spelling works, unlisted


def test_result_takes_the_old_wait_spelling_too(qdir: Path) -> None:
    ids = seed(qdir)
    for spelling in ("--wait-s", "--wait"):
        waited = run("result", url_of(qdir), ids["a"][1], spelling, "0.05", "--embedded")
        assert waited.returncode == 75, waited.stderr  # the job is queued: the wait ran out


def test_a_port_in_use_is_one_line(qdir: Path) -> None:
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        address = f"127.0.0.1:{taken.getsockname()[1]}"
        result = run("broker", url_of(qdir), "--listen", address)
    assert result.returncode == exits.ERROR
    assert result.stderr.decode().splitlines() == [
        f"error: OsqueueError: cannot listen on {address}: the address is in use (another"
        " process listens there; a port of 0 takes any free one)"
    ]


def test_a_missing_token_names_the_cli_option(qdir: Path, procs: list[Proc]) -> None:
    start_broker(procs, qdir, qdir, "--token", "s3cret")
    pushed = run("push", url_of(qdir), "--data", "x")
    assert pushed.returncode == exits.EXIT_CODES[Unauthenticated]
    assert pushed.stderr.decode().splitlines()[-1] == (
        "error: Unauthenticated: no bearer token: give --token, --token-file or OSQUEUE_TOKEN"
        " (osqueue CLI), or connect(token=...) from Python"
    )


def test_schedule_remove_of_a_missing_one_is_not_found(qdir: Path) -> None:
    seed(qdir)
    removed = run("schedule", url_of(qdir), "remove", "nothere", "--embedded")
    assert removed.returncode == exits.EXIT_CODES[NotFound] == 4
    url = url_of(qdir)
    assert removed.stderr.decode().splitlines() == [
        f"error: NotFound: no schedule 'nothere' at {url} (`osqueue schedule {url} list`"
        " shows them)"
    ]


def test_ages_are_printed_one_way() -> None:
    assert [age_text(s) for s in (None, 4.24, 43.9, 103.3, 120.0, 927.0, 11_100.0, 200_000.0)] == [
        "-", "4.2s", "43s", "1m43s", "2m0s", "15m27s", "3h5m", "2d7h",
    ]  # fmt: skip


def test_push_lines_that_loses_its_broker_midway_says_where_to_resend(
    qdir: Path, handlers_dir: Path, procs: list[Proc]
) -> None:
    broker, _ = start_broker(procs, handlers_dir, qdir)
    pusher = spawn(
        procs, handlers_dir, "push", url_of(qdir), "--lines", "--stream", "--retry-for-s", "1",
        stdin=True,
    )  # fmt: skip
    pusher.write("one\n")
    first = pusher.expect(pusher.out, r"^(\S+)$").group(1)
    broker.popen.kill()  # kill -9: the document still names it; nobody answers there
    broker.wait()
    pusher.write("two\nthree\n")
    pusher.close_stdin()
    assert pusher.wait() == exits.EXIT_CODES[BrokerUnavailable]
    assert pusher.rest(pusher.out) == []  # no id but the committed one's
    told = pusher.rest(pusher.err)
    assert "warning: pushed line 1 (ids above); resend from line 2" in told, told
    assert told[-1].startswith("error: BrokerUnavailable: ")
    assert set(read_doc(qdir).jobs) == {first}


def test_push_lines_stream_stops_at_a_bad_line_and_names_it(
    qdir: Path, handlers_dir: Path, procs: list[Proc]
) -> None:
    start_broker(procs, handlers_dir, qdir)
    pusher = spawn(procs, handlers_dir, "push", url_of(qdir), "--lines", "--stream", stdin=True)
    pusher.write("one\n")
    first = pusher.expect(pusher.out, r"^(\S+)$").group(1)
    pusher.write("x" * (5 * MIB) + "\n")
    pusher.close_stdin()
    assert pusher.wait() == 3
    assert pusher.rest(pusher.err)[-1] == (
        "error: InvalidInput: line 2: payload: 5242880 bytes is above the limit of 4194304"
        " (only line 1 was pushed)"
    )
    assert set(read_doc(qdir).jobs) == {first}
