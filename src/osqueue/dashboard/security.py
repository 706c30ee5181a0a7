"""Who may look and who may act: sessions, the admin login, CSRF, and the listen rule.

The model, in full:

* **Actions** (retry, purge, cancel, pause) need the admin token: the token the
  dashboard was started with (``--token``/``--token-file``, the broker's
  token, which the dashboard also presents to the broker).  A login form takes
  it; on a match (compared in constant time) the session becomes an admin
  session.  Without a configured token, actions are allowed only when the
  dashboard listens on loopback and the serving broker's address is on
  loopback too: then whoever reaches the page is already a user of this
  machine, who could run ``osqueue`` against that broker as well, so a login
  would protect nothing (CSRF and the Host check still apply, so another
  site's page cannot act).  Otherwise every action is refused, saying how to
  enable them.
* **Sessions** live in this process's memory; the browser holds only a random
  session id in an ``HttpOnly``, ``SameSite=Strict`` cookie (never the token).
  Only a login stores a session, so no amount of anonymous traffic logs the
  admin out; logging in replaces the session id (no fixation); sessions
  expire after ``ttl_s`` and the oldest login goes first beyond
  ``max_sessions``.
* **Failed logins** are throttled per client address and overall
  (:class:`LoginThrottle`): past a few, 429 with ``Retry-After``, holds doubling.
* **CSRF**: every session has a CSRF token, put in every form (a visitor's is
  its cookie's id signed with a key of this process); a POST whose form token
  does not match its session's is refused before anything else is looked at.
  SameSite=Strict keeps the cookie off cross-site requests as a second wall.
* **Host**: a request must name this dashboard's address (or a configured
  name) in its ``Host`` header (:class:`AllowedHosts`), so a page whose DNS
  name was re-pointed at this machine cannot read it; after the login only a
  path of this site is followed (:func:`safe_next`).
* **Reading** is open when the dashboard listens on a loopback address (or
  with ``--insecure``); on any other address it needs the admin login too, and
  starting there without a token is refused unless ``--insecure``.
"""

from __future__ import annotations

import hashlib
import hmac
import ipaddress
import math
import re
import secrets
import time
from collections import OrderedDict
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from urllib.parse import unquote

from osqueue.address import is_local_address, is_loopback, join_host_port, split_host_port
from osqueue.errors import InvalidInput

COOKIE = "osqueue_session"


class Refused(Exception):
    """An action or page this session may not have; ``message`` says why and what to do."""

    def __init__(
        self,
        message: str,
        *,
        status: int = 403,
        login: bool = False,
        retry_after_s: int | None = None,
    ) -> None:
        super().__init__(message)
        self.message = message
        self.status = status
        #: offer the login form beside the message
        self.login = login
        #: when to ask again (a ``Retry-After`` header), for a throttled request
        self.retry_after_s = retry_after_s


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
    """Logged-in sessions by id, in memory, bounded in number and age.

    Only a successful login stores a session, so anonymous traffic cannot push
    a logged-in session out.  A visitor who has not logged in gets a session
    object that is never stored: its id lives only in the visitor's cookie,
    and its CSRF token is that id signed with a key of this process.
    """

    def __init__(
        self,
        *,
        max_sessions: int = 1_000,
        ttl_s: float = 12 * 3600.0,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.max_sessions = max_sessions
        self.ttl_s = ttl_s
        self._clock = clock
        self._key = secrets.token_bytes(32)
        #: in login order, so the oldest (and the first to expire) come first
        self._by_id: OrderedDict[str, Session] = OrderedDict()

    def __len__(self) -> int:
        return len(self._by_id)

    def get(self, session_id: str | None) -> Session | None:
        """The logged-in session with this id, if it is live."""
        if not session_id:
            return None
        session = self._by_id.get(session_id)
        if session is None:
            return None
        if self._clock() - session.created_at > self.ttl_s:
            del self._by_id[session_id]
            return None
        return session

    def visitor(self, session_id: str | None = None) -> Session:
        """A session that is not logged in, for the id its cookie holds (a fresh
        id when there is none or it is not one of ours); nothing is stored."""
        if session_id is None or not _SESSION_ID.fullmatch(session_id):
            session_id = secrets.token_urlsafe(32)
        csrf = hmac.new(self._key, session_id.encode("ascii"), hashlib.sha256).hexdigest()
        return Session(id=session_id, csrf=csrf, admin=False, created_at=self._clock())

    def login(self) -> Session:
        """A new logged-in session (a new id: no fixation).  Expired ones go first;
        at ``max_sessions`` live ones, the oldest login is logged out."""
        now = self._clock()
        self._make_room(now)
        session = Session(
            id=secrets.token_urlsafe(32),
            csrf=secrets.token_urlsafe(32),
            admin=True,
            created_at=now,
        )
        self._by_id[session.id] = session
        return session

    def keep(self, session: Session) -> None:
        """Store a visitor's session (one that acted with no login, on loopback: the
        notice of its action must reach its next page).  Only a dashboard without
        a token lets a visitor act, and it has no logins to push out."""
        if session.id not in self._by_id:
            self._make_room(self._clock())
            self._by_id[session.id] = session

    def _make_room(self, now: float) -> None:
        """Expired sessions go; at ``max_sessions`` live ones, the oldest too."""
        while self._by_id:
            oldest = next(iter(self._by_id.values()))
            if now - oldest.created_at <= self.ttl_s and len(self._by_id) < self.max_sessions:
                break
            self._by_id.popitem(last=False)

    def drop(self, session_id: str) -> None:
        self._by_id.pop(session_id, None)


#: what :func:`secrets.token_urlsafe` (32 bytes) gives
_SESSION_ID = re.compile(r"[A-Za-z0-9_-]{43}")


@dataclass(frozen=True, slots=True)
class Access:
    """What the dashboard allows, fixed at start."""

    #: the admin token (None: actions are disabled)
    token: str | None
    #: reading needs no login
    open_reads: bool
    #: no token, and the dashboard listens on loopback: every visitor is a user of
    #: this machine, so actions through a broker on loopback need no login (CSRF
    #: still applies)
    local_actions: bool = False

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

    def why_not_act(self, session: Session | None, broker_address: str | None) -> str | None:
        """Why this session may not act now (None: it may).  ``broker_address`` is
        the serving broker's, from the latest read of the document."""
        if self.token is not None:
            if session is not None and session.admin:
                return None
            return "this action needs the admin token; log in first"
        if not self.local_actions:
            return (
                "actions are disabled because this dashboard was started without an admin "
                "token (start it with --token-file or OSQUEUE_TOKEN)"
            )
        if broker_address is None:
            return "no broker is serving this queue, and only a broker changes it"
        if not is_local_address(broker_address):
            return (
                f"the broker ({broker_address}) is not on loopback: actions through it need "
                "the admin token (start the dashboard with --token-file or OSQUEUE_TOKEN)"
            )
        return None

    def check_action(
        self, session: Session | None, form_csrf: str | None, broker_address: str | None = None
    ) -> None:
        """Refuse unless the form carries this session's CSRF token and the session
        may act (:meth:`why_not_act`)."""
        self.check_csrf(session, form_csrf)
        assert session is not None
        why = self.why_not_act(session, broker_address)
        if why is not None:
            raise Refused(f"refused: {why}", login=self.token is not None)


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
    return Access(
        token=token, open_reads=loopback or insecure, local_actions=loopback and token is None
    )


# --------------------------------------------------------------------------- failed logins


@dataclass(frozen=True, slots=True)
class Backoff:
    """How repeated failures are answered: the first ``free`` pass, then each
    further one holds back for ``first_s``, doubling up to ``max_s``; a record
    is forgotten after ``forget_s`` without a failure."""

    free: int
    first_s: float
    max_s: float
    forget_s: float = 900.0

    def hold_s(self, failures: int) -> float:
        if failures <= self.free:
            return 0.0
        return min(self.max_s, self.first_s * 2.0 ** min(failures - self.free - 1, 32))


@dataclass(slots=True)
class _Strikes:
    failures: int = 0
    last_at: float = 0.0
    held_until: float = 0.0

    def strike(self, backoff: Backoff, now: float) -> None:
        if now - self.last_at > backoff.forget_s and now >= self.held_until:
            self.failures = 0
        self.failures += 1
        self.last_at = now
        self.held_until = max(self.held_until, now + backoff.hold_s(self.failures))


class LoginThrottle:
    """Failed logins, per client address and over all clients together.

    While a client (or everyone, after many failures from many addresses) is
    held back, a login is answered 429 with ``Retry-After`` before the token is
    looked at, so guessing goes no faster than the backoff allows.  Refused
    attempts do not extend the hold: the admin can log in once it ends.
    """

    def __init__(
        self,
        *,
        per_client: Backoff = Backoff(free=5, first_s=1.0, max_s=300.0),
        overall: Backoff = Backoff(free=100, first_s=1.0, max_s=60.0),
        max_clients: int = 10_000,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.per_client = per_client
        self.overall = overall
        self.max_clients = max_clients
        self._clock = clock
        #: by last failure, the oldest first (the first dropped past ``max_clients``)
        self._clients: OrderedDict[str, _Strikes] = OrderedDict()
        self._all = _Strikes()

    def check(self, client: str) -> None:
        """Refuse (429) while ``client`` or every client is held back."""
        now = self._clock()
        own = self._clients.get(client)
        until = max(self._all.held_until, own.held_until if own is not None else 0.0)
        if until > now:
            wait_s = math.ceil(until - now)
            raise Refused(
                f"too many failed logins: try again in {wait_s} s",
                status=429,
                retry_after_s=wait_s,
            )

    def failed(self, client: str) -> None:
        now = self._clock()
        strikes = self._clients.pop(client, None) or _Strikes()
        strikes.strike(self.per_client, now)
        self._clients[client] = strikes
        while len(self._clients) > self.max_clients:
            self._clients.popitem(last=False)
        self._all.strike(self.overall, now)

    def succeeded(self, client: str) -> None:
        self._clients.pop(client, None)


# --------------------------------------------------------------------------- Host header

_LOOPBACK_NAMES = frozenset({"localhost", "127.0.0.1", "::1"})
_HOST = re.compile(r"(?:\[([0-9A-Fa-f:.]+)\]|([A-Za-z0-9._-]+))(?::([0-9]{1,5}))?")


def parse_host(text: str, field: str = "Host") -> tuple[str, int | None]:
    """``name``, ``name:port``, ``[v6]`` or ``[v6]:port`` -> (name, port or None),
    the name in lower case without a trailing dot, an IP address in its short form."""
    match = _HOST.fullmatch(text)
    if match is None or (match[3] is not None and int(match[3]) > 65535):
        raise InvalidInput(
            f"{text!r} is not a host name or address with an optional :port "
            "(an IPv6 address in brackets)",
            field=field,
        )
    return _short((match[1] or match[2]).lower().rstrip(".")), (
        None if match[3] is None else int(match[3])
    )


def _short(name: str) -> str:
    """An IP address in its short form (an IPv4 address mapped into IPv6, as a
    dual-stack socket reports it, as IPv4); a name as it is."""
    try:
        ip = ipaddress.ip_address(name)
    except ValueError:
        return name
    if isinstance(ip, ipaddress.IPv6Address) and ip.ipv4_mapped is not None:
        return ip.ipv4_mapped.compressed
    return ip.compressed


class AllowedHosts:
    """Which ``Host`` headers are answered, against DNS rebinding (a page of
    another site whose name now resolves to this machine sends that name).

    A request must name the address it arrived at (for a loopback address, any
    of ``localhost``, ``127.0.0.1`` and ``[::1]`` with that port), or one of the
    configured names (``name`` for any port, ``name:port``; ``*`` for anything,
    behind a proxy that checks ``Host`` itself)."""

    def __init__(self, names: Sequence[str] = ()) -> None:
        self.anything = "*" in names
        self.names = [parse_host(n, "allowed_hosts") for n in names if n != "*"]

    def allows(self, header: str, local: tuple[str, int]) -> bool:
        if self.anything:
            return True
        try:
            name, port = parse_host(header)
        except InvalidInput:
            return False
        port = 80 if port is None else port
        here = _short(local[0].lower())
        own = _LOOPBACK_NAMES | {here} if is_loopback(here) else {here}
        if port == local[1] and name in own:
            return True
        return any(name == n and (p is None or p == port) for n, p in self.names)

    def check(self, header: str | None, local: tuple[str, int] | None) -> None:
        if header is None or local is None or not self.allows(header, local):
            shown = "none" if header is None else repr(header[:200])
            raise Refused(
                f"refused: the Host header ({shown}) does not name this dashboard "
                f"(it answers at {join_host_port(*local) if local else 'its listen address'}); "
                "to serve it under another name, start it with --allowed-host NAME "
                "(OSQUEUE_DASHBOARD_ALLOWED_HOSTS)",
                status=421,
            )


# --------------------------------------------------------------------------- after the login

#: the characters browsers drop anywhere in a URL (tab, LF, CR)
_DROPPED = re.compile(r"[\t\n\r]")
#: a ``next`` as this dashboard writes it: printable ASCII, no space
_PRINTABLE = re.compile(r"[\x21-\x7e]{1,2000}")


def safe_next(target: str | None) -> str:
    """Where a login may return: ``target`` when it is a path of this site, else ``/``.

    A browser drops tabs and newlines, skips leading spaces and controls and
    reads a backslash as ``/`` before it decides whether ``/<TAB>/evil.example``
    is a path or ``//evil.example``, another site.  So ``target`` must be printable
    ASCII without a backslash, and both it and its percent-decoded form (decoded
    until it stops changing, as a chain of decoders might), read the way a
    browser reads them, must begin with exactly one ``/``.
    """
    if target is None or not _PRINTABLE.fullmatch(target) or "\\" in target:
        return "/"
    decoded = target
    for _ in range(4):
        decoded, before = unquote(decoded), decoded
        if decoded == before:
            break
    else:
        return "/"  # still decoding: an encoding nested to fool one decoder
    for form in (target, decoded):
        read = _DROPPED.sub("", form).lstrip("".join(map(chr, range(0x21)))).replace("\\", "/")
        if not read.startswith("/") or read.startswith("//"):
            return "/"
    return target
