"""The ``osqueue`` command: one Typer app, one module per command.

Logging is configured here and nowhere else.  Every failure ends as one red
line on stderr and an exit code from :mod:`osqueue.cli.exits` (a traceback
only with ``--debug``).  The Spark commands (``pipeline``, ``demo``) are
imported only when invoked, so the core commands work without pyspark and a
missing extra is one clear line.
"""

from __future__ import annotations

import enum
import importlib
import logging
import sys
from collections.abc import Callable
from dataclasses import dataclass
from typing import Annotated, Any

import typer
from typer._click.core import Command, Context  # typer >= 0.2x vendors click
from typer.core import TyperGroup

from osqueue.cli import (
    archive,
    bench,
    broker,
    cancel,
    dashboard,
    dead,
    exits,
    jobs,
    push,
    queue,
    result,
    schedule,
    segments,
    status,
    top,
    work,
)
from osqueue.cli.console import log_handler, stderr
from osqueue.errors import MissingExtra

_HELP = (
    "A durable job queue whose whole state is one JSON document on object storage.\n\n"
    "Point every command at the queue's storage URL (file:///dir, s3://bucket/prefix, gs://, "
    "az://, memory://name); clients find the broker through the document."
)


class LogLevel(enum.StrEnum):
    debug = "debug"
    info = "info"
    warning = "warning"
    error = "error"


@dataclass(frozen=True, slots=True)
class CliState:
    debug: bool


class OsqueueGroup(TyperGroup):
    """Turns every exception from a command into one line and an exit code."""

    def invoke(self, ctx: Context) -> Any:
        try:
            return super().invoke(ctx)
        except (typer.Exit, typer.Abort, typer.TyperException):
            raise
        except KeyboardInterrupt:
            stderr().print("[yellow]interrupted[/]")
            raise typer.Exit(exits.INTERRUPTED) from None
        except BrokenPipeError:
            raise typer.Exit(exits.closed_stdout()) from None
        except Exception as exc:
            state = ctx.obj if isinstance(ctx.obj, CliState) else CliState(debug=False)
            raise typer.Exit(exits.report(exc, debug=state.debug)) from None


app = typer.Typer(
    name="osqueue",
    cls=OsqueueGroup,
    help=_HELP,
    no_args_is_help=True,
    add_completion=False,
    pretty_exceptions_enable=False,
    context_settings={"help_option_names": ["-h", "--help"], "max_content_width": 110},
)


@app.callback()
def _global(
    ctx: typer.Context,
    debug: Annotated[
        bool,
        typer.Option("--debug", envvar="OSQUEUE_DEBUG", help="Show tracebacks and debug logs."),
    ] = False,
    log_level: Annotated[
        LogLevel,
        typer.Option("--log-level", envvar="OSQUEUE_LOG_LEVEL", help="Log level (stderr)."),
    ] = LogLevel.warning,
) -> None:
    configure_logging(LogLevel.debug if debug else log_level)
    ctx.obj = CliState(debug=debug)


def configure_logging(level: LogLevel) -> None:
    """Log to stderr through rich; the only place osqueue configures logging."""
    root = logging.getLogger()
    for handler in list(root.handlers):
        if getattr(handler, "_osqueue", False):
            root.removeHandler(handler)
    handler = log_handler()
    handler._osqueue = True  # type: ignore[attr-defined]
    root.addHandler(handler)
    root.setLevel(level.value.upper())
    # gRPC's C core logs through its own channel; keep Python-side noise down.
    logging.getLogger("asyncio").setLevel(max(logging.WARNING, root.level))


_RUNTIME = "Run a queue"
_INSPECT = "Inspect and repair"
_SPARK = "Spark (needs osqueue\\[spark])"

app.command("broker", rich_help_panel=_RUNTIME)(broker.broker)
app.command("push", rich_help_panel=_RUNTIME)(push.push)
app.command("work", rich_help_panel=_RUNTIME)(work.work)
app.command("schedule", rich_help_panel=_RUNTIME)(schedule.schedule)
app.command("queue", rich_help_panel=_RUNTIME)(queue.queue)
app.command("status", rich_help_panel=_INSPECT)(status.status)
app.command("top", rich_help_panel=_INSPECT)(top.top)
app.command("dashboard", rich_help_panel=_INSPECT)(dashboard.dashboard)
app.command("jobs", rich_help_panel=_INSPECT)(jobs.jobs)
app.command("dead", rich_help_panel=_INSPECT)(dead.dead)
app.command("cancel", rich_help_panel=_INSPECT)(cancel.cancel)
app.command("result", rich_help_panel=_INSPECT)(result.result)
app.command("archive", rich_help_panel=_INSPECT)(archive.archive)
app.command("bench", rich_help_panel=_INSPECT)(bench.bench)
app.add_typer(segments.segments_app, name="segments", rich_help_panel=_INSPECT)


# --------------------------------------------------------------------------- lazy Spark commands


def _import_extra(module: str) -> Any:
    """Import a CLI module that needs the spark extra; MissingExtra if pyspark is absent."""
    try:
        return importlib.import_module(module)
    except ImportError as exc:
        missing = (exc.name or "").split(".")[0]
        if missing in {"pyspark", "pyarrow", "pandas", "matplotlib", "py4j"}:
            raise MissingExtra("spark", missing) from exc
        raise


def _delegate(ctx: typer.Context, load: Callable[[], Command], name: str) -> None:
    """Run the lazily loaded command ``name`` with the rest of the command line."""
    command = load()
    code = command.main(
        args=list(ctx.args), prog_name=f"osqueue {name}", standalone_mode=False, obj=ctx.obj
    )
    if isinstance(code, int) and code != 0:
        raise typer.Exit(code)


_PASS_THROUGH: dict[str, Any] = {
    "allow_extra_args": True,
    "ignore_unknown_options": True,
    "help_option_names": [],
}


@app.command(
    "pipeline",
    rich_help_panel=_SPARK,
    context_settings=_PASS_THROUGH,
    add_help_option=False,
)
def _pipeline(ctx: typer.Context) -> None:
    """The shipped Spark pipeline: WAL segments -> indexing jobs -> Parquet, and reports."""

    def load() -> Command:
        module = _import_extra("osqueue.cli.pipeline")
        return typer.main.get_command(module.pipeline_app)

    _delegate(ctx, load, "pipeline")


@app.command("demo", rich_help_panel=_SPARK, context_settings=_PASS_THROUGH, add_help_option=False)
def _demo(ctx: typer.Context) -> None:
    """Run the end-to-end demo (broker, producers, Spark workers, report)."""

    def load() -> Command:
        module = _import_extra("osqueue.cli.demo")
        single = typer.Typer(add_completion=False, pretty_exceptions_enable=False)
        single.command("demo")(module.demo)
        return typer.main.get_command(single)

    _delegate(ctx, load, "demo")


def main() -> None:
    """Console-script entry point (``osqueue = "osqueue.cli.app:main"``)."""
    try:
        app(prog_name="osqueue")
    except BrokenPipeError:  # ``osqueue --help | head``: the reader left; not an error
        sys.exit(exits.closed_stdout())
