"""The dashboard's parts and what every request handler needs of them.

:class:`Board` holds the parts (the :class:`~osqueue.inspect.snapshot.SnapshotSource`
reading the document in the background, the history and broker log it feeds, the
archive view, the actions, the sessions and the access rule);
:class:`~osqueue.dashboard.web.Dashboard` serves it, and the handlers of
:mod:`osqueue.dashboard.pages` reach it through :func:`dashboard_of`.
"""

from __future__ import annotations

import math
import time
from collections.abc import Callable
from dataclasses import dataclass, replace

from aiohttp import web

from osqueue.dashboard.actions import Actions
from osqueue.dashboard.render import Renderer
from osqueue.dashboard.security import (
    Access,
    AllowedHosts,
    LoginThrottle,
    Session,
    Sessions,
    access_for,
)
from osqueue.errors import InvalidInput
from osqueue.inspect.archive import ArchiveView
from osqueue.inspect.brokerlog import BrokerLog, CommitMetrics, DocumentMetrics
from osqueue.inspect.history import DocumentHistory, History, QueueRates, SampledHistory
from osqueue.inspect.options import ClientOptions, remote_config
from osqueue.inspect.snapshot import SnapshotSource
from osqueue.storage.port import Storage

DASHBOARD: web.AppKey[Board] = web.AppKey("dashboard")
SESSION: web.RequestKey[Session] = web.RequestKey("osqueue_session", Session)


@dataclass(frozen=True, slots=True)
class DashboardConfig:
    #: the queue (its ``url``) and how the actions reach its broker, as every
    #: command that connects takes them; its token (``token`` or ``token_file``)
    #: is also the admin login's (none: actions only on loopback, see
    #: :mod:`~osqueue.dashboard.security`)
    client: ClientOptions
    listen: str = "127.0.0.1:8080"
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

    @property
    def url(self) -> str:
        return self.client.url

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


class Board:
    """What the dashboard reads from and acts through: the document's reader and
    what it feeds, the archive view, the actions, the sessions, the access rule."""

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
        # The token read once (a token file too) and a malformed fingerprint refused
        # now, not at the first action.
        token = remote_config(config.client).token
        self.access: Access = access_for(config.listen, token, insecure=config.insecure)
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
            replace(config.client, token=token, token_file=None, timeout_s=config.action_timeout_s)
        )
        self.sessions = Sessions(clock=clock)
        self.logins = LoginThrottle(clock=clock)
        self.renderer = Renderer()

    def broker_address(self) -> str | None:
        """The serving broker's address, as the latest read of the document names it."""
        latest = self.source.latest
        owner = latest.doc.broker if latest is not None else None
        return owner.address if owner is not None else None


def dashboard_of(request: web.Request) -> Board:
    return request.app[DASHBOARD]


def session_of(request: web.Request) -> Session:
    return request[SESSION]


def set_session(request: web.Request, session: Session) -> None:
    """Replace this request's session (login, logout); the response carries its cookie."""
    request[SESSION] = session


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
