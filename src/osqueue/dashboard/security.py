"""Who may look and who may act: sessions, the admin login, CSRF, and the listen rule.

The model, in full:

* **Actions** (retry, purge, cancel) need the admin token: the token the
  dashboard was started with (``--token``/``--token-file``, the broker's
  token, which the dashboard also presents to the broker).  A login form takes
  it; on a match (compared in constant time) the session becomes an admin
  session.  Without a configured token every action is refused, saying how
  to enable them.
* **Sessions** live in this process's memory; the browser holds only a random
  session id in an ``HttpOnly``, ``SameSite=Strict`` cookie (never the token).
  Logging in replaces the session id (no fixation); sessions expire after
  ``ttl_s`` and the oldest go first beyond ``max_sessions``.
* **CSRF**: every session has a random CSRF token, put in every form; a POST
  whose form token does not match its session's is refused before anything
  else is looked at.  SameSite=Strict keeps the cookie off cross-site
  requests as a second wall.
* **Reading** is open when the dashboard listens on a loopback address (or
  with ``--insecure``); on any other address it needs the admin login too, and
  starting there without a token is refused unless ``--insecure``.
"""

from __future__ import annotations

import hmac
import secrets
import time
from collections import OrderedDict
from collections.abc import Callable
from dataclasses import dataclass, field

from osqueue.address import is_loopback, split_host_port
from osqueue.errors import InvalidInput

COOKIE = "osqueue_session"


class Refused(Exception):
    """An action or page this session may not have; ``message`` says why and what to do."""

    def __init__(self, message: str, *, status: int = 403, login: bool = False) -> None:
        super().__init__(message)
        self.message = message
        self.status = status
        #: offer the login form beside the message
        self.login = login


@dataclass(slots=True)
class Session:
    id: str
    csrf: str
    admin: bool
    created_at: float
    #: (kind, text) messages for the next page this session sees
    notices: list[tuple[str, str]] = field(default_factory=list)

    def notify(self, kind: str, text: str) -> None:
        self.notices.append((kind, text))


class Sessions:
    """Sessions by id, in memory, bounded in number and age."""

    def __init__(
        self,
        *,
        max_sessions: int = 10_000,
        ttl_s: float = 12 * 3600.0,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.max_sessions = max_sessions
        self.ttl_s = ttl_s
        self._clock = clock
        self._by_id: OrderedDict[str, Session] = OrderedDict()

    def __len__(self) -> int:
        return len(self._by_id)

    def get(self, session_id: str | None) -> Session | None:
        if not session_id:
            return None
        session = self._by_id.get(session_id)
        if session is None:
            return None
        if self._clock() - session.created_at > self.ttl_s:
            del self._by_id[session_id]
            return None
        return session

    def new(self, *, admin: bool = False) -> Session:
        session = Session(
            id=secrets.token_urlsafe(32),
            csrf=secrets.token_urlsafe(32),
            admin=admin,
            created_at=self._clock(),
        )
        self._by_id[session.id] = session
        while len(self._by_id) > self.max_sessions:
            self._by_id.popitem(last=False)
        return session

    def drop(self, session_id: str) -> None:
        self._by_id.pop(session_id, None)


@dataclass(frozen=True, slots=True)
class Access:
    """What the dashboard allows, fixed at start."""

    #: the admin token (None: actions are disabled)
    token: str | None
    #: reading needs no login
    open_reads: bool

    def token_matches(self, given: str) -> bool:
        if self.token is None or not given:
            return False
        return hmac.compare_digest(given.encode("utf-8"), self.token.encode("utf-8"))

    def check_read(self, session: Session | None) -> None:
        if self.open_reads or (session is not None and session.admin):
            return
        raise Refused(
            "this dashboard listens beyond loopback: log in with the admin token to read it",
            status=401,
            login=True,
        )

    def check_csrf(self, session: Session | None, form_csrf: str | None) -> None:
        """Refuse a form that does not carry this session's CSRF token."""
        if (
            session is None
            or not form_csrf
            or not hmac.compare_digest(form_csrf.encode("utf-8"), session.csrf.encode("utf-8"))
        ):
            raise Refused(
                "refused: the form's CSRF token does not match your session "
                "(reload the page and try again)"
            )

    def check_action(self, session: Session | None, form_csrf: str | None) -> None:
        """Refuse unless the form carries this session's CSRF token and the session is admin."""
        self.check_csrf(session, form_csrf)
        assert session is not None
        if self.token is None:
            raise Refused(
                "refused: actions are disabled because this dashboard was started without "
                "an admin token (start it with --token-file or OSQUEUE_TOKEN)"
            )
        if not session.admin:
            raise Refused("refused: this action needs the admin token; log in first", login=True)


def access_for(listen: str, token: str | None, *, insecure: bool) -> Access:
    """The access rule for a dashboard listening on ``listen``; refuses a
    non-loopback address without a token unless ``insecure``."""
    host, _ = split_host_port(listen)
    loopback = is_loopback(host)
    if not loopback and token is None and not insecure:
        raise InvalidInput(
            f"refusing to listen on {listen} (not a loopback address) without a token: "
            "give one (--token-file or OSQUEUE_TOKEN) or pass --insecure (OSQUEUE_INSECURE)",
            field="listen",
        )
    return Access(token=token, open_reads=loopback or insecure)
