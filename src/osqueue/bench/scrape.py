"""A Prometheus stand-in for the benchmark: scrape ``/metrics`` every interval."""

from __future__ import annotations

import asyncio
import contextlib

from osqueue.address import split_host_port

#: How often the benchmark scrapes (Prometheus' default is 15 s: this is harsher).
SCRAPE_INTERVAL_S = 1.0


class Scraper:
    """Fetches ``http://address/metrics`` every ``interval_s`` until cancelled, as
    Prometheus would, so that a run with metrics pays for its scrapes too.
    :attr:`scrapes` counts the answers read to the end."""

    def __init__(self, address: str, interval_s: float = SCRAPE_INTERVAL_S) -> None:
        self._host, self._port = split_host_port(address, "metrics_address")
        self._interval_s = interval_s
        self.scrapes = 0

    async def run(self) -> None:
        while True:
            await asyncio.sleep(self._interval_s)
            await self.scrape()

    async def scrape(self) -> bytes:
        """One scrape: the answer, headers and body."""
        reader, writer = await asyncio.open_connection(self._host, self._port)
        try:
            writer.write(b"GET /metrics HTTP/1.1\r\nHost: bench\r\n\r\n")
            await writer.drain()
            answer = await reader.read()  # the endpoint closes after one answer
        finally:
            writer.close()
            with contextlib.suppress(ConnectionError):
                await writer.wait_closed()
        self.scrapes += 1
        return answer
