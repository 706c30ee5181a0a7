"""The simulated object store: one shared server, and a faulty view per node.

:class:`SharedStore` is the server: a :class:`~osqueue.storage.memory.MemoryStorage`
(counter or MD5-of-content ETags) that records every document version that
lands, in the order it lands, and can throttle writes to one object (GCS and
R2 allow about one write per second per object).  It can also stand in front
of a real object store (moto's S3 or Azurite, :mod:`sim.realstore`): every
request then goes to the real server, as a task of its own that completes
even if the node that sent it crashes (the request is on the wire), and
document writes reach the server one at a time, so the order they are recorded
in is the order they landed in.

:class:`NodeStorage` is one node's connection to it.  It injects the faults the
backends really show, each drawn from the run's one RNG:

* ``error_before``: a 503 before the write reaches the server (nothing changed);
* ``lost_after``: the write lands, the answer is lost (``OutcomeUnknown``);
* ``echo``: the write lands, the client library retries it and reports 412
  for its own write (``Conflict``);
* ``spurious_conflict``: a 409 that changed nothing;
* ``delayed``: the request is held in the network; the caller times out with
  ``OutcomeUnknown`` and the write is applied (or refused by its If-Match)
  seconds later, after the caller has moved on;
* ``brownout``: a storage brownout (seed 331's shape): the request is held like
  a delayed one but lands a moment after the caller gave up, while the node's
  next write of the key (its retry) fails with a 503, so the first attempt
  lands between the retry and the read that resolves it;
* ``spike``: a latency spike of seconds on one call;
* ``read_error``: a read fails.

It also carries the node's crash triggers (crash before, during or after the
n-th write of a kind, a segment object's put included) and pauses with the
node's :class:`~sim.node.Gate`.  The server records every segment object that
reaches it and every delete of one, with how many versions had landed by
then, for the checker's segment rules.
"""

from __future__ import annotations

import asyncio
import contextlib
import random
from collections import Counter
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from enum import Enum
from typing import Any, TypeVar

from osqueue.errors import Conflict, NotFound, OutcomeUnknown, StorageError
from osqueue.storage.memory import EtagMode, MemoryStorage
from osqueue.storage.port import Blob, Capabilities, Storage
from sim.loop import VirtualTimeLoop
from sim.node import Gate

T = TypeVar("T")

DOCUMENT_KEY = "queue.json"
SEGMENT_PREFIX = "segments/"
DELAYED_PREFIX = "delayed/"
#: the key of a :class:`Call` that stands for a pause of the node, or a clock step
PAUSED = "(paused)"
#: the objects whose puts and deletes are recorded (segments, waiting children, the
#: sealed record, dead segments, delayed jobs)
RECORDED_PREFIXES = (SEGMENT_PREFIX, "waiting/", "finished/", "dead/", "delayed/")
#: the kinds of put a broker can crash around (the nemesis' segment, waiting and
#: finished crashes)
CRASH_PUT_KINDS = ("segments", "waiting", "finished")


@dataclass(frozen=True, slots=True)
class Landed:
    """One version of the document as it landed on the server."""

    at: float
    data: bytes
    etag: str
    writer: str


@dataclass(frozen=True, slots=True)
class Call:
    """A node's read of a delayed object, or read or write of the document (virtual
    times), which the store may slow or fail: a load waits that long (NOT_LATE)."""

    node: str
    key: str
    sent: float
    ended: float
    ok: bool


@dataclass(frozen=True, slots=True)
class FaultRates:
    """Per-call probabilities (and sizes) of the faults a node's storage injects."""

    error_before: float = 0.0
    lost_after: float = 0.0
    echo: float = 0.0
    spurious_conflict: float = 0.0
    delayed: float = 0.0
    brownout: float = 0.0
    spike: float = 0.0
    read_error: float = 0.0
    #: each call waits uniform(latency_min_s, latency_max_s)
    latency_min_s: float = 0.001
    latency_max_s: float = 0.02
    spike_max_s: float = 5.0
    #: a delayed request: the caller gives up after this, the write lands later
    timeout_s: float = 2.0
    delay_max_s: float = 20.0
    #: a brownout's held write lands this long (at most) after the caller gave up
    brownout_land_max_s: float = 0.4

    @property
    def any_fault(self) -> bool:
        return (
            self.error_before
            + self.lost_after
            + self.echo
            + self.spurious_conflict
            + self.delayed
            + self.brownout
            + self.spike
            + self.read_error
        ) > 0

    def calm(self) -> FaultRates:
        """The same latencies without any fault (the heal phase)."""
        return FaultRates(latency_min_s=self.latency_min_s, latency_max_s=self.latency_max_s)


class Fault(Enum):
    """A fault one write can get (see the module docstring)."""

    ERROR_BEFORE = "error_before"
    SPURIOUS_CONFLICT = "spurious_conflict"
    DELAYED = "delayed"
    BROWNOUT = "brownout"
    LOST_AFTER = "lost_after"
    ECHO = "echo"


class Phase(Enum):
    BEFORE = "before"  # crash before the request is sent
    DURING = "during"  # the request is sent, the process dies; it lands a moment later
    AFTER = "after"  # the write landed; the process dies before reading the answer


@dataclass(frozen=True, slots=True)
class CrashTrigger:
    """Crash the node at ``phase`` of its ``nth`` write (1-based) of a key kind.

    ``prefix`` matches :func:`key_kind`: ``document``, ``archive`` or ``segments``
    (a segment object's put).
    """

    prefix: str
    nth: int
    phase: Phase


def key_kind(key: str) -> str:
    if key == DOCUMENT_KEY:
        return "document"
    return key.split("/", 1)[0]


@dataclass
class SharedStore:
    """The server every node talks to; it records every document version that lands."""

    name: str
    etag_mode: EtagMode = "counter"
    #: at most one document write per this many seconds (0: unlimited); more get a 429
    min_write_interval_s: float = 0.0
    #: a real object store to stand in front of (None: the in-memory one)
    backend: Storage | None = None
    #: the same real store reached directly (no faulty network): how the recorder
    #: learns whether a document write whose answer was an error landed
    observer: Storage | None = None
    landed: list[Landed] = field(default_factory=list)
    faults: Counter[str] = field(default_factory=Counter)
    _inflight: set[asyncio.Task[None]] = field(default_factory=set)
    _last_doc_write: float = -1e18
    #: requests at the real server now
    _real: set[asyncio.Future[Any]] = field(default_factory=set)
    _document_lock: asyncio.Lock | None = None
    #: what a real server answered to document writes: ``refused`` (412/409/404, a
    #: write that did not land), ``landed unanswered`` (an error, yet it landed)
    answers: Counter[str] = field(default_factory=Counter)
    #: every segment object that reached the server: key -> (how many versions had
    #: landed when it did, its bytes); a second put of the key keeps the first
    segment_puts: dict[str, tuple[int, bytes]] = field(default_factory=dict)
    #: keys put again with other bytes (a segment object is never changed)
    segment_rewrites: list[str] = field(default_factory=list)
    #: every delete of a segment object that reached the server: (how many versions
    #: had landed when it did, key)
    segment_deletes: list[tuple[int, str]] = field(default_factory=list)
    #: the calls a node finished or failed (and its pauses and clock steps: NOT_LATE)
    calls: list[Call] = field(default_factory=list)

    def __post_init__(self) -> None:
        self.inner: Storage
        if self.backend is None:
            MemoryStorage.drop(self.name)
            self.inner = MemoryStorage(self.name, etag=self.etag_mode)
        else:
            self.inner = self.backend

    @property
    def content_etags(self) -> bool:
        if self.backend is not None:
            return self.backend.capabilities.content_etags
        return self.etag_mode == "md5"

    def now(self) -> float:
        return asyncio.get_running_loop().time()

    async def _at_server(self, call: Callable[[], Awaitable[T]]) -> T:
        """One request to the server.  A real one runs as a task of its own (it lands
        whatever becomes of its sender) and holds virtual time while it is out."""
        if self.backend is None:
            return await call()
        task = asyncio.ensure_future(_counted(call))
        self._real.add(task)
        task.add_done_callback(self._real.discard)
        task.add_done_callback(_retrieve)
        return await asyncio.shield(task)

    async def read(self, key: str) -> Blob:
        return await self._at_server(lambda: self.inner.read(key))

    async def get(self, key: str) -> bytes:
        return (await self.read(key)).data

    async def put(self, key: str, data: bytes) -> None:
        await self._at_server(lambda: self.inner.put(key, data))
        if key.startswith(RECORDED_PREFIXES):
            first = self.segment_puts.setdefault(key, (len(self.landed), data))
            if first[1] != data:
                self.segment_rewrites.append(key)

    async def delete(self, key: str) -> None:
        await self._at_server(lambda: self.inner.delete(key))
        if key.startswith(RECORDED_PREFIXES):
            self.segment_deletes.append((len(self.landed), key))

    async def list(self, prefix: str) -> list[str]:
        return await self._at_server(lambda: self.inner.list(prefix))

    async def write(self, key: str, data: bytes, if_match: str | None, writer: str) -> str:
        throttle = self.min_write_interval_s
        if key == DOCUMENT_KEY and self.now() - self._last_doc_write < throttle:
            self.faults["throttled"] += 1
            raise StorageError("429 SlowDown: one write per second per object")
        if key != DOCUMENT_KEY:
            return await self._at_server(lambda: self.inner.write(key, data, if_match=if_match))
        if self.backend is None:
            return await self._write_document(data, if_match, writer)
        return await self._at_server(lambda: self._write_document_alone(data, if_match, writer))

    async def _write_document_alone(self, data: bytes, if_match: str | None, writer: str) -> str:
        """A real server answers in its own time: one document write at a time, so the
        order of ``landed`` is the order the writes landed in."""
        if self._document_lock is None:
            self._document_lock = asyncio.Lock()
        async with self._document_lock:
            try:
                return await self._write_document(data, if_match, writer)
            except (Conflict, StorageError):
                # A lost answer that obstore retried ends as a 412 for our own write; a
                # reset may come after the request landed.  No other document write can
                # land meanwhile (the lock), so the stored bytes say whether this one did.
                await self._record_if_landed(data, writer)
                raise

    async def _record_if_landed(self, data: bytes, writer: str) -> None:
        assert self.observer is not None, "a real backend needs its observer"
        stored: Blob | None = None
        for attempt in range(1, 4):  # the direct connection has no injected faults
            try:
                stored = await self.observer.read(DOCUMENT_KEY)
                break
            except NotFound:
                break
            except StorageError:
                if attempt == 3:
                    raise
        if stored is None or stored.data != data:
            self.answers["refused"] += 1
        elif not self.landed or self.landed[-1].data != data:
            self.answers["landed unanswered"] += 1
            self._last_doc_write = self.now()
            self.landed.append(Landed(self.now(), data, stored.etag, writer))

    async def _write_document(self, data: bytes, if_match: str | None, writer: str) -> str:
        etag = await self.inner.write(DOCUMENT_KEY, data, if_match=if_match)
        self._last_doc_write = self.now()
        self.landed.append(Landed(self.now(), data, etag, writer))
        return etag

    def send_later(
        self, delay_s: float, key: str, data: bytes, if_match: str | None, writer: str
    ) -> None:
        """A request already on the wire: it reaches the server after ``delay_s``."""

        async def deliver() -> None:
            await asyncio.sleep(delay_s)
            with contextlib.suppress(Conflict, StorageError):  # nobody is listening any more
                await self.write(key, data, if_match, writer)

        task = asyncio.ensure_future(deliver())
        self._inflight.add(task)
        task.add_done_callback(self._inflight.discard)

    @property
    def in_flight(self) -> int:
        return len(self._inflight)

    async def quiesce(self) -> None:
        """The run is over: requests held in the network never arrive, and every request
        already at a real server gets its answer (so the end state is read after it)."""
        for task in list(self._inflight):
            task.cancel()
        while self._real:
            await asyncio.wait(set(self._real))

    # -- outside interference (scenarios only) -----------------------------------------

    async def delete_document(self) -> None:
        await self.inner.delete(DOCUMENT_KEY)

    async def replace_document(self, data: bytes) -> None:
        await self.inner.put(DOCUMENT_KEY, data)

    def close(self) -> None:
        for task in self._inflight:
            task.cancel()
        if self.backend is None:
            MemoryStorage.drop(self.name)


async def _counted(call: Callable[[], Awaitable[T]]) -> T:
    """A request at a real server, counted while it is out (see :mod:`sim.loop`)."""
    loop = asyncio.get_running_loop()
    virtual = loop if isinstance(loop, VirtualTimeLoop) else None
    if virtual is not None:
        virtual.real_io += 1
    try:
        return await call()
    finally:
        if virtual is not None:
            virtual.real_io -= 1


def _retrieve(task: asyncio.Future[Any]) -> None:
    """Its sender may be gone (crashed): the outcome of the request is nobody's business."""
    if not task.cancelled():
        task.exception()


class NodeStorage:
    """One node's faulty connection to the :class:`SharedStore` (a ``Storage``)."""

    def __init__(
        self,
        shared: SharedStore,
        node: str,
        rng: random.Random,
        *,
        rates: FaultRates | None = None,
        gate: Gate | None = None,
        on_crash: Callable[[], None] | None = None,
    ) -> None:
        self.shared = shared
        self.node = node
        self.rng = rng
        self.rates = rates or FaultRates()
        self.gate = gate
        self.on_crash = on_crash
        self.triggers: list[CrashTrigger] = []
        self.scripted: list[tuple[str, Fault, float | None]] = []
        self.dead = False
        self._writes: Counter[str] = Counter()
        self._capabilities = Capabilities(
            cross_process=True, content_etags=shared.content_etags, durable=True
        )

    # -- Storage port ------------------------------------------------------------------

    @property
    def url(self) -> str:
        return f"sim://{self.shared.name}/{self.node}"

    @property
    def capabilities(self) -> Capabilities:
        return self._capabilities

    async def read(self, key: str) -> Blob:
        timed = key == DOCUMENT_KEY or key.startswith(DELAYED_PREFIX)
        return await (self._timed(key, self._read(key)) if timed else self._read(key))

    async def _read(self, key: str) -> Blob:
        await self._enter()
        if self._draw(self.rates.read_error):
            self._count("read_error")
            raise StorageError(f"injected: 503 on read {key!r}")
        blob = await self.shared.read(key)
        await self._gate()
        return blob

    async def get(self, key: str) -> bytes:
        return (await self.read(key)).data

    async def list(self, prefix: str = "") -> list[str]:
        await self._enter()
        return await self.shared.list(prefix)

    async def delete(self, key: str) -> None:
        await self._enter()
        if self._draw(self.rates.error_before):
            self._count("error_before")
            raise StorageError(f"injected: 503 on delete {key!r}")
        await self.shared.delete(key)

    async def put(self, key: str, data: bytes) -> None:
        await self._enter()
        kind = key_kind(key)
        if kind == "delayed":  # an object of delayed jobs: the segments' crashes
            kind = "segments"
        if kind in CRASH_PUT_KINDS:  # a broker can crash around a cold object's write
            self._writes[kind] += 1
            trigger = self._trigger(kind)
            if trigger is not None:
                self._count(f"crash_{kind}_{trigger.phase.value}")
                await self._crash_put(trigger.phase, key, data)
        if self._draw(self.rates.error_before):
            self._count("error_before")
            raise StorageError(f"injected: 503 on put {key!r}")
        await self.shared.put(key, data)
        if self._draw(self.rates.lost_after):
            self._count("lost_after")
            raise OutcomeUnknown(f"injected: put {key!r} landed, answer lost")

    async def write(self, key: str, data: bytes, *, if_match: str | None) -> str:
        if key == DOCUMENT_KEY:
            return await self._timed(key, self._write(key, data, if_match))
        return await self._write(key, data, if_match)

    async def _timed(self, key: str, call: Awaitable[T]) -> T:
        """``call``, recorded in the store's :attr:`SharedStore.calls`."""
        sent, ok = self.shared.now(), False
        try:
            out, ok = await call, True
            return out
        finally:
            self.shared.calls.append(Call(self.node, key, sent, self.shared.now(), ok))

    async def _write(self, key: str, data: bytes, if_match: str | None) -> str:
        await self._enter()
        kind = key_kind(key)
        self._writes[kind] += 1
        trigger = self._trigger(kind)
        if trigger is not None:
            self._count(f"crash_{kind}_{trigger.phase.value}")
            await self._crash_write(trigger.phase, key, data, if_match)
        return await self._faulty_write(key, data, if_match)

    async def close(self) -> None:
        return None

    def writes(self, kind: str) -> int:
        """How many writes of this kind (``document``, ``archive``...) this node sent."""
        return self._writes[kind]

    # -- faults ------------------------------------------------------------------------

    def inject(self, prefix: str, fault: Fault, *, lands_after_s: float | None = None) -> None:
        """Script one fault: the next write of a key starting with ``prefix`` gets it.

        For ``DELAYED``, ``lands_after_s`` fixes when the held request reaches the server.
        """
        self.scripted.append((prefix, fault, lands_after_s))

    def _pick(self, key: str) -> tuple[Fault | None, float | None]:
        for i, (prefix, fault, lands_after_s) in enumerate(self.scripted):
            if key.startswith(prefix):
                del self.scripted[i]
                return fault, lands_after_s
        return self._draw_fault(), None

    def _draw_fault(self) -> Fault | None:
        r = self.rates
        draw = self.rng.random()
        for fault, rate in (
            (Fault.ERROR_BEFORE, r.error_before),
            (Fault.SPURIOUS_CONFLICT, r.spurious_conflict),
            (Fault.DELAYED, r.delayed),
            (Fault.BROWNOUT, r.brownout),
            (Fault.LOST_AFTER, r.lost_after),
            (Fault.ECHO, r.echo),
        ):
            if draw < rate:
                return fault
            draw -= rate
        return None

    async def _faulty_write(self, key: str, data: bytes, if_match: str | None) -> str:
        fault, lands_after_s = self._pick(key)
        if fault is not None:
            self._count(fault.value)
        if fault is Fault.ERROR_BEFORE:
            raise StorageError(f"injected: 503 before write {key!r} applied")
        if fault is Fault.SPURIOUS_CONFLICT:
            raise Conflict(f"injected: 409 ConditionalRequestConflict on {key!r}")
        if fault is Fault.BROWNOUT:
            self.scripted.insert(0, (key, Fault.ERROR_BEFORE, None))  # the retry fails
            fault = Fault.DELAYED
            if lands_after_s is None:
                r = self.rates
                lands_after_s = r.timeout_s + self.rng.uniform(0.05, r.brownout_land_max_s)
        if fault is Fault.DELAYED:
            r = self.rates
            delay = lands_after_s
            if delay is None:
                delay = r.timeout_s + self.rng.uniform(0.0, r.delay_max_s)
            self.shared.send_later(delay, key, data, if_match, self.node)
            await asyncio.sleep(r.timeout_s)
            await self._gate()
            raise OutcomeUnknown(f"injected: write {key!r} timed out (still in flight)")
        etag = await self.shared.write(key, data, if_match, self.node)
        await self._gate()
        if fault is Fault.LOST_AFTER:
            raise OutcomeUnknown(f"injected: write {key!r} landed, answer lost")
        if fault is Fault.ECHO:
            raise Conflict(f"injected: 412 for our own retried write of {key!r}")
        return etag

    def _trigger(self, kind: str) -> CrashTrigger | None:
        for t in self.triggers:
            if kind.startswith(t.prefix) and self._writes[kind] == t.nth:
                return t
        return None

    async def _crash_write(self, phase: Phase, key: str, data: bytes, if_match: str | None) -> None:
        if phase is Phase.DURING:
            self.shared.send_later(self.rng.uniform(0.0, 0.05), key, data, if_match, self.node)
        elif phase is Phase.AFTER:
            with contextlib.suppress(Conflict, StorageError):
                await self.shared.write(key, data, if_match, self.node)
        self.crash()
        await asyncio.Future()  # the crash cancels this task

    async def _crash_put(self, phase: Phase, key: str, data: bytes) -> None:
        if phase is Phase.DURING:
            self._land_later(self.rng.uniform(0.0, 0.05), key, data)
        elif phase is Phase.AFTER:
            with contextlib.suppress(StorageError):
                await self.shared.put(key, data)
        self.crash()
        await asyncio.Future()  # the crash cancels this task

    def _land_later(self, delay_s: float, key: str, data: bytes) -> None:
        async def deliver() -> None:
            await asyncio.sleep(delay_s)
            with contextlib.suppress(StorageError):
                await self.shared.put(key, data)

        task = asyncio.ensure_future(deliver())
        self.shared._inflight.add(task)
        task.add_done_callback(self.shared._inflight.discard)

    def crash(self) -> None:
        self.dead = True
        if self.on_crash is not None:
            self.on_crash()

    # -- helpers -----------------------------------------------------------------------

    def _draw(self, p: float) -> bool:
        return p > 0 and self.rng.random() < p

    def _count(self, kind: str) -> None:
        self.shared.faults[kind] += 1

    async def _gate(self) -> None:
        if self.dead:
            await asyncio.Future()  # a dead process never sees an answer
        if self.gate is not None:
            await self.gate.passage()

    async def _enter(self) -> None:
        await self._gate()
        r = self.rates
        delay = self.rng.uniform(r.latency_min_s, r.latency_max_s)
        if self._draw(r.spike):
            self._count("spike")
            delay += self.rng.uniform(0.5, r.spike_max_s)
        await asyncio.sleep(delay)
        await self._gate()
