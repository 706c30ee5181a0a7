"""``osqueue dashboard URL``: the web dashboard (needs ``osqueue[dashboard]``).

It prints one line on stderr once it serves (``dashboard for URL at
http://HOST:PORT``) and runs until SIGTERM or Ctrl-C.  See
:mod:`osqueue.dashboard.web` for what it serves and
:mod:`osqueue.dashboard.security` for who may do what.
"""

from __future__ import annotations

import asyncio
import contextlib
import signal
from typing import Annotated, Any

import typer

from osqueue import runtime
from osqueue.cli import exits
from osqueue.cli.options import Url, connecting
from osqueue.errors import MissingExtra
from osqueue.inspect.options import ClientOptions

_WEB = "Dashboard"


@connecting
def dashboard(
    url: Url,
    listen: Annotated[
        str,
        typer.Option(
            "--listen",
            envvar="OSQUEUE_DASHBOARD_LISTEN",
            help="host:port to serve on (port 0: any free port). Beyond loopback, reading "
            "needs the admin login too, and a token is required unless --insecure.",
            rich_help_panel=_WEB,
        ),
    ] = "127.0.0.1:8080",
    *,
    options: ClientOptions,
    insecure: Annotated[
        bool,
        typer.Option(
            "--insecure",
            envvar="OSQUEUE_INSECURE",
            help="Allow a non-loopback --listen without a token (reading open to all, "
            "actions disabled).",
            rich_help_panel=_WEB,
        ),
    ] = False,
    allowed_hosts: Annotated[
        list[str] | None,
        typer.Option(
            "--allowed-host",
            envvar="OSQUEUE_DASHBOARD_ALLOWED_HOSTS",
            help="Also answer requests whose Host header names this (NAME for any port, "
            "NAME:PORT, [v6]:PORT; * for any name, behind a proxy that checks Host). "
            "Repeat it, or list names in the variable. Without it only the listen "
            "address is served (on loopback also localhost, 127.0.0.1 and [::1]): "
            "a page of another site cannot rebind its DNS name onto the dashboard.",
            rich_help_panel=_WEB,
        ),
    ] = None,
    refresh_s: Annotated[
        float,
        typer.Option(
            "--refresh-s",
            envvar="OSQUEUE_REFRESH_S",
            min=0.2,
            help="Read the queue document this often (longer while a large one decodes).",
            rich_help_panel=_WEB,
        ),
    ] = 2.0,
    max_connections: Annotated[
        int,
        typer.Option(
            "--max-connections",
            envvar="OSQUEUE_DASHBOARD_MAX_CONNECTIONS",
            min=1,
            help="Connections served at once; more are answered 503 and closed.",
            rich_help_panel=_WEB,
        ),
    ] = 256,
    header_timeout_s: Annotated[
        float,
        typer.Option(
            "--header-timeout-s",
            envvar="OSQUEUE_DASHBOARD_HEADER_TIMEOUT_S",
            min=0.1,
            help="Close a connection that sends no complete request head this long after it "
            "opened or got its last answer.",
            rich_help_panel=_WEB,
        ),
    ] = 10.0,
) -> None:
    """Serve a web dashboard of the queue at URL: queues, jobs, dead letters, archive, broker.

    Pages read the queue document and the archive from storage (no broker
    needed to look).  Actions (retry or purge dead jobs, cancel a job, pause a
    queue) go through the broker, reached by the Connection options as every
    command reaches it, and need the admin token: the broker's token, given
    here with --token-file or OSQUEUE_TOKEN, typed into the login form.
    Without a token, on a loopback --listen, they need no login while the
    broker is on loopback too.
    """
    web = _import_web()
    from osqueue.dashboard.board import DashboardConfig

    config = DashboardConfig(
        client=options,
        listen=listen,
        insecure=insecure,
        allowed_hosts=tuple(
            name for entry in allowed_hosts or () for name in entry.split(",") if name
        ),
        refresh_s=refresh_s,
        poll_s=max(refresh_s, 1.0),
        max_connections=max_connections,
        header_timeout_s=header_timeout_s,
    )
    board = web.Dashboard(config)  # refuses a non-loopback address without a token
    runtime.raise_open_files_limit()  # before the listener sizes its cap by it
    runtime.run(_serve(board, url))


def _import_web() -> Any:
    try:
        from osqueue.dashboard import web
    except ImportError as exc:
        missing = (exc.name or "").split(".")[0]
        if missing in {"aiohttp", "jinja2"}:
            raise MissingExtra("dashboard", missing) from exc
        raise
    return web


async def _serve(board: Any, url: str) -> None:
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGTERM, signal.SIGINT):
        with contextlib.suppress(NotImplementedError, RuntimeError):
            loop.add_signal_handler(sig, stop.set)
    address = await board.start()
    try:
        if board.access.local_actions:
            exits.info(
                "no admin token: actions need no login while the broker is on loopback "
                "(give --token-file or OSQUEUE_TOKEN to require one)"
            )
        elif board.access.token is None:
            exits.warn("no admin token (--token-file or OSQUEUE_TOKEN): actions are disabled")
        exits.info(f"dashboard for {url} at {address}")
        await stop.wait()
    finally:
        await board.stop()
    exits.info("dashboard stopped")
