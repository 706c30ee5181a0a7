"""The dashboard's listening socket: a bounded number of connections.

aiohttp serves every connection its socket accepts, and the open-files limit
is the only bound on how many.  :class:`BoundedSite` is aiohttp's TCP site
with a cap: past ``max_connections`` a new connection is answered 503 and
closed before aiohttp sees it, so a flood holds at most the cap in open files
and the dashboard keeps the rest for reading the document.

A connection that is slow to send its request head is aiohttp's to end:
its keep-alive timeout (``DashboardConfig.header_timeout_s``) runs from the
moment a connection opens or answered its last request, and closes it if no
complete head arrived by then, however many bytes of one trickled in.
"""

from __future__ import annotations

import asyncio
import logging

from aiohttp import web

from osqueue.address import join_host_port

log = logging.getLogger(__name__)

_BUSY = (
    b"HTTP/1.1 503 Service Unavailable\r\n"
    b"Content-Type: text/plain; charset=utf-8\r\n"
    b"Content-Length: 21\r\n"
    b"Connection: close\r\n\r\n"
    b"too many connections\n"
)


class _Busy(asyncio.Protocol):
    """A connection past the cap: told so and closed, never read."""

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        assert isinstance(transport, asyncio.Transport)
        transport.write(_BUSY)
        transport.close()


class BoundedSite(web.BaseSite):
    """Serve ``runner`` on ``host:port`` (port 0: any free one), at most
    ``max_connections`` connections at once."""

    def __init__(
        self, runner: web.AppRunner, host: str, port: int, *, max_connections: int
    ) -> None:
        super().__init__(runner)
        self._host = host
        self._port = port
        self._max_connections = max_connections
        #: refusing connections since the last one admitted (logged once)
        self._full = False

    @property
    def name(self) -> str:
        return f"http://{join_host_port(self._host, self._port)}"

    async def start(self) -> None:
        await super().start()
        server = self._runner.server
        assert server is not None

        def admit() -> asyncio.BaseProtocol:
            if len(server.connections) < self._max_connections:
                self._full = False
                return server()
            if not self._full:
                log.warning(
                    "dashboard at its %s connections: refusing more",
                    self._max_connections,
                    extra={"action": "dashboard_full", "max_connections": self._max_connections},
                )
            self._full = True
            return _Busy()

        loop = asyncio.get_running_loop()
        self._server = await loop.create_server(
            admit, self._host, self._port, backlog=self._backlog
        )
