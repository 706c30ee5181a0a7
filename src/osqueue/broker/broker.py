"""The broker: the queue document's one writer.

It holds the current document and its ETag in memory and folds every pending
op into one compare-and-set write per cycle (group commit).  No op is answered
before the write that holds it is durable; one bad op fails alone.

Lifecycle: ``start`` reads (or creates) the document, archives any ``done``
jobs it inherits, and takes ownership with ``epoch + 1`` and a fresh lease,
restarting every claimed job's heartbeat clock.  While serving, every commit
renews the lease; an idle broker writes only to renew it.  A conflicting write
is resolved by re-reading: our own landed write (a client library's retry
echo) counts as committed, another broker's ownership makes this one step
down with ``NotBroker``, otherwise the batch is re-applied.  ``stop`` stops
taking ops, flushes, clears the address and returns within the drain timeout.

Beside the commit loop, archiver tasks write archive objects after the commits
that completed jobs, and a payload sweeper deletes objects under ``payloads/``
that no job references (see :meth:`Broker._payload_sweeper`).
"""

from __future__ import annotations

import asyncio
import collections
import contextlib
import logging
import signal
from collections.abc import Coroutine, Sequence
from dataclasses import dataclass, field
from enum import Enum
from typing import TYPE_CHECKING, Any

from osqueue.broker.archive import by_version, write_archive
from osqueue.broker.config import BrokerConfig
from osqueue.broker.payloads import Payloads
from osqueue.clock import Clock, SystemClock, Timer
from osqueue.errors import (
    BrokerUnavailable,
    Conflict,
    CorruptDocument,
    DocumentGone,
    InvalidInput,
    MaybeCommitted,
    NotBroker,
    NotFound,
    OsqueueError,
    ResourceExhausted,
    ShuttingDown,
    StorageError,
)
from osqueue.ids import new_id
from osqueue.state import (
    DOCUMENT_KEY,
    BrokerInfo,
    Claimed,
    ClaimOp,
    Document,
    MarkArchived,
    Op,
    RestartHeartbeats,
    Result,
    StoredJob,
    Transition,
    claimable,
    decode,
    encode,
    next_wakeup,
    to_datetime,
    transition,
)
from osqueue.storage.port import Blob, Storage

if TYPE_CHECKING:
    from osqueue.broker.local import LocalClient

log = logging.getLogger(__name__)


class State(Enum):
    NEW = "new"
    STANDBY = "standby"
    SERVING = "serving"
    STOPPING = "stopping"
    STOPPED = "stopped"
    STEPPED_DOWN = "stepped-down"
    FAILED = "failed"


#: Ops waiting for a commit and their callers' futures, index for index.
_Futures = list["asyncio.Future[Result]"]
#: archive objects of more jobs than this are rendered after the next commit starts
_RENDER_LATER = 16


@dataclass(slots=True)
class _Waiter:
    queues: tuple[str, ...]
    future: asyncio.Future[None]


@dataclass(slots=True)
class BrokerCounters:
    commits: int = 0
    ops: int = 0
    conflicts: int = 0
    storage_errors: int = 0
    archives: int = 0
    payloads_swept: int = 0
    write_bytes: int = 0
    batch_sizes: list[int] = field(default_factory=list)


class Broker:
    """One queue's broker.  ``async with Broker(url) as broker: q = broker.client()``."""

    def __init__(
        self,
        storage: Storage | str,
        config: BrokerConfig | None = None,
        *,
        clock: Clock | None = None,
        standby: bool = False,
    ) -> None:
        if isinstance(storage, str):
            from osqueue.storage import from_url

            storage = from_url(storage)
        self.storage: Storage = storage
        self.config = config or BrokerConfig()
        self.clock: Clock = clock or SystemClock()
        self.standby = standby
        self.id = self.config.broker_id or f"b-{new_id().lower()}"
        self.policy = self.config.policy()
        self.state = State.NEW
        self.counters = BrokerCounters()
        self.failure: OsqueueError | None = None
        self._doc: Document | None = None
        self._etag: str | None = None
        self._epoch = 0
        self._seen_version = 0  # the highest version read: a document never goes back
        self._pending: list[Op] = []
        self._futures: _Futures = []
        self._loop: asyncio.AbstractEventLoop | None = None
        self._max_pending = self.config.max_pending_ops
        self._max_batch = self.config.max_batch_ops
        self._renew_s = self.config.renew_interval_s
        self._internal: list[Op] = []
        self._waiters: list[_Waiter] = []
        #: the commit loop's wake-up while it idles (set by the first op to arrive)
        self._waker: asyncio.Future[None] | None = None
        #: one renewal/wake-up timer, kept while it would fire no later than needed
        self._timer: Timer | None = None
        self._timer_at = 0.0
        self._done = asyncio.Event()
        self._loop_task: asyncio.Task[None] | None = None
        self._side: set[asyncio.Task[None]] = set()
        self._archive_slots = asyncio.Semaphore(self.config.archive_concurrency)
        #: archive objects due (one list of done jobs per committed version), taken by
        #: up to ``archive_concurrency`` archiver tasks that park when there is none
        self._archive_todo: collections.deque[list[StoredJob]] = collections.deque()
        self._archivers = 0
        self._archivers_idle: list[asyncio.Future[None]] = []
        self._archive_busy = 0
        #: resolved when the archive is drained (nothing due, nothing being written)
        self._archive_drained: asyncio.Future[None] | None = None
        self._last_write = 0.0
        self._closing = False
        #: the payload objects under payloads/ (uploads, reads, deletes, the sweep)
        self.payloads = Payloads(self.storage)

    # ------------------------------------------------------------------ properties

    @property
    def commits(self) -> int:
        return self.counters.commits

    @property
    def epoch(self) -> int:
        return self._epoch

    @property
    def document(self) -> Document:
        """The last committed document (do not modify it)."""
        if self._doc is None:
            raise ShuttingDown("the broker has not started")
        return self._doc

    @property
    def serving(self) -> bool:
        return self.state is State.SERVING

    def client(self) -> LocalClient:
        from osqueue.broker.local import LocalClient

        return LocalClient(self)

    # ------------------------------------------------------------------ lifecycle

    async def __aenter__(self) -> Broker:
        await self.start()
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.stop()

    async def start(self) -> None:
        """Take ownership of the document (waiting for the lease if standby) and serve."""
        if self.state is not State.NEW:
            raise ShuttingDown(f"broker already {self.state.value}")
        if self.standby:
            self.state = State.STANDBY
            await self._await_vacancy()
        await self._acquire()
        self.state = State.SERVING
        self._loop_task = asyncio.create_task(self._run(), name=f"osqueue-broker-{self.id}")
        sweep_s = self.config.payload_sweep_interval_s
        if sweep_s is not None:
            self._spawn(self._payload_sweeper(sweep_s), "osqueue-payload-sweep")
        report_s = self.config.stats_log_interval_s
        if report_s is not None:
            self._spawn(self._stats_logger(report_s), "osqueue-stats-log")
        log.info(
            "broker serving",
            extra={"action": "serve", "broker": self.id, "epoch": self._epoch},
        )

    async def wait_closed(self) -> None:
        """Return when the broker stops for any reason (stop, step-down, failure)."""
        await self._done.wait()

    def install_signal_handlers(self) -> None:
        """SIGTERM/SIGINT start a graceful stop."""
        loop = asyncio.get_running_loop()
        for sig in (signal.SIGTERM, signal.SIGINT):
            loop.add_signal_handler(sig, lambda: self._spawn(self.stop()))

    async def stop(self) -> None:
        """Stop taking ops, flush what is pending, release the lease, and return."""
        if self.state is not State.SERVING:
            await self._finish_tasks()
            return
        self.state = State.STOPPING
        self._closing = True
        self._release_waiters()
        self._poke()
        task = self._loop_task
        try:
            if task is not None:
                await asyncio.wait_for(asyncio.shield(task), self.config.drain_timeout_s)
        except TimeoutError:
            log.warning("drain timeout; stopping hard", extra={"action": "stop"})
            if task is not None:
                task.cancel()
                with contextlib.suppress(asyncio.CancelledError):
                    await task
            self._fail_pending(MaybeCommitted("the broker stopped before confirming this op"))
        await self._finish_tasks()
        if self.state is State.STOPPING:
            self.state = State.STOPPED
        self._done.set()

    async def _finish_tasks(self) -> None:
        for task in list(self._side):
            task.cancel()
        for task in list(self._side):
            with contextlib.suppress(asyncio.CancelledError, Exception):
                await task
        self._done.set()

    # ------------------------------------------------------------------ ops in

    def add_op(self, op: Op) -> asyncio.Future[Result]:
        """Add an op to the next commit; the future resolves once it is durable."""
        self._check_open()
        pending = self._pending
        if len(pending) >= self._max_pending:
            raise ResourceExhausted(
                f"{len(pending)} ops are waiting for the broker; back off and retry"
            )
        loop = self._loop
        if loop is None:
            loop = self._loop = asyncio.get_running_loop()
        fut: asyncio.Future[Result] = loop.create_future()
        pending.append(op)
        self._futures.append(fut)
        if self._waker is not None:
            self._poke()
        return fut

    async def submit(self, op: Op) -> Result:
        return await self.add_op(op)

    async def submit_many(self, ops: Sequence[Op]) -> list[Result]:
        """Submit a batch: all of it or (raising before anything is queued) none of it."""
        self._check_open()
        if len(ops) > self._max_pending:
            raise InvalidInput(
                f"a batch of {len(ops)} ops is larger than max_pending_ops="
                f"{self._max_pending}; split it",
                field="ops",
            )
        if len(self._pending) + len(ops) > self._max_pending:
            raise ResourceExhausted(
                f"{len(self._pending)} ops are waiting for the broker and this batch has "
                f"{len(ops)}; back off and retry"
            )
        futures = [self.add_op(op) for op in ops]
        return list(await asyncio.gather(*futures))

    async def claim(self, op: ClaimOp, wait_s: float) -> Result:
        """A claim that, if empty, parks until a commit makes a job claimable.

        (The in-process client sends a claim that does not wait straight to
        :meth:`add_op`.)"""
        deadline = self.clock.monotonic() + max(0.0, wait_s)
        while True:
            result = await self.submit(op)
            if not isinstance(result, Claimed) or result.jobs:
                return result
            remaining = deadline - self.clock.monotonic()
            if remaining <= 0 or self._closing:
                return result
            waiter = _Waiter(op.queues, asyncio.get_running_loop().create_future())
            self._waiters.append(waiter)
            self._poke()  # let the loop arm a timer for delayed jobs
            try:
                await self._race(waiter.future, remaining)
            finally:
                if waiter in self._waiters:
                    self._waiters.remove(waiter)
            self._check_open()

    def _check_open(self) -> None:
        if self.state is State.SERVING and not self._closing:
            return
        if self.failure is not None:
            raise self.failure.with_traceback(None)  # shared by many callers
        if self.state is State.STEPPED_DOWN:
            address = self._doc.broker.address if self._doc and self._doc.broker else None
            raise NotBroker("this broker stepped down", address=address)
        raise ShuttingDown()

    async def _race(self, fut: asyncio.Future[None], timeout_s: float) -> None:
        sleeper = asyncio.ensure_future(self.clock.sleep(timeout_s))
        try:
            await asyncio.wait({fut, sleeper}, return_when=asyncio.FIRST_COMPLETED)
        finally:
            sleeper.cancel()

    # ------------------------------------------------------------------ acquisition

    async def _read(self) -> tuple[Document, str] | None:
        """Read and decode the document; None if it does not exist."""
        attempt = 0
        while True:
            try:
                blob: Blob = await self.storage.read(DOCUMENT_KEY)
            except NotFound:
                if self._seen_version:  # it existed a moment ago: never re-create it
                    raise DocumentGone("the queue document was deleted from outside") from None
                return None
            except StorageError as exc:
                self.counters.storage_errors += 1
                await self._backoff(attempt, exc)
                attempt += 1
                continue
            doc = decode(blob.data)
            if doc.version < self._seen_version:
                raise DocumentGone(
                    f"the queue document was replaced from outside (version {doc.version} "
                    f"after {self._seen_version}); not taking it over"
                )
            self._seen_version = doc.version
            return doc, blob.etag

    async def _await_vacancy(self) -> None:
        """Standby: watch the document (reads only) until its lease runs out."""
        while True:
            got = await self._read()
            if got is None:
                return
            doc, _ = got
            owner = doc.broker
            now = self.clock.now()
            if owner is None:
                return
            # Only the lease decides: an embedded broker has no address but is alive,
            # and a gracefully stopped one wrote an expired lease.
            expires = owner.lease_until.timestamp() + self.config.clock_skew_margin_s
            if expires <= now:
                log.info("lease expired; taking over", extra={"action": "takeover"})
                return
            await self.clock.sleep(min(self.config.poll_interval_s, max(0.01, expires - now)))

    async def _acquire(self) -> None:
        """Create or take over the document: epoch + 1, archive inherited done jobs."""
        archived: set[int] = set()  # versions whose archive object is known written
        while True:
            got = await self._read()
            if got is None:
                base, etag = Document.empty(), None
            else:
                base, etag = got
            inherited = by_version(base.jobs[i] for i in sorted(base.index.done))
            try:
                await self._archive_inherited(inherited, archived)
            except StorageError as exc:  # a 503 or a lost answer: back off, read again
                self.counters.storage_errors += 1
                await self._backoff(0, exc)
                continue
            now = self.clock.now()
            epoch = (base.broker.epoch if base.broker else 0) + 1
            owner = self._owner(now, epoch)
            ops: list[Op] = [RestartHeartbeats()]
            if inherited:
                ops.append(MarkArchived(tuple(sorted(inherited))))
            t = transition(base, ops, now, self.policy, owner=owner, in_place=True)
            data = encode(t.doc)
            try:
                new_etag = await self.storage.write(DOCUMENT_KEY, data, if_match=etag)
            except Conflict:
                continue  # someone else wrote first (bootstrap race or another broker)
            except StorageError as exc:
                self.counters.storage_errors += 1
                await self._backoff(0, exc)
                continue  # re-read and decide again
            self._doc, self._etag, self._epoch = t.doc, new_etag, epoch
            self._last_write = self.clock.monotonic()
            self.counters.commits += 1
            self._delete_payloads(t)
            return

    async def _archive_inherited(
        self, inherited: dict[int, list[StoredJob]], archived: set[int]
    ) -> None:
        """Write the archive objects of inherited done jobs, several at once."""

        async def one(version: int, jobs: list[StoredJob]) -> None:
            async with self._archive_slots:
                await write_archive(self.storage, jobs)
            archived.add(version)

        todo = [one(v, jobs) for v, jobs in inherited.items() if v not in archived]
        for outcome in await asyncio.gather(*todo, return_exceptions=True):
            if isinstance(outcome, BaseException):
                raise outcome

    def _owner(self, now: float, epoch: int | None = None) -> BrokerInfo:
        return BrokerInfo(
            id=self.id,
            address=None if self._closing else self.config.address,
            epoch=self._epoch if epoch is None else epoch,
            lease_until=to_datetime(now if self._closing else now + self.config.lease_s),
            heartbeat_timeout_s=self.config.heartbeat_timeout_s,
        )

    # ------------------------------------------------------------------ the commit loop

    async def _run(self) -> None:
        try:
            while True:
                if not self._pending:
                    if self._closing:
                        await self._final_commit()
                        return
                    await self._idle_wait()
                    if not self._pending and not self._due_for_commit():
                        continue
                batch, futures = self._take_batch()
                try:
                    await self._commit(batch, futures)
                except (asyncio.CancelledError, Exception):  # a hard stop mid-write, or a bug
                    unknown = MaybeCommitted("the broker stopped before confirming this op")
                    self._answer_error(futures, unknown)
                    raise
                if self.state in (State.STEPPED_DOWN, State.FAILED):
                    return
        except asyncio.CancelledError:
            raise
        except OsqueueError as exc:
            self._fail(exc)
        except Exception as exc:  # a bug: stop loudly, and leave no op waiting forever
            log.exception("broker commit loop crashed", extra={"action": "fail"})
            self._fail(BrokerUnavailable(f"the broker stopped on an internal error: {exc!r}"))
        finally:
            if self._timer is not None:
                self._timer.cancel()
                self._timer = None
            if self.state is State.SERVING:
                self.state = State.STOPPED
            self._done.set()

    def _take_batch(self) -> tuple[list[Op], _Futures]:
        """The next commit's ops and their futures: the oldest ``max_batch_ops``."""
        n = self._max_batch
        if len(self._pending) <= n:  # the whole backlog is one batch
            batch, futures = self._pending, self._futures
            self._pending, self._futures = [], []
        else:
            batch, futures = self._pending[:n], self._futures[:n]
            del self._pending[:n], self._futures[:n]
        return batch, futures

    def _due_for_commit(self) -> bool:
        """An idle commit is due: lease renewal, or a sweep someone is waiting on."""
        if self.clock.monotonic() - self._last_write >= self._renew_s:
            return True
        if self._waiters and self._doc is not None:
            wake = next_wakeup(self._doc, self.policy)
            return wake is not None and wake <= self.clock.now()
        return False

    def _poke(self) -> None:
        """Wake the commit loop if it idles."""
        waker, self._waker = self._waker, None
        if waker is not None and not waker.done():
            waker.set_result(None)

    def _timer_fired(self) -> None:
        self._timer = None
        self._poke()

    def _arm_timer(self, timeout: float, mono: float) -> None:
        """Make sure the loop wakes within ``timeout`` of ``mono`` (the clock's
        monotonic time now).  An earlier timer is kept: it wakes the loop early
        once, and the loop arms again."""
        at = mono + timeout
        if self._timer is not None:
            if self._timer_at <= at:
                return
            self._timer.cancel()
        self._timer = None
        call_later = getattr(self.clock, "call_later", None)
        if call_later is not None:
            self._timer = call_later(timeout, self._timer_fired)
        else:  # a clock with sleep only
            sleeper = asyncio.ensure_future(self.clock.sleep(timeout))
            sleeper.add_done_callback(lambda f: None if f.cancelled() else self._timer_fired())
            self._timer = sleeper
        self._timer_at = at

    async def _idle_wait(self) -> None:
        if self._waiters:
            self._wake_waiters()
        if self._pending or self._closing:
            return
        mono = self.clock.monotonic()
        timeout = self._renew_s - (mono - self._last_write)
        if self._waiters and self._doc is not None:
            wake = next_wakeup(self._doc, self.policy)
            if wake is not None:
                timeout = min(timeout, wake - self.clock.now())
        if timeout <= 0:
            return
        self._arm_timer(timeout, mono)
        loop = self._loop or asyncio.get_running_loop()
        waker = self._waker = loop.create_future()
        try:
            await waker
        finally:
            self._waker = None
        if self._waiters:
            self._wake_waiters()

    async def _commit(self, batch: list[Op], futures: _Futures) -> None:
        internal = self._internal
        if internal:
            self._internal = []
            ops = batch + internal
        else:
            ops = batch
        maybe = False
        attempt = 0
        sent: list[tuple[bytes, Transition]] = []  # every attempt; a late one may land
        while True:
            assert self._doc is not None
            base_version = self._doc.version
            now = self.clock.now()
            t = transition(self._doc, ops, now, self.policy, owner=self._owner(now), in_place=True)
            data = encode(t.doc)
            sent.append((data, t))
            try:
                etag = await self.storage.write(DOCUMENT_KEY, data, if_match=self._etag)
            except Conflict:
                self.counters.conflicts += 1
            except StorageError as exc:
                self.counters.storage_errors += 1
                maybe = True
                await self._backoff(attempt, exc)
                attempt += 1
            else:
                self._committed(t, etag, futures, len(data))
                return
            verdict = await self._resolve(t.doc.version, base_version, maybe)
            if verdict is None:  # stepped down or failed; the batch was answered
                self._answer_error(futures, self._stop_error(maybe))
                return
            if isinstance(verdict, Blob):  # one of our attempts landed after all: which?
                landed = next((tx for sent_data, tx in sent if sent_data == verdict.data), None)
                if landed is None:
                    self._fail(DocumentGone("our version was replaced from outside; stopping"))
                    self._answer_error(futures, self._stop_error(maybe))
                    return
                self._committed(landed, verdict.etag, futures, len(verdict.data))
                return
            self._doc, self._etag = verdict  # re-apply the batch on what is stored

    async def _resolve(
        self, new_version: int, base_version: int, maybe: bool
    ) -> Blob | tuple[Document, str] | None:
        """After a failed write: our landed write, the doc to re-apply on, or None."""
        attempt = 0
        while True:
            try:
                blob = await self.storage.read(DOCUMENT_KEY)
                stored = decode(blob.data)
                break
            except NotFound:
                self._fail(DocumentGone("the queue document was deleted from outside"))
                return None
            except CorruptDocument as exc:
                self._fail(exc)
                return None
            except StorageError as exc:
                self.counters.storage_errors += 1
                await self._backoff(attempt, exc)
                attempt += 1
        owner = stored.broker
        mine = owner is not None and owner.id == self.id and owner.epoch == self._epoch
        if mine and stored.version == new_version:
            return blob  # our own write landed (retry echo, lost answer, late attempt)
        if not mine and stored.version <= base_version:  # no takeover goes back in time
            self._fail(
                DocumentGone(
                    f"the queue document was replaced from outside (version {stored.version} "
                    f"after {base_version}); stopping without overwriting it"
                )
            )
            return None
        if not mine:
            self._step_down(stored, maybe)
            return None
        if stored.version == base_version:
            return stored, blob.etag
        self._fail(
            DocumentGone(
                f"the queue document was replaced from outside (version {stored.version}, "
                f"expected {base_version} or {new_version}); stopping without overwriting it"
            )
        )
        return None

    def _committed(self, t: Transition, etag: str, futures: _Futures, size: int) -> None:
        self._doc, self._etag = t.doc, etag
        self._last_write = self.clock.monotonic()
        c = self.counters
        c.commits += 1
        c.ops += len(futures)
        c.write_bytes += size
        if len(c.batch_sizes) < 100_000:
            c.batch_sizes.append(len(futures))
        for fut, result in zip(futures, t.results, strict=False):
            if not fut.done():
                fut.set_result(result)
        if t.completed:
            self._archive_todo.append(t.completed)
            self._wake_archiver()
        self._delete_payloads(t)
        if self._waiters:
            self._wake_waiters()

    def _delete_payloads(self, t: Transition) -> None:
        """Delete the payload objects of the jobs that left the document."""
        refs = self.payloads.refs_of(t.removed) if t.removed else None
        if refs:
            self._spawn(self.payloads.discard(refs))

    # ------------------------------------------------------------------ activity log

    async def _stats_logger(self, interval_s: float) -> None:
        """Log what the broker did in each ``interval_s`` (INFO, with the numbers as
        structured fields), so an operator sees its pace and its trouble."""
        c = self.counters

        def totals() -> tuple[int, ...]:
            return (c.commits, c.ops, c.conflicts, c.storage_errors, c.archives, c.write_bytes)

        last = totals()
        while True:
            await self.clock.sleep(interval_s)
            if self.state is not State.SERVING or self._doc is None:
                return
            now = totals()
            commits, ops, conflicts, errors, archives, written = (
                a - b for a, b in zip(now, last, strict=True)
            )
            last = now
            doc = self._doc
            log.info(
                "%d commits (%.1f/s), %d ops (%.1f per commit), %d conflicts, "
                "%d storage errors, %d archive objects; %d jobs, document ~%d bytes",
                commits,
                commits / interval_s,
                ops,
                ops / commits if commits else 0.0,
                conflicts,
                errors,
                archives,
                len(doc.jobs),
                doc.size_bytes(),
                extra={
                    "action": "stats",
                    "broker": self.id,
                    "interval_s": interval_s,
                    "commits": commits,
                    "ops": ops,
                    "conflicts": conflicts,
                    "storage_errors": errors,
                    "archives": archives,
                    "write_bytes": written,
                    "jobs": len(doc.jobs),
                    "pending_ops": len(self._pending),
                },
            )

    # ------------------------------------------------------------------ payload sweep

    async def _payload_sweeper(self, interval_s: float) -> None:
        """Delete payload objects that no job references, every ``interval_s``.

        They are left behind by a push whose broker died between the upload and
        the commit (or whose outcome stayed unknown), and by a delete that failed
        after the job left.  An object is deleted only if two sweeps
        ``interval_s`` apart both found it unreferenced, no push of this broker
        is using it, and this broker's lease has at least half its length left
        (so no other broker can be committing).  Every upload has a key of its
        own, so a push retried elsewhere never writes an object a sweep deletes.
        """
        suspects: set[str] = set()
        while True:
            await self.clock.sleep(interval_s)
            if self.state is not State.SERVING:
                return
            try:
                suspects, deleted = await self.payloads.sweep(
                    suspects, lambda: self._doc, self._may_sweep
                )
                self.counters.payloads_swept += deleted
            except StorageError as exc:
                self.counters.storage_errors += 1
                log.warning(
                    "payload sweep failed; trying again in %gs: %s",
                    interval_s,
                    exc,
                    extra={"action": "sweep"},
                )

    def _may_sweep(self) -> bool:
        doc = self._doc
        if self.state is not State.SERVING or self._closing or doc is None:
            return False
        owner = doc.broker
        if owner is None or owner.id != self.id:
            return False
        return owner.lease_until.timestamp() - self.clock.now() > self.config.lease_s / 2

    # ------------------------------------------------------------------ archive

    def _wake_archiver(self) -> None:
        """Hand the archive object just queued to a parked archiver, or start one."""
        while self._archivers_idle:
            waker = self._archivers_idle.pop()
            if not waker.done():
                waker.set_result(None)
                return
        if self._archivers < self.config.archive_concurrency:
            self._archivers += 1
            self._spawn(self._archiver(), "osqueue-archive")
        # else: every archiver is writing; one takes this object when it is done

    async def _archiver(self) -> None:
        """Write due archive objects one at a time; park while none is due.

        Archivers live as long as the broker, so a commit that completes jobs
        costs an append and a wake-up, not a new task.
        """
        todo = self._archive_todo
        loop = self._loop or asyncio.get_running_loop()
        try:
            while True:
                if not todo:
                    if self._archive_busy == 0:
                        self._signal_archive_drained()
                    waker = loop.create_future()
                    self._archivers_idle.append(waker)
                    await waker
                    continue
                jobs = todo.popleft()
                self._archive_busy += 1
                try:
                    if len(jobs) > _RENDER_LATER:
                        # Yield once: the next commit (already woken by its ops) starts
                        # its write first, and this object is rendered while it is in flight.
                        await asyncio.sleep(0)
                    await self._archive(jobs)
                finally:
                    self._archive_busy -= 1
        finally:  # cancelled with the broker, or a bug (logged by _side_done)
            self._archivers -= 1
            if not todo and self._archive_busy == 0:
                self._signal_archive_drained()

    async def _archive(self, jobs: list[StoredJob]) -> None:
        attempt = 0
        while True:
            try:
                version = await write_archive(self.storage, jobs)
                break
            except StorageError as exc:
                await self._backoff(attempt, exc)
                attempt += 1
        self.counters.archives += 1
        self._internal.append(MarkArchived((version,)))

    def _signal_archive_drained(self) -> None:
        drained, self._archive_drained = self._archive_drained, None
        if drained is not None and not drained.done():
            drained.set_result(None)

    async def _archive_drain(self, timeout: float) -> None:
        """Wait (at most ``timeout``) until every due archive object is written."""
        if not self._archive_todo and self._archive_busy == 0:
            return
        loop = self._loop or asyncio.get_running_loop()
        drained = self._archive_drained = loop.create_future()
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(asyncio.shield(drained), timeout)

    async def _final_commit(self) -> None:
        """Graceful stop: wait for archive writes, then release the lease in one write."""
        await self._archive_drain(self.config.drain_timeout_s / 2)
        merged = tuple(
            v for op in self._internal if isinstance(op, MarkArchived) for v in op.versions
        )
        self._internal = [MarkArchived(merged)] if merged else []
        # Shielded: a drain timeout cancels the loop, and only then this write
        # (with the side tasks), so nothing of the broker outlives stop().
        await asyncio.shield(self._spawn(self._commit([], []), "osqueue-final-commit"))

    # ------------------------------------------------------------------ endings

    def _stop_error(self, maybe: bool) -> OsqueueError:
        if self.failure is not None:
            return self.failure
        address = self._doc.broker.address if self._doc and self._doc.broker else None
        note = " (the op may have been applied before the takeover)" if maybe else ""
        return NotBroker(
            f"another broker owns the queue now{note}", address=address, maybe_committed=maybe
        )

    def _step_down(self, stored: Document, maybe: bool) -> None:
        self._doc = stored
        self.state = State.STEPPED_DOWN
        log.warning(
            "another broker owns the document; stepping down",
            extra={"action": "step-down", "broker": self.id, "owner": stored.broker},
        )
        err = self._stop_error(maybe)
        self._fail_pending(err)
        self._release_waiters()

    def _fail(self, exc: OsqueueError) -> None:
        self.failure = exc
        self.state = State.FAILED
        log.error("broker stopped: %s", exc, extra={"action": "fail", "broker": self.id})
        self._fail_pending(exc)
        self._release_waiters()

    def _fail_pending(self, exc: OsqueueError) -> None:
        futures, self._futures = self._futures, []
        self._pending = []
        self._answer_error(futures, exc)

    @staticmethod
    def _answer_error(futures: _Futures, exc: OsqueueError) -> None:
        for fut in futures:
            if not fut.done():
                fut.set_result(exc)

    # ------------------------------------------------------------------ waiters

    def _wake_waiters(self) -> None:
        if not self._waiters or self._doc is None:
            return
        now = self.clock.now()
        doc = self._doc
        for w in list(self._waiters):
            if claimable(doc, w.queues, now) and not w.future.done():
                w.future.set_result(None)

    def _release_waiters(self) -> None:
        for w in self._waiters:
            if not w.future.done():
                w.future.set_result(None)

    # ------------------------------------------------------------------ helpers

    async def _backoff(self, attempt: int, exc: BaseException) -> None:
        delay = min(self.config.retry_cap_s, self.config.retry_base_s * 2.0 ** min(attempt, 20))
        log.warning(
            "storage error; retrying in %.2fs: %s",
            delay,
            exc,
            extra={"action": "retry", "attempt": attempt},
        )
        await self.clock.sleep(delay)

    def _spawn(
        self, coro: Coroutine[Any, Any, None], name: str = "osqueue-side"
    ) -> asyncio.Task[None]:
        """Run ``coro`` beside the commit loop; a stop cancels it and waits for it."""
        task = asyncio.ensure_future(coro)
        task.set_name(f"{name}-{id(task)}")
        self._side.add(task)
        task.add_done_callback(self._side_done)
        return task

    def _side_done(self, task: asyncio.Task[None]) -> None:
        self._side.discard(task)
        if not task.cancelled() and task.exception() is not None:
            log.error("broker side task failed", exc_info=task.exception())
