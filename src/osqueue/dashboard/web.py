"""The dashboard's web server: aiohttp, server-rendered pages, one JSON endpoint.

Why aiohttp: osqueue is asyncio throughout, and aiohttp is one maintained
package that is both the HTTP server and (for tests) the client, with no ASGI
server to pick and run beside it; saq ships its web UI on it too.  The pages
are HTML from Jinja2 templates with a little vanilla JavaScript that refreshes
the overview from ``/api/overview`` and draws its charts as inline SVG.  Every
asset is package data: the dashboard works with no internet.

:class:`Dashboard` serves a :class:`~osqueue.dashboard.board.Board` (the parts: a
:class:`~osqueue.inspect.snapshot.SnapshotSource` reading the document in the
background, the history and broker log it feeds, the archive view, the actions,
the sessions and the access rule).  The handlers live in :mod:`osqueue.dashboard.pages`.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Awaitable, Callable
from importlib import resources

from aiohttp import web

from osqueue.address import split_host_port
from osqueue.dashboard import pages
from osqueue.dashboard.actions import PauseUnavailable
from osqueue.dashboard.board import (
    DASHBOARD,
    SESSION,
    Board,
    dashboard_of,
    page_context,
    session_of,
)
from osqueue.dashboard.listener import BoundedSite
from osqueue.dashboard.security import (
    COOKIE,
    Refused,
    Session,
)
from osqueue.errors import InvalidInput, JobNotFound, NotFound, OsqueueError
from osqueue.runtime import FD_RESERVE, connection_cap

log = logging.getLogger(__name__)

Handler = Callable[[web.Request], Awaitable[web.StreamResponse]]


#: no inline script or style, nothing from elsewhere, no framing
_HEADERS = {
    "Content-Security-Policy": (
        "default-src 'self'; script-src 'self'; style-src 'self'; img-src 'self' data:; "
        "connect-src 'self'; form-action 'self'; frame-ancestors 'none'; base-uri 'none'"
    ),
    "X-Content-Type-Options": "nosniff",
    "X-Frame-Options": "DENY",
    "Referrer-Policy": "same-origin",
    "Cache-Control": "no-store",
}


class Dashboard(Board):
    """The web app and what it reads from; ``start()`` serves it, ``stop()`` ends it."""

    _runner: web.AppRunner | None = None
    _reader: asyncio.Task[None] | None = None
    #: ``http://host:port`` once started
    address: str | None = None

    def app(self) -> web.Application:
        app = web.Application(middlewares=[_host_check, _errors, _sessions_and_headers])
        app[DASHBOARD] = self
        pages.add_routes(app)
        static = resources.files("osqueue.dashboard") / "static"
        with resources.as_file(static) as static_dir:
            app.router.add_static("/static/", static_dir, name="static")
        return app

    async def start(self) -> str:
        """Read the document once, start the background reader, serve; the base URL."""
        await self.source.refresh()
        self._reader = asyncio.create_task(self.source.run(), name="dashboard-reader")
        host, port = split_host_port(self.config.listen)
        runner = web.AppRunner(
            self.app(),
            access_log=None,
            handle_signals=False,
            keepalive_timeout=self.config.header_timeout_s,
        )
        await runner.setup()
        cap = connection_cap(self.config.max_connections, FD_RESERVE, listener="dashboard")
        site = BoundedSite(runner, host, port, max_connections=cap)
        try:
            await site.start()
        except OSError as exc:
            await runner.cleanup()
            await self._stop_reader()
            raise InvalidInput(
                f"cannot listen on {self.config.listen}: {exc}", field="listen"
            ) from exc
        self._runner = runner
        bound = _bound_port(runner) or port
        shown_host = f"[{host}]" if ":" in host else host
        self.address = f"http://{shown_host}:{bound}"
        return self.address

    async def _stop_reader(self) -> None:
        if self._reader is not None:
            self._reader.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._reader
            self._reader = None

    async def stop(self) -> None:
        if self._runner is not None:
            await self._runner.cleanup()
            self._runner = None
        await self._stop_reader()
        await self.source.close()

    async def __aenter__(self) -> Dashboard:
        await self.start()
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.stop()


def _bound_port(runner: web.AppRunner) -> int | None:
    for site in runner.sites:
        server = getattr(site, "_server", None)
        sockets = getattr(server, "sockets", None) or []
        for sock in sockets:
            return int(sock.getsockname()[1])
    return None


@web.middleware
async def _host_check(request: web.Request, handler: Handler) -> web.StreamResponse:
    """Answer only requests that name this dashboard (no DNS rebinding)."""
    sockname = request.transport.get_extra_info("sockname") if request.transport else None
    local = (str(sockname[0]), int(sockname[1])) if sockname else None
    try:
        dashboard_of(request).hosts.check(request.headers.get("Host"), local)
    except Refused as exc:
        return web.Response(text=exc.message + "\n", status=exc.status, headers=_HEADERS)
    return await handler(request)


@web.middleware
async def _sessions_and_headers(request: web.Request, handler: Handler) -> web.StreamResponse:
    board = dashboard_of(request)
    cookie = request.cookies.get(COOKIE)
    session = board.sessions.get(cookie) or board.sessions.visitor(cookie)
    fresh = session.id != cookie
    request[SESSION] = session
    response = await handler(request)
    current = session_of(request)  # a login or logout replaces the session
    if fresh or current is not session:
        set_cookie(response, current)
    for name, value in _HEADERS.items():
        response.headers.setdefault(name, value)
    return response


def set_cookie(response: web.StreamResponse, session: Session) -> None:
    response.set_cookie(COOKIE, session.id, httponly=True, samesite="Strict", path="/")


_STATUS_OF: tuple[tuple[type[OsqueueError], int], ...] = (
    (InvalidInput, 400),
    (PauseUnavailable, 501),
    (JobNotFound, 404),
    (NotFound, 404),
)


@web.middleware
async def _errors(request: web.Request, handler: Handler) -> web.StreamResponse:
    """Refusals and osqueue errors as a page (or JSON for the API) with a clear message."""
    try:
        return await handler(request)
    except web.HTTPException:
        raise
    except Refused as exc:
        response = error_response(request, exc.status, exc.message, login=exc.login)
        if exc.retry_after_s is not None:
            response.headers["Retry-After"] = str(exc.retry_after_s)
        return response
    except OsqueueError as exc:
        status = next((code for cls, code in _STATUS_OF if isinstance(exc, cls)), 502)
        if status == 502:
            log.warning("dashboard request failed: %s", exc, extra={"path": request.path})
        return error_response(request, status, f"{type(exc).__name__}: {exc}")


def error_response(
    request: web.Request, status: int, message: str, *, login: bool = False
) -> web.Response:
    if request.path.startswith("/api/"):
        return web.json_response({"error": message}, status=status)
    board = dashboard_of(request)
    session = request.get(SESSION)
    body = board.renderer.page(
        "message.html",
        title="Refused" if status in (401, 403) else "Error",
        message=message,
        status=status,
        login=login,
        **page_context(request, session),
    )
    return web.Response(text=body, status=status, content_type="text/html")
