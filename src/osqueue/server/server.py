"""Run the gRPC service: listen, TLS, auth, limits.

``await serve(calls, ServerConfig(listen="127.0.0.1:0"))`` starts a ``grpc.aio`` server for a
broker's :class:`~osqueue.broker.inproc.calls.BrokerCalls` and returns a :class:`RunningServer` that
knows the port it bound. A server on a non-loopback address refuses to start without a token
unless ``insecure=True``, and warns loudly when it takes a token over plaintext there (tokens
then cross the network in the clear).
Tokens come in three access levels (:mod:`osqueue.server.auth`).

Beside ``osqueue.v1.Queue`` the server answers the standard gRPC health
service (see :mod:`osqueue.server.health`).

Connections are bounded in number (``Limits.max_connections``, and never
more than the open-files limit leaves beside ``fd_reserve``: a flood of idle
connections must not take the files the broker renews its lease with), in
handshake time, idle time and (optionally) age.  gRPC core enforces them: a
connection past the cap is closed as it arrives.
"""

from __future__ import annotations

import errno
import logging
import socket
from dataclasses import dataclass, field
from pathlib import Path
from types import TracebackType
from typing import Any

import grpc

from osqueue import runtime
from osqueue.address import is_loopback as is_loopback  # their home; kept here too
from osqueue.address import split_host_port as split_host_port
from osqueue.broker.inproc.calls import BrokerCalls
from osqueue.errors import InvalidInput, OsqueueError
from osqueue.server.auth import BearerTokenInterceptor, Tokens
from osqueue.server.health import HealthService, add_health
from osqueue.server.limits import Limits
from osqueue.server.service import QueueService
from osqueue.wire.tls import fingerprint_of_pem

log = logging.getLogger(__name__)


@dataclass(frozen=True, slots=True)
class ServerConfig:
    """How the gRPC server listens and whom it serves."""

    #: ``host:port``; port 0 picks a free port (see :attr:`RunningServer.port`).
    listen: str = "127.0.0.1:7070"
    #: ``host:port`` a broker writes into the queue document for clients
    #: (default: the bound address; see :func:`osqueue.server.runner.advertised_address`).
    advertise: str | None = None
    #: The admin token: may make every call (or ``token_file``, not both).
    token: str | None = None
    token_file: str | None = None
    #: A token for producers and workers: every call but cancel, retry and purge
    #: of dead letters (needs ``token`` too).
    write_token: str | None = None
    write_token_file: str | None = None
    #: A read-only token: ``Stats`` only (needs ``token`` too).
    read_token: str | None = None
    read_token_file: str | None = None
    #: PEM certificate chain and private key files; TLS when both are given.
    tls_cert: str | None = None
    tls_key: str | None = None
    #: Allow a non-loopback address without a token.
    insecure: bool = False
    limits: Limits = field(default_factory=Limits)
    #: How long calls in flight may finish when the server stops.
    stop_grace_s: float = 5.0
    #: Open files kept out of the connections' reach (storage, metrics, the
    #: process's own): connections are capped at the open-files limit less this.
    fd_reserve: int = runtime.FD_RESERVE

    def __post_init__(self) -> None:
        if type(self.fd_reserve) is not int or self.fd_reserve < 0:
            raise InvalidInput(
                f"must be a whole number >= 0, got {self.fd_reserve!r}", field="fd_reserve"
            )

    def tokens(self) -> Tokens | None:
        """The tokens this server accepts (files read now); None: no token at all."""
        return Tokens.resolve(
            self.token,
            self.token_file,
            write=(self.write_token, self.write_token_file),
            read=(self.read_token, self.read_token_file),
        )


def _read_pem(path: str, field: str) -> bytes:
    try:
        return Path(path).read_bytes()
    except OSError as exc:
        raise InvalidInput(f"cannot read {path!r}: {exc}", field=field) from exc


def _credentials(config: ServerConfig) -> tuple[Any, str] | None:
    """The server's TLS credentials and its certificate's fingerprint (None: plaintext)."""
    if (config.tls_cert is None) != (config.tls_key is None):
        missing = "tls_key" if config.tls_key is None else "tls_cert"
        raise InvalidInput("TLS needs both a certificate and a key", field=missing)
    if config.tls_cert is None or config.tls_key is None:
        return None
    cert = _read_pem(config.tls_cert, "tls_cert")
    key = _read_pem(config.tls_key, "tls_key")
    return grpc.ssl_server_credentials([(key, cert)]), fingerprint_of_pem(cert)


def _check_exposure(config: ServerConfig, host: str, tokens: Tokens | None, tls: bool) -> None:
    """Refuse a non-loopback listen without a token; warn when a token goes in plaintext."""
    if is_loopback(host):
        return
    if tokens is None and not config.insecure:
        raise InvalidInput(
            f"refusing to listen on {config.listen} (not a loopback address) without a token: "
            "give a token (--token-file or OSQUEUE_TOKEN) or pass insecure=True (--insecure)",
            field="token",
        )
    if tokens is not None and not tls:
        log.warning(
            "SERVING BEARER TOKENS OVER PLAINTEXT on %s (not a loopback address): anyone on "
            "the network path can read the tokens clients send; give the server a certificate "
            "(--tls-cert/--tls-key) and clients --tls-ca or --tls-fingerprint",
            config.listen,
            extra={"action": "plaintext_tokens", "listen": config.listen},
        )


def _ms(seconds: float) -> int:
    return max(1, round(seconds * 1000))


def server_options(limits: Limits, max_connections: int) -> list[tuple[str, int]]:
    """gRPC core's options for ``limits``; ``max_connections``: the cap in force
    (``limits.max_connections`` or fewer, see :func:`osqueue.runtime.connection_cap`)."""
    options = [
        ("grpc.max_receive_message_length", limits.max_message_bytes),
        ("grpc.max_send_message_length", limits.max_message_bytes),
        ("grpc.max_concurrent_streams", limits.max_concurrent_streams),
        # Past the cap a new connection is closed as it is accepted.
        ("grpc.max_allowed_incoming_connections", max_connections),
        ("grpc.server_handshake_timeout_ms", _ms(limits.handshake_timeout_s)),
        # Two brokers must never share a port by accident.
        ("grpc.so_reuseport", 0),
        # Notice dead clients (and their parked long polls), also on a
        # connection without calls: keep pinging it however long it stays quiet.
        ("grpc.keepalive_time_ms", 30_000),
        ("grpc.keepalive_timeout_ms", 10_000),
        # What ends a connection whose ping goes unanswered (keepalive_timeout_ms
        # alone does not in current releases).
        ("grpc.http2.ping_timeout_ms", 10_000),
        ("grpc.keepalive_permit_without_calls", 1),
        ("grpc.http2.max_pings_without_data", 0),
        # Clients ping every few seconds while a call waits (to notice a paused
        # broker); accept that instead of answering GOAWAY "too many pings".
        ("grpc.http2.min_recv_ping_interval_without_data_ms", 1_000),
        ("grpc.http2.max_ping_strikes", 0),
    ]
    if limits.max_connection_idle_s is not None:
        options.append(("grpc.max_connection_idle_ms", _ms(limits.max_connection_idle_s)))
    if limits.max_connection_age_s is not None:
        options.append(("grpc.max_connection_age_ms", _ms(limits.max_connection_age_s)))
        # A long poll in flight finishes before the connection goes.
        options.append(("grpc.max_connection_age_grace_ms", _ms(limits.max_wait_s + 30.0)))
    return options


class RunningServer:
    """A started server; stop it with :meth:`stop` or ``async with``."""

    def __init__(
        self,
        server: Any,
        service: QueueService,
        host: str,
        port: int,
        grace_s: float,
        health: HealthService,
        *,
        tls_fingerprint: str | None = None,
    ) -> None:
        self.service = service
        self.health = health
        self.host = host
        self.port = port
        #: SHA-256 of the server's certificate (what clients pin), None without TLS.
        self.tls_fingerprint = tls_fingerprint
        self._server = server
        self._grace_s = grace_s
        self._stopped = False

    @property
    def address(self) -> str:
        """The bound ``host:port`` (IPv6 hosts in brackets)."""
        host = f"[{self.host}]" if ":" in self.host else self.host
        return f"{host}:{self.port}"

    def attach(self, calls: BrokerCalls) -> None:
        """Serve ``calls`` from now on (health: ``osqueue.v1.Queue`` is ``SERVING``)."""
        self.service.attach(calls)
        self.health.set_queue_serving(True)

    async def stop(self, grace_s: float | None = None) -> None:
        """Refuse new calls, let calls in flight finish for ``grace_s``, then cancel them."""
        if self._stopped:
            return
        self._stopped = True
        self.health.close()
        await self._server.stop(self._grace_s if grace_s is None else grace_s)

    async def wait_for_termination(self) -> None:
        await self._server.wait_for_termination()

    async def __aenter__(self) -> RunningServer:
        return self

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        await self.stop()


def _check_free(listen: str) -> None:
    """Refuse an address another process listens on, in one line, before gRPC core
    tries it (and logs its own line about it)."""
    host, port = split_host_port(listen)
    if not port:
        return
    try:
        family, kind, proto, _, address = socket.getaddrinfo(
            host or None, port, type=socket.SOCK_STREAM, flags=socket.AI_PASSIVE
        )[0]
    except OSError:
        return  # gRPC says what is wrong with the address
    with socket.socket(family, kind, proto) as probe:
        probe.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            probe.bind(address)
        except OSError as exc:
            if exc.errno == errno.EADDRINUSE:
                raise OsqueueError(
                    f"cannot listen on {listen}: the address is in use (another process"
                    " listens there; a port of 0 takes any free one)"
                ) from None


async def serve(calls: BrokerCalls | None, config: ServerConfig | None = None) -> RunningServer:
    """Serve a broker's ``calls`` over gRPC; return once the server listens.

    With ``calls=None`` every call is answered ``UNAVAILABLE`` until a broker
    is attached with ``running.attach(calls)``.
    """
    config = config or ServerConfig()
    host, _ = split_host_port(config.listen)
    tokens = config.tokens()
    tls = _credentials(config)
    credentials, fingerprint = tls if tls is not None else (None, None)
    _check_exposure(config, host, tokens, tls is not None)
    service = QueueService(calls, config.limits)
    interceptors = [BearerTokenInterceptor(tokens)] if tokens is not None else []
    max_connections = runtime.connection_cap(
        config.limits.max_connections, config.fd_reserve, listener="gRPC"
    )
    server = grpc.aio.server(
        interceptors=interceptors, options=server_options(config.limits, max_connections)
    )
    server.add_generic_rpc_handlers((service.rpc_handler(),))
    health = add_health(server, queue_serving=calls is not None)
    _check_free(config.listen)
    try:
        if credentials is None:
            port = server.add_insecure_port(config.listen)
        else:
            port = server.add_secure_port(config.listen, credentials)
    except RuntimeError as exc:
        raise OsqueueError(f"cannot listen on {config.listen}: {exc}") from exc
    if not port:
        raise OsqueueError(f"cannot listen on {config.listen} (address in use?)")
    await server.start()
    log.info(
        "gRPC server listening on %s:%s (%s)",
        host,
        port,
        f"TLS, certificate SHA-256 {fingerprint}" if fingerprint else "plaintext",
        extra={
            "action": "listen",
            "address": f"{host}:{port}",
            "tls": credentials is not None,
            "tls_fingerprint": fingerprint,
            "max_connections": max_connections,
            "auth": [name for name, t in tokens.by_name() if t is not None] if tokens else [],
        },
    )
    return RunningServer(
        server, service, host, port, config.stop_grace_s, health, tls_fingerprint=fingerprint
    )
