"""The dashboard's web server: aiohttp, server-rendered pages, one JSON endpoint.

Why aiohttp: osqueue is asyncio throughout, and aiohttp is one maintained
package that is both the HTTP server and (for tests) the client, with no ASGI
server to pick and run beside it; saq ships its web UI on it too.  The pages
are HTML from Jinja2 templates with a little vanilla JavaScript that refreshes
the overview from ``/api/overview`` and draws its charts as inline SVG.  Every
asset is package data: the dashboard works with no internet.

:class:`Dashboard` wires the parts: a :class:`~osqueue.inspect.snapshot.SnapshotSource`
reading the document in the background, the history and broker log it feeds,
the archive view, the actions, the sessions and the access rule.  The handlers
live in :mod:`osqueue.dashboard.pages`.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import math
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from importlib import resources

from aiohttp import web

from osqueue.address import split_host_port
from osqueue.dashboard.actions import Actions, PauseUnavailable
from osqueue.dashboard.listener import BoundedSite
from osqueue.dashboard.render import Renderer
from osqueue.dashboard.security import (
    COOKIE,
    Access,
    AllowedHosts,
    LoginThrottle,
    Refused,
    Session,
    Sessions,
    access_for,
)
from osqueue.errors import InvalidInput, JobNotFound, NotFound, OsqueueError
from osqueue.inspect.archive import ArchiveView
from osqueue.inspect.brokerlog import BrokerLog, CommitMetrics, DocumentMetrics
from osqueue.inspect.history import DocumentHistory, History, QueueRates, SampledHistory
from osqueue.inspect.options import ClientOptions
from osqueue.inspect.snapshot import SnapshotSource
from osqueue.runtime import FD_RESERVE, connection_cap
from osqueue.storage.port import Storage

log = logging.getLogger(__name__)

Handler = Callable[[web.Request], Awaitable[web.StreamResponse]]

DASHBOARD: web.AppKey[Dashboard] = web.AppKey("dashboard")
_SESSION: web.RequestKey[Session] = web.RequestKey("osqueue_session", Session)

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


@dataclass(frozen=True, slots=True)
class DashboardConfig:
    url: str
    listen: str = "127.0.0.1:8080"
    #: the admin token (also presented to the broker); None: actions disabled
    token: str | None = None
    tls_ca: str | None = None
    insecure: bool = False
    #: how often the document is read (longer when decoding is slow)
    refresh_s: float = 2.0
    #: how often the overview page asks for fresh numbers
    poll_s: float = 3.0
    #: one sample of the charts' history per this many seconds
    history_resolution_s: float = 10.0
    #: how long one action keeps trying to reach the broker
    action_timeout_s: float = 15.0
    #: Host names served besides the listen address (``name``, ``name:port``, ``*``)
    allowed_hosts: tuple[str, ...] = ()
    #: connections served at once; more are answered 503 and closed (never more
    #: than the open-files limit leaves beside ``runtime.FD_RESERVE``)
    max_connections: int = 256
    #: a connection without a complete request head this long after it opened
    #: (or after its last answer) is closed, however slowly its bytes trickle in
    header_timeout_s: float = 10.0

    def __post_init__(self) -> None:
        if type(self.max_connections) is not int or self.max_connections < 1:
            raise InvalidInput(
                f"must be a whole number >= 1, got {self.max_connections!r}",
                field="max_connections",
            )
        if not 0 < self.header_timeout_s < math.inf:
            raise InvalidInput(
                f"must be a number of seconds > 0, got {self.header_timeout_s!r}",
                field="header_timeout_s",
            )


class Dashboard:
    """The web app and what it reads from; ``start()`` serves it, ``stop()`` ends it."""

    def __init__(
        self,
        config: DashboardConfig,
        *,
        history: History | None = None,
        metrics: CommitMetrics | None = None,
        storage: Storage | None = None,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.config = config
        self.access: Access = access_for(config.listen, config.token, insecure=config.insecure)
        self.hosts = AllowedHosts(config.allowed_hosts)
        self.source = SnapshotSource(config.url, refresh_s=config.refresh_s, storage=storage)
        self.history: History = history or DocumentHistory(
            SampledHistory(resolution_s=config.history_resolution_s)
        )
        self.brokerlog = BrokerLog()
        if metrics is None:
            metrics = DocumentMetrics()
            self.source.observe(metrics.observe)
        self.metrics: CommitMetrics = metrics
        self.source.observe(self.history.observe)
        self.rates = QueueRates()
        self.source.observe(self.rates.observe)
        self.source.observe(self.brokerlog.observe)
        self.archive = ArchiveView(self.source.storage)
        self.actions = Actions(
            ClientOptions(
                config.url,
                token=config.token,
                tls_ca=config.tls_ca,
                timeout_s=config.action_timeout_s,
            )
        )
        self.sessions = Sessions(clock=clock)
        self.logins = LoginThrottle(clock=clock)
        self.renderer = Renderer()
        self._runner: web.AppRunner | None = None
        self._reader: asyncio.Task[None] | None = None
        #: ``http://host:port`` once started
        self.address: str | None = None

    def app(self) -> web.Application:
        from osqueue.dashboard import pages

        app = web.Application(middlewares=[_host_check, _errors, _sessions_and_headers])
        app[DASHBOARD] = self
        pages.add_routes(app)
        static = resources.files("osqueue.dashboard") / "static"
        with resources.as_file(static) as static_dir:
            app.router.add_static("/static/", static_dir, name="static")
        return app

    def broker_address(self) -> str | None:
        """The serving broker's address, as the latest read of the document names it."""
        latest = self.source.latest
        owner = latest.doc.broker if latest is not None else None
        return owner.address if owner is not None else None

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


def dashboard_of(request: web.Request) -> Dashboard:
    return request.app[DASHBOARD]


def session_of(request: web.Request) -> Session:
    return request[_SESSION]


def set_session(request: web.Request, session: Session) -> None:
    """Replace this request's session (login, logout); the response carries its cookie."""
    request[_SESSION] = session


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
    request[_SESSION] = session
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
    session = request.get(_SESSION)
    body = board.renderer.page(
        "message.html",
        title="Refused" if status in (401, 403) else "Error",
        message=message,
        status=status,
        login=login,
        **page_context(request, session),
    )
    return web.Response(text=body, status=status, content_type="text/html")


def _here(request: web.Request) -> str:
    """Where a login from this page returns: the page itself, or for a refused POST
    the page its form was on (when the Referer is this dashboard)."""
    if request.method == "GET":
        return request.path_qs
    referer = request.headers.get("Referer", "")
    origin = f"{request.scheme}://{request.host}"
    if referer.startswith(origin + "/"):
        return referer[len(origin) :]
    return "/"


def page_context(request: web.Request, session: Session | None) -> dict[str, object]:
    """What every page's frame needs: the nav, the session's state, its CSRF token."""
    board = dashboard_of(request)
    notices: list[tuple[str, str]] = []
    if session is not None:
        notices, session.notices = session.notices, []
    why_not = board.access.why_not_act(session, board.broker_address())
    return {
        "url": board.config.url,
        "path": request.path,
        "here": _here(request),
        "csrf": session.csrf if session is not None else "",
        "admin": session is not None and session.admin,
        "actions_enabled": board.access.token is not None,
        #: None: this session's action buttons work; else why they do not
        "why_not_act": why_not,
        #: no action can be taken from this dashboard now (buttons shown disabled)
        "read_only": why_not is not None and board.access.token is None,
        "notices": notices,
    }
