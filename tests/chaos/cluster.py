"""The processes of one chaos run, the supervisor that keeps them alive, and the recorder.

* Brokers are ``chaos_broker.py`` processes (``osqueue broker`` plus a
  recording storage and a skewed clock).  Each listens on a free port and
  advertises the port of its own :class:`FaultyProxy`, so every client call
  crosses a proxy that a round can make drop, delay and reset.
* Producers and workers are ``chaos_node.py`` processes; each appends its
  events to its own JSON-lines log, which :class:`LogTail` reads as it grows.
* :class:`DocRecorder` reads the queue document every few tens of
  milliseconds straight from storage and keeps every version it read; rounds
  wait on it ("the document names another broker") instead of sleeping.
"""

from __future__ import annotations

import asyncio
import contextlib
import hashlib
import json
import os
import random
import signal
import sys
import time
from collections import Counter, deque
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from chaos_proxy import FaultyProxy
from servers import free_port

from osqueue.errors import OsqueueError
from osqueue.state import DOCUMENT_KEY, Document, decode
from osqueue.storage.port import Storage

HERE = Path(__file__).parent
NODE = str(HERE / "chaos_node.py")
BROKER = str(HERE / "chaos_broker.py")
LEASE_S = 2.0
HEARTBEAT_TIMEOUT_S = 3.0
#: brokers sweep payloads/ this often: many sweeps while brokers die and freeze
PAYLOAD_SWEEP_S = 1.5
#: how far a SIGUSR1 steps a broker's clock (past the lease and the skew margin)
CLOCK_STEP_S = 6.0
PRODUCERS = 2
WORKERS = 3
READY_TIMEOUT_S = 60.0
POLL_S = 0.04
#: the supervisor's pace: how soon it notices a dead broker or worker
SUPERVISE_S = 0.2


class LogTail:
    """The events of one JSON-lines log, read incrementally (a torn last line waits)."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self.events: list[dict[str, Any]] = []
        self._offset = 0

    def refresh(self) -> list[dict[str, Any]]:
        if not self.path.exists():
            return self.events
        with self.path.open("rb") as f:
            f.seek(self._offset)
            chunk = f.read()
        end = chunk.rfind(b"\n") + 1
        for line in chunk[:end].splitlines():
            if line.endswith(b"}"):
                self.events.append(json.loads(line))
        self._offset += end
        return self.events


@dataclass(frozen=True)
class Observation:
    """One version of the document as the recorder read it."""

    t: float
    version: int
    epoch: int
    broker: str | None
    address: str | None
    sha: str
    etag: str


class DocRecorder:
    """Reads the document straight from storage, over and over, and keeps what it saw."""

    def __init__(self, store: Storage) -> None:
        self.store = store
        self.observations: list[Observation] = []
        self.reads = 0
        self.errors: list[str] = []
        self.doc: Document | None = None
        #: when the recorder first read the current epoch (time.time())
        self.epoch_since = 0.0
        self._changed = asyncio.Condition()
        self._task: asyncio.Task[None] | None = None

    def start(self) -> None:
        self._task = asyncio.ensure_future(self._run())

    async def stop(self) -> None:
        if self._task is not None:
            self._task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._task

    @property
    def latest(self) -> Observation | None:
        return self.observations[-1] if self.observations else None

    async def _run(self) -> None:
        while True:
            await self.read_once()
            await asyncio.sleep(POLL_S)  # the polling rate (what "every version read" can see)

    async def read_once(self) -> None:
        try:
            blob = await self.store.read(DOCUMENT_KEY)
        except OsqueueError as exc:
            self.errors.append(f"{type(exc).__name__}: {exc}")
            return
        self.reads += 1
        doc = decode(blob.data)  # I5: every version read decodes (raises CorruptDocument)
        last = self.latest
        if last is not None and last.version == doc.version and last.etag == blob.etag:
            return
        owner = doc.broker
        if last is None or (owner.epoch if owner else 0) != last.epoch:
            self.epoch_since = time.time()
        self.observations.append(
            Observation(
                t=time.time(),
                version=doc.version,
                epoch=owner.epoch if owner else 0,
                broker=owner.id if owner else None,
                address=owner.address if owner else None,
                sha=hashlib.sha256(blob.data).hexdigest()[:20],
                etag=blob.etag,
            )
        )
        self.doc = doc
        async with self._changed:
            self._changed.notify_all()

    async def wait_for(
        self, what: str, predicate: Callable[[Observation], bool], timeout_s: float
    ) -> Observation:
        """The first observation (from now on, or the latest) that ``predicate`` accepts."""

        def found() -> bool:
            return self.latest is not None and predicate(self.latest)

        try:
            async with self._changed:
                await asyncio.wait_for(self._changed.wait_for(found), timeout_s)
        except TimeoutError:
            raise AssertionError(
                f"waited {timeout_s:g} s for {what}; the document says {self.latest}"
            ) from None
        assert self.latest is not None
        return self.latest


@dataclass
class BrokerNode:
    """One ``chaos_broker.py`` process and the proxy its clients go through."""

    name: str
    proc: asyncio.subprocess.Process
    proxy: FaultyProxy
    address: str
    standby: bool
    serving: asyncio.Event = field(default_factory=asyncio.Event)
    standing_by: asyncio.Event = field(default_factory=asyncio.Event)
    epoch: int | None = None
    tail: deque[str] = field(default_factory=lambda: deque(maxlen=20))
    reader: asyncio.Task[None] | None = None

    @property
    def alive(self) -> bool:
        return self.proc.returncode is None

    def signal(self, sig: signal.Signals) -> bool:
        if not self.alive:
            return False
        with contextlib.suppress(ProcessLookupError):
            self.proc.send_signal(sig)
            return True
        return False

    def last_words(self) -> str:
        return " | ".join(self.tail) or "(no output)"

    async def read_stderr(self, sink: Path) -> None:
        assert self.proc.stderr is not None
        with sink.open("ab") as out:
            while raw := await self.proc.stderr.readline():
                out.write(raw)
                line = raw.decode("utf-8", "replace").strip()
                self.tail.append(line)
                if line.startswith("serving ") and "(epoch " in line:
                    self.epoch = int(line.rsplit("(epoch ", 1)[1].rstrip(")"))
                    self.serving.set()
                elif line.startswith("standing by for "):
                    self.standing_by.set()
            code = await self.proc.wait()
            out.write(f"[exit code {code}]\n".encode())
            self.tail.append(f"[exit code {code}]")


class Cluster:
    """Brokers, producers and workers of one run; a supervisor restarts what died."""

    def __init__(self, url: str, workdir: Path, rng: random.Random) -> None:
        self.url = url
        self.workdir = workdir
        self.rng = rng
        self.brokers: dict[str, BrokerNode] = {}
        self.workers: dict[str, asyncio.subprocess.Process] = {}
        self.producers: dict[str, asyncio.subprocess.Process] = {}
        self.tails: dict[str, LogTail] = {}
        self.signals: Counter[str] = Counter()
        self.stop_file = workdir / "stop-producers"
        self._counts: Counter[str] = Counter()
        self._stopping = False
        self._stderr = (workdir / "nodes.err").open("ab")  # closed in stop()

    # -- processes ------------------------------------------------------------------

    def log(self, name: str) -> Path:
        return self.workdir / f"{name}.jsonl"

    def tail(self, name: str) -> LogTail:
        if name not in self.tails:
            self.tails[name] = LogTail(self.log(name))
        return self.tails[name]

    def _name(self, kind: str) -> str:
        self._counts[kind] += 1
        return f"{kind}{self._counts[kind]}"

    async def start_broker(self, *, standby: bool) -> BrokerNode:
        name = self._name("b")
        listen = free_port()
        proxy = FaultyProxy(listen, seed=self.rng.randrange(1 << 30), drop=0.0, delay=0.0)
        await proxy.start()
        address = f"127.0.0.1:{proxy.port}"
        args = [BROKER, self.url, str(self.log(name)), "--listen", f"127.0.0.1:{listen}"]
        args += ["--advertise", address, "--lease-s", str(LEASE_S)]
        args += ["--heartbeat-timeout-s", str(HEARTBEAT_TIMEOUT_S)]
        args += ["--payload-sweep-s", str(PAYLOAD_SWEEP_S), *(["--standby"] if standby else [])]
        env = {**os.environ, "OSQUEUE_CLOCK_STEP_S": str(CLOCK_STEP_S), "PYTHONUNBUFFERED": "1"}
        env.pop("OSQUEUE_CLOCK_SKEW_S", None)
        proc = await asyncio.create_subprocess_exec(
            sys.executable,
            *args,
            stdin=asyncio.subprocess.DEVNULL,
            stdout=asyncio.subprocess.DEVNULL,
            stderr=asyncio.subprocess.PIPE,
            env=env,
            start_new_session=True,
        )
        node = BrokerNode(name, proc, proxy, address, standby)
        node.reader = asyncio.ensure_future(node.read_stderr(self.workdir / f"{name}.err"))
        self.brokers[name] = node
        ready = node.standing_by if standby else node.serving
        waiter = asyncio.ensure_future(ready.wait())
        await asyncio.wait(
            {waiter, node.reader}, timeout=READY_TIMEOUT_S, return_when=asyncio.FIRST_COMPLETED
        )
        waiter.cancel()
        assert ready.is_set(), f"broker {name} did not start: {node.last_words()}"
        return node

    async def _node(self, *args: str) -> asyncio.subprocess.Process:
        return await asyncio.create_subprocess_exec(
            sys.executable,
            NODE,
            *args,
            stdin=asyncio.subprocess.DEVNULL,
            stdout=asyncio.subprocess.DEVNULL,
            stderr=self._stderr,
            start_new_session=True,
        )

    async def start_worker(self) -> str:
        name = self._name("w")
        self.workers[name] = await self._node("worker", self.url, name, str(self.log(name)))
        return name

    async def start_producer(self, name: str) -> None:
        """Start producer ``name`` (again: it resumes from its log)."""
        self.producers[name] = await self._node(
            "producer", self.url, name, str(self.log(name)), str(self.stop_file)
        )

    async def start(self) -> None:
        await self.start_broker(standby=False)
        await self.start_broker(standby=True)
        for i in range(PRODUCERS):
            await self.start_producer(f"p{i}")
        for _ in range(WORKERS):
            await self.start_worker()

    def live_brokers(self) -> list[BrokerNode]:
        return [b for b in self.brokers.values() if b.alive]

    def by_address(self, address: str | None) -> BrokerNode | None:
        return next((b for b in self.brokers.values() if b.address == address), None)

    def standbys(self, serving_address: str | None) -> list[BrokerNode]:
        return [
            b
            for b in self.live_brokers()
            if b.address != serving_address and b.standing_by.is_set() and not b.serving.is_set()
        ]

    async def wait_standby(
        self, serving_address: str | None, timeout_s: float, exclude: BrokerNode | None = None
    ) -> list[BrokerNode]:
        """The brokers standing by (not ``exclude``), once there is one."""
        deadline = asyncio.get_running_loop().time() + timeout_s
        while not (found := [b for b in self.standbys(serving_address) if b is not exclude]):
            if asyncio.get_running_loop().time() > deadline:
                raise AssertionError(
                    f"no broker stood by within {timeout_s:g} s: "
                    f"{[(b.name, b.alive, b.last_words()) for b in self.brokers.values()]}"
                )
            await asyncio.sleep(0.05)  # the supervisor starts them in its own task
        return found

    async def supervise(self) -> None:
        """Keep two brokers and three workers running (restart what died)."""
        while not self._stopping:
            while len(self.live_brokers()) < 2 and not self._stopping:
                await self.start_broker(standby=True)
            for name, proc in list(self.workers.items()):
                if proc.returncode is not None:
                    del self.workers[name]
                    await self.start_worker()
            await asyncio.sleep(SUPERVISE_S)  # the supervisor's pace, as systemd's restart delay

    def send(self, proc: asyncio.subprocess.Process, sig: signal.Signals, what: str) -> None:
        if proc.returncode is None:
            with contextlib.suppress(ProcessLookupError):
                os.kill(proc.pid, sig)
                self.signals[what] += 1

    def broker_signal(self, node: BrokerNode, sig: signal.Signals, what: str) -> None:
        if node.signal(sig):
            self.signals[what] += 1

    def nodes_stderr(self) -> str:
        """What producers and workers printed on stderr (the traceback of one that died)."""
        return (self.workdir / "nodes.err").read_text(errors="replace")

    def client_proxies(self) -> list[FaultyProxy]:
        return [b.proxy for b in self.brokers.values()]

    # -- the end ----------------------------------------------------------------------

    async def finish_producers(self, timeout_s: float) -> None:
        """Let every producer finish what it sent (the stop file), and wait for them."""
        self.stop_file.touch()
        for name, proc in self.producers.items():
            try:
                await asyncio.wait_for(proc.wait(), timeout_s)
            except TimeoutError:
                raise AssertionError(
                    f"producer {name} did not finish within {timeout_s:g} s; brokers: "
                    f"{[(b.name, b.alive, b.last_words()) for b in self.brokers.values()]}"
                ) from None
            assert proc.returncode == 0, f"producer {name} exited with {proc.returncode}"

    async def stop(self) -> None:
        self._stopping = True
        for proc in [*self.workers.values(), *self.producers.values()]:
            if proc.returncode is None:
                with contextlib.suppress(ProcessLookupError):
                    proc.kill()
            await proc.wait()
        for node in self.brokers.values():
            node.signal(signal.SIGCONT)  # a frozen broker cannot drain
            node.signal(signal.SIGTERM)
        for node in self.brokers.values():
            try:
                await asyncio.wait_for(node.proc.wait(), 30.0)
            except TimeoutError:
                node.signal(signal.SIGKILL)
                await node.proc.wait()
            if node.reader is not None:
                with contextlib.suppress(asyncio.CancelledError):
                    await asyncio.wait_for(node.reader, 5.0)
            await node.proxy.close()
        self._stderr.close()
