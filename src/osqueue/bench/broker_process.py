"""``osqueue broker URL`` in a child process, for benchmarks that need real processes.

The child is the ``osqueue`` command itself (``python -m osqueue.cli broker``),
so what is measured is what an operator runs.  It announces on stderr
``serving URL at HOST:PORT (epoch N)`` once it serves (a standby first says
``standing by for URL``); :class:`BrokerProcess` reads those lines, keeps the
last few for error messages, and stops the child with SIGTERM (a drain) or
SIGKILL.  ``OSQUEUE_*`` variables of this process are not passed on: the
benchmark alone decides how its broker runs.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import re
import signal
import sys
import time
from collections import deque
from collections.abc import Sequence
from types import TracebackType

from osqueue.errors import BrokerUnavailable

log = logging.getLogger(__name__)

#: How long a broker may take to start serving (a cold interpreter imports grpc).
READY_TIMEOUT_S = 60.0
#: How long a SIGTERMed broker may take to drain before it is killed.
STOP_TIMEOUT_S = 30.0
#: Lines of the child's stderr kept for error messages.
TAIL_LINES = 20

_SERVING = re.compile(r"^serving (?P<url>\S+) at (?P<address>\S+) \(epoch (?P<epoch>\d+)\)")
_STANDING_BY = re.compile(r"^standing by for ")
_ANSI = re.compile(r"\x1b\[[0-9;]*[A-Za-z]")


def child_environment() -> dict[str, str]:
    """This process's environment without ``OSQUEUE_*`` (flags decide) and without colour."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("OSQUEUE_")}
    env.pop("FORCE_COLOR", None)
    env["NO_COLOR"] = "1"
    env["PYTHONUNBUFFERED"] = "1"
    return env


class BrokerProcess:
    """One ``osqueue broker`` child process.

    ``await start()`` returns once the child serves (``standby=True``: once it
    stands by; :attr:`serving` is set when it later takes over).  ``address``
    and ``epoch`` come from its ``serving`` line; ``serving_at`` is the
    ``time.monotonic()`` at which this process read that line.  Use it as an
    async context manager so the child never outlives the benchmark.
    """

    def __init__(
        self,
        url: str,
        *,
        listen: str = "127.0.0.1:0",
        standby: bool = False,
        lease_s: float | None = None,
        extra_args: Sequence[str] = (),
    ) -> None:
        self.url = url
        self.standby = standby
        args = ["broker", url, "--listen", listen]
        if standby:
            args.append("--standby")
        if lease_s is not None:
            args += ["--lease-s", repr(float(lease_s))]
        self.args: list[str] = [*args, *extra_args]
        self.address: str | None = None
        self.epoch: int | None = None
        self.serving_at: float | None = None
        self.serving = asyncio.Event()
        self.standing_by = asyncio.Event()
        self.tail: deque[str] = deque(maxlen=TAIL_LINES)
        self._proc: asyncio.subprocess.Process | None = None
        self._reader: asyncio.Task[None] | None = None

    @property
    def pid(self) -> int | None:
        return self._proc.pid if self._proc is not None else None

    @property
    def returncode(self) -> int | None:
        return self._proc.returncode if self._proc is not None else None

    async def start(self, ready_timeout_s: float = READY_TIMEOUT_S) -> None:
        """Spawn the child and wait until it serves (or stands by); BrokerUnavailable if not."""
        if self._proc is not None:
            return
        self._proc = await asyncio.create_subprocess_exec(
            sys.executable,
            "-m",
            "osqueue.cli",
            *self.args,
            stdin=asyncio.subprocess.DEVNULL,
            stdout=asyncio.subprocess.DEVNULL,
            stderr=asyncio.subprocess.PIPE,
            env=child_environment(),
        )
        self._reader = asyncio.create_task(self._read_stderr(), name=f"broker-{self._proc.pid}")
        ready = self.standing_by if self.standby else self.serving
        waiter = asyncio.create_task(ready.wait())
        try:
            done, _ = await asyncio.wait(
                {waiter, self._reader}, timeout=ready_timeout_s, return_when=asyncio.FIRST_COMPLETED
            )
        finally:
            waiter.cancel()
        if ready.is_set():
            return
        if self._reader in done:  # stderr closed: the child exited
            code = await self._proc.wait()
            raise BrokerUnavailable(
                f"the broker process ({' '.join(self.args)}) exited with code {code} "
                f"before serving: {self.last_words()}"
            )
        await self.kill()
        raise BrokerUnavailable(
            f"the broker process ({' '.join(self.args)}) did not serve within "
            f"{ready_timeout_s:g} s: {self.last_words()}"
        )

    async def wait_serving(self, timeout_s: float) -> bool:
        """Wait until the child serves; False if it did not within ``timeout_s``."""
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(self.serving.wait(), timeout_s)
        return self.serving.is_set()

    def last_words(self) -> str:
        """The child's last stderr lines, joined on one line."""
        return " | ".join(self.tail) or "(no output)"

    async def _read_stderr(self) -> None:
        proc = self._proc
        assert proc is not None
        assert proc.stderr is not None
        while True:
            raw = await proc.stderr.readline()
            if not raw:
                return
            line = _ANSI.sub("", raw.decode("utf-8", "replace")).strip()
            if not line:
                continue
            self.tail.append(line)
            match = _SERVING.match(line)
            if match is not None and not self.serving.is_set():
                self.serving_at = time.monotonic()
                self.address = match["address"]
                self.epoch = int(match["epoch"])
                self.serving.set()
            elif _STANDING_BY.match(line):
                self.standing_by.set()

    def signal(self, sig: signal.Signals) -> None:
        """Send ``sig`` to the child if it still runs."""
        if self._proc is not None and self._proc.returncode is None:
            with contextlib.suppress(ProcessLookupError):
                self._proc.send_signal(sig)

    async def kill(self) -> int | None:
        """SIGKILL the child and reap it; its exit code (None if it was never started)."""
        if self._proc is None:
            return None
        self.signal(signal.SIGKILL)
        code = await self._proc.wait()
        await self._finish_reader()
        return code

    async def stop(self, timeout_s: float = STOP_TIMEOUT_S) -> int | None:
        """SIGTERM (the broker drains), then SIGKILL after ``timeout_s``; the exit code."""
        if self._proc is None:
            return None
        self.signal(signal.SIGTERM)
        try:
            code = await asyncio.wait_for(self._proc.wait(), timeout_s)
        except TimeoutError:
            log.warning(
                "broker process did not stop on SIGTERM; killing it",
                extra={"action": "kill", "pid": self._proc.pid},
            )
            return await self.kill()
        await self._finish_reader()
        return code

    async def _finish_reader(self) -> None:
        if self._reader is None:
            return
        try:
            await asyncio.wait_for(asyncio.shield(self._reader), 5.0)
        except TimeoutError:  # a grandchild holds the pipe open; stop reading it
            self._reader.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._reader

    async def __aenter__(self) -> BrokerProcess:
        return self

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        if exc is None:
            await self.stop()
        else:  # failing or cancelled: do not wait for a drain
            await asyncio.shield(self.kill())
