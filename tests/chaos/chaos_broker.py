"""A broker process for the chaos tests (run as a script): ``osqueue broker`` plus two test hooks.

    python tests/chaos/chaos_broker.py URL LOG --listen H:P --advertise H:P
        [--standby] [--lease-s S] [--heartbeat-timeout-s S] [--payload-sweep-s S]

It serves exactly what ``osqueue broker`` serves (a :class:`BrokerServer`:
the gRPC server, then the broker) and prints the same lines on stderr
(``standing by for URL``, ``serving URL at ADDRESS (epoch N)``).  Two things
differ, both for the checker and both test-only:

* **Recording.**  Its storage is wrapped so that every read of the queue
  document and every write attempt (before it is sent) and its outcome are
  appended to LOG as JSON lines (with the time, true and as this broker's
  clock has it): version, epoch, broker id, lease, a hash of the
  bytes (SHA-256, and the MD5 S3 uses as ETag), the ETag it was read or
  written with, the ``if_match`` it was sent with.  From the logs of all
  brokers the checker rebuilds the stored version chain (I5).  Lines are
  flushed, not fsynced: a SIGKILL loses nothing the kernel has.
* **A skewed clock.**  ``OSQUEUE_CLOCK_SKEW_S`` (seconds, default 0) shifts the
  broker's wall clock (the one it stamps leases and heartbeats with);
  ``SIGUSR1`` steps it forward and ``SIGUSR2`` back by ``OSQUEUE_CLOCK_STEP_S``
  (default 6).  Its monotonic clock never steps, and that is the one leases
  are judged by (docs/failover.md): a stepped standby logs the live lease as
  suspect and leaves it alone.  Production brokers read the system clock;
  only this script honours these variables.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import hashlib
import json
import os
import signal
import sys
import time
from collections.abc import Callable
from typing import IO, Any

from osqueue import runtime
from osqueue.broker import BrokerConfig
from osqueue.clock import SystemClock
from osqueue.errors import OsqueueError
from osqueue.server.runner import BrokerServer
from osqueue.server.server import ServerConfig
from osqueue.state import DOCUMENT_KEY
from osqueue.state.codec import decode_owner
from osqueue.storage import from_url
from osqueue.storage.port import Blob, Capabilities, Storage

SKEW_VARIABLE = "OSQUEUE_CLOCK_SKEW_S"
STEP_VARIABLE = "OSQUEUE_CLOCK_STEP_S"


class SkewedClock(SystemClock):
    """The system clock shifted by ``skew_s`` (wall time only; monotonic time is true)."""

    def __init__(self, skew_s: float) -> None:
        self.skew_s = skew_s

    def now(self) -> float:
        return time.time() + self.skew_s

    def step(self, seconds: float) -> None:
        self.skew_s += seconds


class RecordingStorage:
    """Pass every call through; log the queue document's reads and writes."""

    def __init__(self, inner: Storage, log: IO[str], clock: SkewedClock) -> None:
        self.inner = inner
        self._log = log
        self._clock = clock

    def _write_line(self, event: str, data: bytes | None, **fields: Any) -> None:
        if data is not None:
            try:
                version, owner = decode_owner(data)
            except OsqueueError:
                version, owner = -1, None
            fields.update(
                version=version,
                epoch=owner.epoch if owner else 0,
                broker=owner.id if owner else None,
                address=owner.address if owner else None,
                lease_until=owner.lease_until.timestamp() if owner else None,
                sha=hashlib.sha256(data).hexdigest()[:20],
                md5=hashlib.md5(data, usedforsecurity=False).hexdigest(),
            )
        line = json.dumps({"ev": event, "t": time.time(), "skew_s": self._clock.skew_s, **fields})
        self._log.write(line + "\n")
        self._log.flush()

    @property
    def url(self) -> str:
        return self.inner.url

    @property
    def capabilities(self) -> Capabilities:
        return self.inner.capabilities

    async def read(self, key: str) -> Blob:
        blob = await self.inner.read(key)
        if key == DOCUMENT_KEY:
            self._write_line("doc-read", blob.data, etag=blob.etag)
        return blob

    async def write(self, key: str, data: bytes, *, if_match: str | None) -> str:
        if key != DOCUMENT_KEY:
            return await self.inner.write(key, data, if_match=if_match)
        self._write_line("doc-write", data, if_match=if_match)
        try:
            etag = await self.inner.write(key, data, if_match=if_match)
        except OsqueueError as exc:
            self._write_line("doc-write-failed", data, error=type(exc).__name__)
            raise
        self._write_line("doc-wrote", data, etag=etag)
        return etag

    async def put(self, key: str, data: bytes) -> None:
        await self.inner.put(key, data)

    async def get(self, key: str) -> bytes:
        return await self.inner.get(key)

    async def delete(self, key: str) -> None:
        await self.inner.delete(key)

    async def list(self, prefix: str = "") -> list[str]:
        return await self.inner.list(prefix)

    async def close(self) -> None:
        await self.inner.close()


def _say(text: str) -> None:
    sys.stderr.write(text + "\n")
    sys.stderr.flush()


def _install_signals(clock: SkewedClock, stop: asyncio.Event) -> None:
    loop = asyncio.get_running_loop()
    step_s = float(os.environ.get(STEP_VARIABLE, "6"))

    def stepper(seconds: float) -> Callable[[], None]:
        def step() -> None:
            clock.step(seconds)
            _say(f"clock stepped by {seconds:+g} s (skew now {clock.skew_s:+g} s)")

        return step

    loop.add_signal_handler(signal.SIGTERM, stop.set)
    loop.add_signal_handler(signal.SIGUSR1, stepper(step_s))
    loop.add_signal_handler(signal.SIGUSR2, stepper(-step_s))


def _open_log(path: str) -> IO[str]:
    return open(path, "a", buffering=1)  # kept open for the process's lifetime


async def run(args: argparse.Namespace) -> int:
    clock = SkewedClock(float(os.environ.get(SKEW_VARIABLE, "0")))
    stop = asyncio.Event()
    _install_signals(clock, stop)
    storage = RecordingStorage(from_url(args.url), _open_log(args.log), clock)
    config = BrokerConfig(
        lease_s=args.lease_s,
        heartbeat_timeout_s=args.heartbeat_timeout_s,
        payload_sweep_interval_s=args.payload_sweep_s,
        backoff_base_s=0.2,
        backoff_cap_s=2.0,
        stats_log_interval_s=None,
    )
    server = BrokerServer(
        storage,
        ServerConfig(listen=args.listen, advertise=args.advertise),
        config,
        standby=args.standby,
        clock=clock,
    )
    await server.listen()
    if args.standby:
        _say(f"standing by for {args.url}")
    starting = asyncio.ensure_future(server.start())
    stopping = asyncio.ensure_future(stop.wait())
    await asyncio.wait({starting, stopping}, return_when=asyncio.FIRST_COMPLETED)
    if not starting.done():
        starting.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await starting
        await server.stop()
        return 0
    starting.result()
    assert server.broker is not None
    _say(f"serving {args.url} at {server.address} (epoch {server.broker.epoch})")
    closed = asyncio.ensure_future(server.wait_closed())
    await asyncio.wait({closed, stopping}, return_when=asyncio.FIRST_COMPLETED)
    outcome = server.outcome()
    await server.stop()
    if outcome is not None:
        _say(f"broker stopped: {type(outcome).__name__}: {outcome}")
        return 3
    _say("broker stopped")
    return 0


def main(argv: list[str]) -> None:
    parser = argparse.ArgumentParser(prog="chaos_broker.py")
    parser.add_argument("url")
    parser.add_argument("log")
    parser.add_argument("--listen", required=True)
    parser.add_argument("--advertise", required=True)
    parser.add_argument("--standby", action="store_true")
    parser.add_argument("--lease-s", type=float, default=2.0)
    parser.add_argument("--heartbeat-timeout-s", type=float, default=3.0)
    parser.add_argument("--payload-sweep-s", type=float, default=1.5)
    args = parser.parse_args(argv)
    runtime.tune_gc()
    sys.exit(runtime.run(run(args)))


if __name__ == "__main__":
    main(sys.argv[1:])
