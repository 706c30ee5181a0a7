"""The broker's hold on the queue document: reads, standby, takeover, and what a
failed write means."""

from __future__ import annotations

import logging
import math
from typing import TYPE_CHECKING, NamedTuple

from osqueue.broker.archive.objects import by_version
from osqueue.broker.config import BrokerConfig
from osqueue.broker.core.retry import StorageRetry
from osqueue.broker.lease.watch import LeaseWatch
from osqueue.broker.observe.counters import BrokerCounters
from osqueue.clock import Clock
from osqueue.errors import Conflict, CorruptDocument, DocumentGone, NotFound, StorageError
from osqueue.state import (
    DOCUMENT_KEY,
    BrokerInfo,
    Document,
    MarkArchived,
    Op,
    RestartHeartbeats,
    Transition,
    decode,
    encode,
    new_queue_id,
    to_datetime,
    transition,
)
from osqueue.storage.port import Blob, Storage

if TYPE_CHECKING:
    from osqueue.broker.archive.writer import Archiver

log = logging.getLogger(__name__)


#: how long (monotonic seconds) the owner a commit names is reused by the next
#: commits: a busy broker's commits within a millisecond name the same one
OWNER_REUSE_S = 0.001


class Reapply(NamedTuple):
    """The write lost to nothing but a stale ETag: apply the batch again on this."""

    doc: Document
    etag: str


class StepDown(NamedTuple):
    """Another broker owns the document now (``stored`` names it)."""

    stored: Document


#: What a failed write turned out to be: one of our writes that landed after all
#: (the stored blob), a batch to re-apply, a step-down, or the error that stops
#: the broker (the document was deleted, replaced from outside, or is corrupt).
Verdict = Blob | Reapply | StepDown | DocumentGone | CorruptDocument


class Lease:
    """The broker's hold on the queue document.

    Owns the last committed version (:attr:`doc`), its ETag, this broker's
    epoch and the times of its last write (renewals count from it), all on the
    clock's monotonic time.  Reads the document, never accepting one that
    vanished or went back in version; as a standby, waits for the owner's lease
    to run out as a :class:`~osqueue.broker.lease.watch.LeaseWatch` judges it
    (no new version seen for the lease's length); takes the document over
    (epoch + 1, the archive objects of inherited done jobs written first, every
    claim's heartbeat clock restarted); and after a write that failed, reads
    back what is stored and says what it means (:meth:`resolve`).
    """

    def __init__(
        self,
        storage: Storage,
        config: BrokerConfig,
        clock: Clock,
        *,
        broker_id: str,
        counters: BrokerCounters,
        retry: StorageRetry,
    ) -> None:
        self.broker_id = broker_id
        self._storage = storage
        self._config = config
        self._clock = clock
        self._counters = counters
        self._retry = retry
        self._policy = config.policy()
        self.doc: Document | None = None
        self.etag: str | None = None
        self.epoch = 0
        #: the clock's monotonic time of the last write of the document
        self.written_at = 0.0
        #: ... and when that write was sent (no observer can have seen it earlier)
        self.sent_at = 0.0
        self._seen_version = 0  # the highest version read: a document never goes back
        self._watch = LeaseWatch(config.clock_skew_margin_s)
        #: the last :meth:`owner` made (handed again while nothing in it changed)
        self._owner: BrokerInfo | None = None
        #: when :attr:`_owner` was made for an open lease (monotonic; -inf: not one)
        self._owner_mono = -math.inf

    def wrote(self, doc: Document, etag: str, sent_at: float, *, at: float | None = None) -> None:
        """``doc`` is stored now (``at``, if the caller has just read the monotonic
        clock), with ``etag``, by a write sent at ``sent_at`` (monotonic)."""
        self.doc, self.etag = doc, etag
        self.written_at = self._clock.monotonic() if at is None else at
        self.sent_at = sent_at

    @property
    def owner_address(self) -> str | None:
        """The address of the broker the held document names (after a step-down: the
        new owner's)."""
        doc = self.doc
        return doc.broker.address if doc and doc.broker else None

    def owner(
        self, now: float, closing: bool, epoch: int | None = None, *, mono: float | None = None
    ) -> BrokerInfo:
        """This broker as the next version names it: with its address and a lease
        renewed from ``now``; ``closing``: no address, and the lease released
        (length 0, ending now).  ``mono``: the monotonic clock now, if the caller
        has just read it.

        Within :data:`OWNER_REUSE_S` (monotonic) of the last open lease's owner,
        that one is given again: its ``lease_until`` is a commit's of at most a
        millisecond before (another broker judges the lease by its own monotonic
        clock and the versions it sees, not by this time)."""
        if mono is not None and not closing and epoch is None:
            last = self._owner
            if (
                last is not None
                and mono - self._owner_mono < OWNER_REUSE_S
                and last.epoch == self.epoch
                and not self._counters.workers.news
            ):
                return last
        lease_s = 0.0 if closing else self._config.lease_s
        lease_until = to_datetime(now + lease_s)  # the same object within a millisecond
        epoch = self.epoch if epoch is None else epoch
        address = None if closing else self._config.address
        if mono is None:
            mono = self._clock.monotonic()
        perf = None if closing else self._counters.window.perf(mono)
        workers = () if closing else self._counters.workers.summary(now)
        self._owner_mono = -math.inf if closing else mono
        last = self._owner
        if (
            last is not None
            and last.lease_until is lease_until
            and last.perf is perf
            and last.workers is workers
            and last.epoch == epoch
            and last.lease_s == lease_s
            and last.address == address
        ):
            return last  # the same value: the document's header keeps its encoding
        self._owner = last = BrokerInfo(
            id=self.broker_id,
            address=address,
            epoch=epoch,
            lease_until=lease_until,
            lease_s=lease_s,
            heartbeat_timeout_s=self._config.heartbeat_timeout_s,
            perf=perf,
            workers=workers,
        )
        return last

    def fresh(self) -> bool:
        """This broker owns the held document and its lease has more than half its
        length left (so no other broker can be committing).  Counted on the
        monotonic clock from when the last write was sent: no observer saw that
        version earlier, and none takes over before a whole lease after it."""
        doc = self.doc
        owner = doc.broker if doc is not None else None
        if owner is None or owner.id != self.broker_id:
            return False
        return self._clock.monotonic() - self.sent_at < self._config.lease_s / 2

    async def read(self) -> tuple[Document, str] | None:
        """Read and decode the document; None if it does not exist."""
        attempt = 0
        while True:
            try:
                blob: Blob = await self._storage.read(DOCUMENT_KEY)
            except NotFound:
                if self._seen_version:  # it existed a moment ago: never re-create it
                    raise DocumentGone("the queue document was deleted from outside") from None
                return None
            except StorageError as exc:
                self._counters.storage_error("document_read")
                await self._retry.wait(attempt, exc)
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

    async def await_vacancy(self) -> None:
        """Standby: watch the document (reads only) until its lease runs out: no
        new version seen for the lease's length (plus the margin) on this
        broker's monotonic clock, or a lease released by a graceful stop.  The
        address does not decide (an embedded broker has none but is alive), nor
        does ``lease_until`` (the writer's wall clock)."""
        while True:
            left = await self._watch_once()
            if left is None:
                log.info("lease run out; taking over", extra={"action": "takeover"})
                return
            await self._clock.sleep(min(self._config.poll_interval_s, max(0.01, left)))

    async def _watch_once(self) -> float | None:
        """Read the document and show it to the watch: seconds until the owner's
        lease runs out, None if it has (or there is no owner, or no document)."""
        got = await self.read()
        if got is None:
            return None
        return self._left(got[0]) or None

    def _left(self, doc: Document) -> float:
        clock = self._clock
        return self._watch.see(doc.version, doc.broker, clock.monotonic(), clock.now())

    async def acquire(self, archiver: Archiver, *, patient: bool = False) -> Transition:
        """Create or take over the document: epoch + 1, archive inherited done jobs.
        Returns the takeover's commit (its removed jobs' payload objects are due
        for deletion).

        A takeover write that fails is decided by reading again: our own write
        that landed after all (a lost answer, a client library's retry) is
        adopted, not taken over a second time; and a ``patient`` broker (a
        standby) that finds another broker's live lease there (it lost a race
        for the expired one) goes back to waiting for that lease to run out
        instead of deposing the winner."""
        archived: set[int] = set()  # versions whose archive object is known written
        # the last takeover write sent: its bytes, commit, epoch, and when (monotonic)
        sent: tuple[bytes, Transition, int, float] | None = None
        queue_id = new_queue_id()  # for a document without one; the same on every retry
        while True:
            got = await self.read()
            if sent is not None and got is not None:
                data, t, epoch, sent_at = sent
                if self._landed(got[0], epoch, t.doc.version):
                    try:
                        blob = await self._storage.read(DOCUMENT_KEY)
                    except StorageError as exc:  # a 503: back off, read again
                        self._counters.storage_error("document_read")
                        await self._retry.wait(0, exc)
                        continue
                    if blob.data == data:  # our own takeover landed: adopt it
                        return self._took_over(t, blob.etag, epoch, sent_at)
            if patient and got is not None and self._held_by_another(got[0]):
                # Another standby took the expired lease first (before our read, or
                # while our write was on its way): wait for its lease, never depose it.
                log.info(
                    "another broker took the queue over first; standing by again",
                    extra={"action": "standby", "owner": got[0].broker},
                )
                await self.await_vacancy()
                sent = None
                continue
            base, etag = got if got is not None else (Document.empty(), None)
            # A new document's incarnation starts here (``base`` is fresh from decode or
            # new, its header never measured: setting the field leaves no stale size).
            incarnation = base.queue_id = base.queue_id or queue_id
            inherited = by_version(base.jobs[i] for i in sorted(base.index.done))
            try:
                await archiver.write_inherited(inherited, archived, incarnation)
            except StorageError as exc:  # a 503 or a lost answer: back off, read again
                self._counters.storage_error("archive_write")
                await self._retry.wait(0, exc)
                continue
            now = self._clock.now()
            epoch = (base.broker.epoch if base.broker else 0) + 1
            ops: list[Op] = [RestartHeartbeats()]
            if inherited:
                ops.append(MarkArchived(tuple(sorted(inherited))))
            owner = self.owner(now, closing=False, epoch=epoch)
            t = transition(base, ops, now, self._policy, owner=owner, in_place=True)
            data = encode(t.doc)
            sent = (data, t, epoch, self._clock.monotonic())
            try:
                new_etag = await self._storage.write(DOCUMENT_KEY, data, if_match=etag)
            except Conflict:
                continue  # someone else wrote first (bootstrap race, another broker, an echo)
            except StorageError as exc:
                self._counters.storage_error("document_write")
                await self._retry.wait(0, exc)
                continue  # re-read and decide again
            return self._took_over(t, new_etag, epoch, sent[3])

    def _landed(self, stored: Document, epoch: int, version: int) -> bool:
        owner = stored.broker
        return (
            owner is not None
            and owner.id == self.broker_id
            and owner.epoch == epoch
            and stored.version == version
        )

    def _held_by_another(self, stored: Document) -> bool:
        """Another broker's lease on ``stored`` has not run out, as the watch judges
        it (a new version since the one it found vacant starts a new lease)."""
        owner = stored.broker
        if owner is None or owner.id == self.broker_id:
            return False
        return self._left(stored) > 0

    def _took_over(self, t: Transition, etag: str, epoch: int, sent_at: float) -> Transition:
        self.epoch = epoch
        self.wrote(t.doc, etag, sent_at)
        self._counters.commits += 1
        return t

    async def resolve(self, new_version: int, base_version: int) -> Verdict:
        """After a failed write of ``new_version`` on ``base_version``: read what is
        stored and say what it means."""
        attempt = 0
        while True:
            try:
                blob = await self._storage.read(DOCUMENT_KEY)
                stored = decode(blob.data)
                break
            except NotFound:
                return DocumentGone("the queue document was deleted from outside")
            except CorruptDocument as exc:
                return exc
            except StorageError as exc:
                self._counters.storage_error("document_read")
                await self._retry.wait(attempt, exc)
                attempt += 1
        owner = stored.broker
        mine = owner is not None and owner.id == self.broker_id and owner.epoch == self.epoch
        if mine and stored.version == new_version:
            return blob  # our own write landed (retry echo, lost answer, late attempt)
        if not mine and stored.version <= base_version:  # no takeover goes back in time
            return DocumentGone(
                f"the queue document was replaced from outside (version {stored.version} "
                f"after {base_version}); stopping without overwriting it"
            )
        if not mine:
            return StepDown(stored)
        if stored.version == base_version:
            return Reapply(stored, blob.etag)
        return DocumentGone(
            f"the queue document was replaced from outside (version {stored.version}, "
            f"expected {base_version} or {new_version}); stopping without overwriting it"
        )
