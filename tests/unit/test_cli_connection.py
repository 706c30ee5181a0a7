"""The CLI's connection options: declared once (``cli/options.py``'s ``CONNECTION``),
the same in every command that calls the broker, and built into one
``ClientOptions`` in one place (``connecting``)."""

from __future__ import annotations

import ast
import inspect
from pathlib import Path
from typing import Any

import pytest
import typer
from typer.main import get_command
from typer.testing import CliRunner

from osqueue.cli import exits
from osqueue.cli.app import app
from osqueue.cli.options import CONNECTION, Url, connecting
from osqueue.errors import InvalidInput
from osqueue.inspect.options import ClientOptions

CLI = Path(__file__).resolve().parents[2] / "src" / "osqueue" / "cli"

#: every command that reaches the broker as a client (``broker`` takes a token of
#: its own: the one it requires; the dashboard's token is also its admin login)
CLIENT_COMMANDS = (
    ("dashboard",),
    ("push",),
    ("work",),
    ("schedule",),
    ("queue",),
    ("dead",),
    ("cancel",),
    ("result",),
    ("segments", "readmit"),
)


def _leaf(path: tuple[str, ...]) -> Any:
    command: Any = get_command(app)
    for name in path:
        command = command.commands[name]
    return command


@pytest.mark.parametrize("path", CLIENT_COMMANDS, ids=" ".join)
def test_every_client_command_takes_every_connection_option(path: tuple[str, ...]) -> None:
    """The same six options, with the same flags, variables and help, in the
    Connection panel (``schedule``, ``queue`` and ``result`` once had four)."""
    params = {p.name: p for p in _leaf(path).params}
    for wanted in CONNECTION:
        param = params.get(wanted.name)
        assert param is not None, f"{' '.join(path)} has no {wanted.name}"
        info = wanted.annotation.__metadata__[0]
        assert (list(param.opts), param.envvar, param.help) == (
            [info.default],
            info.envvar,
            info.help,
        )
        assert param.rich_help_panel == "Connection"


@pytest.mark.parametrize("command", ["result", "schedule", "queue"])
def test_a_fingerprint_reaches_the_client_of_every_command(command: str, tmp_path: Path) -> None:
    """A bad ``--tls-fingerprint`` is refused by the client's configuration, naming
    the field (before, these commands did not know the option at all)."""
    url = tmp_path.as_uri()
    args = {
        "result": ["result", url, "01ARZ3NDEKTSV4RRFFQ69G5FAV"],
        "schedule": ["schedule", url, "remove", "beat"],
        "queue": ["queue", url, "images", "--pause"],
    }[command]
    result = CliRunner().invoke(app, [*args, "--tls-fingerprint", "12:34"])
    assert result.exit_code == exits.EXIT_CODES[InvalidInput], (result.stdout, result.stderr)
    assert "tls_fingerprint" in result.stderr


def test_connecting_builds_the_options_from_flags_and_variables() -> None:
    got: list[ClientOptions] = []

    def command(url: Url, *, options: ClientOptions) -> None:
        got.append(options)

    single = typer.Typer()
    single.command()(connecting(command))
    result = CliRunner().invoke(
        single,
        ["file:///q", "--token", "t0ken", "--tls-fingerprint", "ab", "--embedded"],
        env={"OSQUEUE_TLS_CA": "/ca.pem", "OSQUEUE_ALLOW_PLAINTEXT_TOKEN": "1"},
    )
    assert result.exit_code == 0, result.output
    assert got == [
        ClientOptions(
            "file:///q",
            token="t0ken",
            tls_ca="/ca.pem",
            embedded=True,
            tls_fingerprint="ab",
            allow_plaintext_token=True,
        )
    ]


def test_connecting_shows_the_options_in_the_place_of_the_parameter() -> None:
    def command(url: Url, first: int = 0, *, options: ClientOptions, last: int = 1) -> None:
        del url, first, options, last

    names = list(inspect.signature(connecting(command)).parameters)
    assert names == ["url", "first", *(p.name for p in CONNECTION), "last"]


def test_only_the_option_group_builds_client_options() -> None:
    """No command module writes ``ClientOptions(...)`` itself."""
    builders = [
        f"{path.name}:{node.lineno}"
        for path in sorted(CLI.glob("*.py"))
        if path.name != "options.py"
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8")))
        if isinstance(node, ast.Call)
        and isinstance(node.func, ast.Name)
        and node.func.id == "ClientOptions"
    ]
    assert builders == []
