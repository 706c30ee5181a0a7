"""The client's one connection to the broker: where it goes, how it opens, when it goes.

The address comes from the queue document (:class:`~osqueue.client.discovery.Discovery`),
or once from ``RemoteConfig.address`` or an address a stepping-down broker
named.  Before a channel opens to an address, :class:`~.trust.Trust` decides
whether it may carry the token and how (TLS, the pinned certificate, or
plaintext to loopback).  A connection is a gRPC channel with keepalive
pings; a dropped one is closed in the background, its calls given
``rpc_timeout_s`` to finish.  How long to keep looking for an address is not
decided here: :meth:`Connection.ensure` asks its caller
(:class:`~osqueue.client.remote.failover.Failover`) to wait between looks.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import Any, cast

import grpc

from osqueue.client.discovery import Discovery
from osqueue.client.remote.config import RemoteConfig
from osqueue.client.remote.trust import Trust
from osqueue.clock import Clock
from osqueue.errors import BrokerUnavailable, OsqueueError, StorageError
from osqueue.storage.port import Storage
from osqueue.wire._pb import queue_pb2_grpc as pb_grpc

log = logging.getLogger(__name__)

#: Waits before look number ``tries + 1`` for an address; raises to give up.
WaitForAddress = Callable[[int, OsqueueError], Awaitable[None]]


@dataclass(slots=True)
class Conn:
    """One open channel to the broker at ``address``."""

    address: str
    channel: Any  # grpc.aio.Channel
    stub: pb_grpc.QueueAsyncStub
    opened_at: float


def channel_options(config: RemoteConfig) -> list[tuple[str, int | str]]:
    options: list[tuple[str, int | str]] = [
        ("grpc.max_receive_message_length", config.max_message_bytes),
        ("grpc.max_send_message_length", config.max_message_bytes),
        # Reconnect quickly: a restarted or new broker is back within a second.
        ("grpc.initial_reconnect_backoff_ms", 100),
        ("grpc.min_reconnect_backoff_ms", 100),
        ("grpc.max_reconnect_backoff_ms", 1000),
        # While a call is open, ping the broker: a paused or partitioned broker
        # (no answer within the timeout) fails the call, which then fails over,
        # instead of a long poll waiting out its whole wait.
        ("grpc.keepalive_time_ms", round(config.keepalive_s * 1000)),
        ("grpc.keepalive_timeout_ms", round(config.keepalive_s * 1000)),
        # gRPC core waits this long for a ping's answer (keepalive_timeout_ms
        # alone does not end the transport in current releases).
        ("grpc.http2.ping_timeout_ms", round(config.keepalive_s * 1000)),
        ("grpc.keepalive_permit_without_calls", 0),
        ("grpc.http2.max_pings_without_data", 0),
    ]
    if config.tls_server_name:
        options.append(("grpc.ssl_target_name_override", config.tls_server_name))
    return options


_NO_ADDRESS = (
    "the queue document names no broker address (no broker running, "
    "a broker stopping, or an embedded broker in another process)"
)


class Connection:
    """At most one open channel to the broker, opened to the address discovery gives."""

    def __init__(self, storage: Storage, config: RemoteConfig, clock: Clock) -> None:
        self.config = config
        self.discovery = Discovery(storage)
        self._clock = clock
        self._options = channel_options(config)
        self.trust = Trust(config)
        #: The channel in use (None before the first and after a drop).
        self.current: Conn | None = None
        self._next_address: str | None = config.address
        self._lock = asyncio.Lock()
        self._closing_channels: set[asyncio.Task[None]] = set()
        #: Set by :meth:`close`: no call may start any more.
        self.closed = False
        #: Connections opened (the first one included), for tests and monitoring.
        self.connects = 0

    @property
    def address(self) -> str | None:
        """The broker address in use (None when not connected)."""
        return self.current.address if self.current is not None else None

    async def open_trusted(self, address: str) -> Conn:
        """Open a channel to ``address`` once :class:`~.trust.Trust` lets it carry the token."""
        return self.open(address, await self.trust.credentials_for(address))

    def open(self, address: str, credentials: Any = None) -> Conn:
        """Open a channel to ``address``: TLS with ``credentials``, else plaintext."""
        if credentials is not None:
            channel = grpc.aio.secure_channel(address, credentials, options=self._options)
        else:
            channel = grpc.aio.insecure_channel(address, options=self._options)
        stub = cast("pb_grpc.QueueAsyncStub", pb_grpc.QueueStub(channel))
        self.current = Conn(address, channel, stub, self._clock.monotonic())
        self.connects += 1
        log.info("connected to broker", extra={"action": "connect", "address": address})
        return self.current

    def _retire(self, conn: Conn, grace_s: float | None) -> None:
        """Close ``conn``'s channel in the background, letting its calls finish for ``grace_s``."""
        task = asyncio.get_running_loop().create_task(conn.channel.close(grace_s))
        self._closing_channels.add(task)
        task.add_done_callback(self._closing_channels.discard)

    def drop(self, conn: Conn, next_address: str | None = None) -> None:
        """Stop using ``conn`` (unless someone already moved on from it); the next
        connection goes to ``next_address`` if given, else where discovery says."""
        if self.current is not conn:
            return
        self.current = None
        self._next_address = next_address
        self._retire(conn, grace_s=self.config.rpc_timeout_s)

    async def find_address(self) -> str | None:
        """The address to connect to next: the one given, else the document's (or None)."""
        if self._next_address is not None:
            address, self._next_address = self._next_address, None
            return address
        location = await self.discovery.locate()
        if location is None:
            return None
        return location.address

    async def connect_now(self) -> None:
        """Open the connection now if the document names a broker (never waits).

        A storage error reading the document, or a pinned certificate that
        cannot be fetched yet, is not fatal here: the first call looks again,
        with backoff, until its deadline (a passing network fault must not kill
        a producer that is just starting).  A broker that may not have the
        token raises :class:`~osqueue.errors.UntrustedBroker` at once.
        """
        async with self._lock:
            if self.current is None:
                try:
                    address = await self.find_address()
                    if address is not None:
                        await self.open_trusted(address)
                except (StorageError, BrokerUnavailable) as exc:
                    log.warning(
                        "not connected yet; the first call will look again: %s",
                        exc,
                        extra={"action": "discover"},
                    )

    async def ensure(self, wait: WaitForAddress) -> Conn:
        """The open connection, or a new one once an address is found.

        Callers arriving together share one search (they queue on a lock);
        between looks ``wait(tries, why)`` is awaited, and it raises to give up.
        """
        conn = self.current
        if conn is not None:
            return conn
        async with self._lock:
            tries = 0
            while self.current is None:
                why: OsqueueError
                try:
                    address = await self.find_address()
                except StorageError as exc:
                    address, why = None, exc
                else:
                    why = BrokerUnavailable(_NO_ADDRESS)
                if address is not None:
                    try:
                        return await self.open_trusted(address)
                    except BrokerUnavailable as exc:  # its pinned certificate, unreachable
                        why = exc
                await wait(tries, why)
                tries += 1
            return self.current

    async def close(self) -> None:
        """Close the channel at once and wait for every closing channel (idempotent)."""
        self.closed = True
        if self.current is not None:
            self._retire(self.current, grace_s=None)
            self.current = None
        if self._closing_channels:
            await asyncio.gather(*self._closing_channels, return_exceptions=True)
