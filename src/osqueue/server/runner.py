"""A broker served over gRPC: what ``osqueue broker URL`` runs.

Order matters.  The gRPC server binds first (so the port is known when
``listen`` asks for port 0, and so it already listens when the broker writes
its address into the document); until the broker serves, calls are answered
``UNAVAILABLE``.  Then the broker starts: at once, or, as a standby, when the
lease of the active broker runs out.  On SIGTERM/SIGINT the broker drains
(stops taking ops, flushes, clears its address and lease), then the server
stops.

A standby that took over and then lost the queue to another broker stands by
again (a fresh broker watching the new owner's lease by the observer rule);
a broker started without ``standby`` ends with ``NotBroker`` instead.
"""

from __future__ import annotations

import asyncio
import contextlib
import ipaddress
import logging
import signal
import socket
from collections.abc import Callable
from dataclasses import replace
from types import TracebackType
from typing import Any

from osqueue.address import split_host_port
from osqueue.broker import Broker, BrokerConfig, State
from osqueue.broker.inproc.calls import BrokerCalls
from osqueue.clock import Clock
from osqueue.errors import NotBroker, OsqueueError
from osqueue.server.server import RunningServer, ServerConfig, serve
from osqueue.storage.port import Storage

log = logging.getLogger(__name__)


def advertised_address(listen: str, port: int, advertise: str | None) -> str:
    """The ``host:port`` clients should use: ``advertise``, else the bound address.

    A wildcard listen address (``0.0.0.0``, ``[::]``) is not reachable as such;
    the machine's host name is advertised instead.
    """
    if advertise:
        split_host_port(advertise, "advertise")
        return advertise
    host, _ = split_host_port(listen)
    wildcard = host in ("", "*")
    with contextlib.suppress(ValueError):
        wildcard = wildcard or ipaddress.ip_address(host).is_unspecified
    if wildcard:
        host = socket.getfqdn()
        log.warning(
            "listening on a wildcard address; advertising the host name (use --advertise "
            "to choose)",
            extra={"action": "advertise", "host": host},
        )
    if ":" in host:
        host = f"[{host}]"
    return f"{host}:{port}"


class BrokerServer:
    """A :class:`~osqueue.Broker` and the gRPC server in front of it.

    ``server`` says how to listen and whom to serve (address, advertised
    address, tokens, TLS, limits), ``broker`` how the broker runs (lease,
    timeouts); the address the broker writes into the document is filled in
    here.  ``standby=True`` waits for the active broker's lease to run out.
    """

    def __init__(
        self,
        url: str | Storage,
        server: ServerConfig | None = None,
        broker: BrokerConfig | None = None,
        *,
        standby: bool = False,
        clock: Clock | None = None,
    ) -> None:
        #: the queue's storage URL, or a store already opened (tests wrap one)
        self.url = url
        self.standby = standby
        self.clock = clock
        self.server_config = server or ServerConfig()
        self.broker_config = broker or BrokerConfig()
        self.server: RunningServer | None = None
        self.broker: Broker | None = None
        self.address: str | None = None
        self._serving = asyncio.Event()

    @property
    def port(self) -> int:
        if self.server is None:
            raise OsqueueError("the server is not listening yet")
        return self.server.port

    async def listen(self) -> None:
        """Bind the gRPC server (answering UNAVAILABLE) and create the broker."""
        if self.server is not None:
            return
        self.server = await serve(None, self.server_config)
        self.address = advertised_address(
            self.server_config.listen, self.server.port, self.server_config.advertise
        )
        config = replace(self.broker_config, address=self.address)
        self.broker = Broker(self.url, config, clock=self.clock, standby=self.standby)

    async def start(self) -> None:
        """Listen, then start the broker (a standby returns once it took over)."""
        await self.listen()
        assert self.server is not None
        assert self.broker is not None
        try:
            await self.broker.start()
        except BaseException:
            await self.server.stop(0)
            raise
        self.server.attach(BrokerCalls(self.broker))
        self._serving.set()
        log.info(
            "broker serving over gRPC",
            extra={"action": "serve", "address": self.address, "broker": self.broker.id},
        )

    async def wait_serving(self) -> None:
        await self._serving.wait()

    async def wait_closed(self) -> None:
        """Return when the broker stops for any reason (stop, step-down, failure)."""
        assert self.broker is not None
        await self.broker.wait_closed()

    async def stop(self) -> None:
        """Drain the broker (flush, clear its address), then stop the server."""
        try:
            if self.server is not None:  # health probes see the queue go first
                self.server.health.set_queue_serving(False)
            if self.broker is not None:
                await self.broker.stop()
        finally:
            if self.server is not None:
                await self.server.stop(self.server_config.stop_grace_s)

    def lost_lease(self) -> bool:
        """The broker stepped down: another broker took the queue over."""
        broker = self.broker
        return broker is not None and broker.failure is None and broker.state is State.STEPPED_DOWN

    async def stand_by_again(self) -> None:
        """After :meth:`lost_lease`: end the old broker and put a fresh standby in its
        place (the server keeps listening; the old broker's client answers
        ``NotBroker`` with the new owner's address until the standby takes over)."""
        assert self.broker is not None
        if self.server is not None:
            self.server.health.set_queue_serving(False)
        await self.broker.stop()  # ends its side tasks and its metrics endpoint
        self._serving.clear()
        config = replace(self.broker_config, address=self.address)
        self.broker = Broker(self.url, config, clock=self.clock, standby=True)

    def outcome(self) -> OsqueueError | None:
        """Why the broker stopped, if not by :meth:`stop`."""
        broker = self.broker
        if broker is None:
            return None
        if broker.failure is not None:
            return broker.failure
        if broker.state is State.STEPPED_DOWN:
            doc = broker.document
            where = doc.broker.address if doc.broker is not None else None
            return NotBroker(f"another broker took over the queue (at {where})", address=where)
        return None

    async def __aenter__(self) -> BrokerServer:
        await self.start()
        return self

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        await self.stop()


def _install_stop_signals(stop: asyncio.Event) -> list[signal.Signals]:
    loop = asyncio.get_running_loop()
    installed = []
    for sig in (signal.SIGTERM, signal.SIGINT):
        try:
            loop.add_signal_handler(sig, stop.set)
        except (NotImplementedError, RuntimeError, ValueError):
            continue  # not the main thread, or no signals on this platform
        installed.append(sig)
    return installed


async def run_broker(
    url: str,
    server: ServerConfig | None = None,
    broker: BrokerConfig | None = None,
    *,
    standby: bool = False,
    stop: asyncio.Event | None = None,
    on_serving: asyncio.Event | None = None,
    handle_signals: bool = True,
    announce: Callable[[BrokerServer], object] | None = None,
) -> None:
    """Serve the queue at ``url`` until SIGTERM/SIGINT (or ``stop`` is set), then drain.

    ``server``, ``broker`` and ``standby`` are those of :class:`BrokerServer`.

    Returns after a graceful stop; raises the broker's error if it failed, or
    ``NotBroker`` if another broker took the queue over (a ``standby`` stands
    by again instead: :meth:`BrokerServer.stand_by_again`, logged at WARNING
    with ``action=standby``).  ``on_serving`` is set once the broker serves
    (for a standby: once it took over), and then ``announce`` is called with
    the serving :class:`BrokerServer` (its ``address``, its broker's
    ``epoch``), again at every later takeover.  With ``handle_signals=False``
    only ``stop`` stops it (for embedding and tests).
    """
    stop = stop or asyncio.Event()
    runner = BrokerServer(url, server, broker, standby=standby)
    signals = _install_stop_signals(stop) if handle_signals else []
    loop = asyncio.get_running_loop()
    try:
        await runner.listen()
        stopping = asyncio.ensure_future(stop.wait())
        try:
            while await _serve_once(runner, stopping, on_serving, announce):
                if not (standby and runner.lost_lease()):
                    break
                _log_standing_by_again(runner)
                await runner.stand_by_again()
        finally:
            stopping.cancel()
        failure = runner.outcome()
        if failure is not None:
            raise failure
    finally:
        for sig in signals:
            loop.remove_signal_handler(sig)
        await runner.stop()


async def _serve_once(
    runner: BrokerServer,
    stopping: asyncio.Future[Any],
    on_serving: asyncio.Event | None,
    announce: Callable[[BrokerServer], object] | None,
) -> bool:
    """Start the broker (a standby: once it took over) and serve until it closes;
    False if ``stopping`` came first, or came while it served."""
    starting = asyncio.ensure_future(runner.start())
    await asyncio.wait({starting, stopping}, return_when=asyncio.FIRST_COMPLETED)
    if not starting.done():  # stopped while standing by
        starting.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await starting
        return False
    starting.result()
    if on_serving is not None:
        on_serving.set()
    if announce is not None:
        announce(runner)
    closed = asyncio.ensure_future(runner.wait_closed())
    await asyncio.wait({closed, stopping}, return_when=asyncio.FIRST_COMPLETED)
    closed.cancel()
    return not stopping.done()


def _log_standing_by_again(runner: BrokerServer) -> None:
    broker = runner.broker
    assert broker is not None
    owner = broker.document.broker
    log.warning(
        "lost the queue to broker %s at %s (epoch %s); standing by again",
        owner.id if owner is not None else "?",
        owner.address if owner is not None else None,
        owner.epoch if owner is not None else "?",
        extra={
            "action": "standby",
            "broker": broker.id,
            "owner": owner.id if owner is not None else None,
            "epoch": owner.epoch if owner is not None else None,
        },
    )
