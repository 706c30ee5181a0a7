"""A small asyncio TCP proxy that mistreats a connection: brokers to storage, clients to brokers.

Put between the brokers and an HTTP object store (moto's S3, Azurite), or
between clients and a broker's gRPC port, it forwards bytes both ways and,
while ``enabled``, injects the network's faults:

* ``drop``: a response is not forwarded and the connection is closed, after
  the request reached the other side (a write applied or an op committed, the
  answer is lost; the client retries and may get a 412 for its own write, or
  have its push recognised by id);
* ``delay``: a chunk is held back for a while (latency spikes);
* ``reset``: the connection is closed while a request is still being sent.

Each decision comes from one seeded RNG; counts are kept in ``faults``.
"""

from __future__ import annotations

import asyncio
import contextlib
import random
from collections import Counter

#: the longest a ``delay`` fault holds a chunk back
DELAY_MAX_S = 0.8


class FaultyProxy:
    def __init__(
        self,
        upstream_port: int,
        *,
        seed: int = 0,
        drop: float = 0.02,
        delay: float = 0.05,
        reset: float = 0.01,
        delay_max_s: float = DELAY_MAX_S,
    ) -> None:
        self.upstream_port = upstream_port
        self.rng = random.Random(seed)
        self.drop, self.delay, self.reset, self.delay_max_s = drop, delay, reset, delay_max_s
        self.enabled = False
        self.faults: Counter[str] = Counter()
        self.port = 0
        self._server: asyncio.Server | None = None
        self._pipes: set[asyncio.Task[None]] = set()

    async def start(self) -> int:
        self._server = await asyncio.start_server(self._accept, "127.0.0.1", 0)
        self.port = self._server.sockets[0].getsockname()[1]
        return self.port

    async def close(self) -> None:
        if self._server is not None:
            self._server.close()
        for task in list(self._pipes):
            task.cancel()
        for task in list(self._pipes):
            with contextlib.suppress(asyncio.CancelledError, Exception):
                await task
        if self._server is not None:
            await self._server.wait_closed()

    async def _accept(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        try:
            up_reader, up_writer = await asyncio.open_connection("127.0.0.1", self.upstream_port)
        except OSError:
            writer.close()
            return
        closing = asyncio.Event()
        pipes = [
            asyncio.ensure_future(self._pipe(reader, up_writer, closing, upstream=True)),
            asyncio.ensure_future(self._pipe(up_reader, writer, closing, upstream=False)),
        ]
        self._pipes.update(pipes)
        try:
            await closing.wait()
        finally:
            for task in pipes:
                task.cancel()
            for w in (writer, up_writer):
                w.close()
            self._pipes.difference_update(pipes)

    async def _pipe(
        self,
        src: asyncio.StreamReader,
        dst: asyncio.StreamWriter,
        closing: asyncio.Event,
        *,
        upstream: bool,
    ) -> None:
        try:
            while chunk := await src.read(65536):
                if self.enabled:
                    draw = self.rng.random()
                    if upstream and draw < self.reset:
                        self.faults["reset"] += 1
                        return
                    if not upstream and draw < self.drop:
                        self.faults["drop"] += 1
                        return
                    if draw < self.delay + (self.reset if upstream else self.drop):
                        self.faults["delay"] += 1
                        await asyncio.sleep(self.rng.uniform(0.05, self.delay_max_s))
                dst.write(chunk)
                await dst.drain()
        except (ConnectionError, OSError):
            pass
        finally:
            closing.set()
