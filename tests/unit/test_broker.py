"""The broker: group commit, conflicts and ambiguity, lease and takeover, archive.

Tests that take the ``backend`` fixture run on every storage backend
(memory, file, moto's S3, Azurite and the GCS XML-API shim); the others on memory.
"""

from __future__ import annotations

import asyncio
import logging
from collections import Counter, deque
from collections.abc import AsyncIterator, Awaitable
from pathlib import Path
from typing import TypeVar

import msgspec
import pytest
from backends import BACKENDS_WITH_GCS, backend_url

import osqueue
from osqueue.broker.core.broker import State
from osqueue.clock import ManualClock
from osqueue.errors import (
    CorruptDocument,
    DocumentGone,
    InvalidInput,
    LeaseLost,
    NotBroker,
    OutcomeUnknown,
    ShuttingDown,
    StorageError,
)
from osqueue.state import DOCUMENT_KEY, ClaimOp, Push, decode, encode, make
from osqueue.storage import FileStorage, MemoryStorage, from_url
from osqueue.storage.port import Blob, Capabilities, Storage

T = TypeVar("T")


class Scripted:
    """A storage wrapper whose next document writes fail the way a test says.

    ``"error"``: fails before the write applies; ``"lost"``: the write applies
    but the caller gets OutcomeUnknown; ``"echo"``: the write applies but the
    caller gets Conflict (a client library's internal retry); ``"gate"``: the
    write waits for ``gate`` to be set.  It counts the calls in flight on the
    inner store, so a test on a real backend can wait until the broker's I/O
    is done (``idle``) before it looks.
    """

    def __init__(self, inner: Storage) -> None:
        self.inner = inner
        self.script: deque[str] = deque()
        self.writes = 0
        self.gate = asyncio.Event()
        self.gate.set()
        #: an upload lands, then waits for this before its caller hears back
        self.put_gate = asyncio.Event()
        self.put_gate.set()
        self.list_errors = 0
        #: keys deleted so far; ``deleted(keys)`` waits for them
        self.deletes: set[str] = set()
        self._deleting = asyncio.Condition()
        self.in_flight = 0
        self._idle = asyncio.Event()
        self._idle.set()

    async def _io(self, call: Awaitable[T]) -> T:
        self.in_flight += 1
        self._idle.clear()
        try:
            return await call
        finally:
            self.in_flight -= 1
            if not self.in_flight:
                self._idle.set()

    async def idle(self) -> None:
        """Wait until no call on the inner store is in flight."""
        await self._idle.wait()

    @property
    def url(self) -> str:
        return self.inner.url

    @property
    def capabilities(self) -> Capabilities:
        return self.inner.capabilities

    async def read(self, key: str) -> Blob:
        return await self._io(self.inner.read(key))

    async def write(self, key: str, data: bytes, *, if_match: str | None) -> str:
        action = self.script.popleft() if key == DOCUMENT_KEY and self.script else None
        if key == DOCUMENT_KEY:
            await self.gate.wait()
        if action == "error":
            raise StorageError("injected: 503 before apply")
        etag = await self._io(self.inner.write(key, data, if_match=if_match))
        self.writes += key == DOCUMENT_KEY
        if action == "lost":
            raise OutcomeUnknown("injected: connection reset after send")
        if action == "echo":
            raise osqueue.Conflict("injected: 412 for our own retried write")
        return etag

    async def put(self, key: str, data: bytes) -> None:
        await self._io(self.inner.put(key, data))
        await self.put_gate.wait()

    async def get(self, key: str) -> bytes:
        return await self._io(self.inner.get(key))

    async def delete(self, key: str) -> None:
        await self._io(self.inner.delete(key))
        async with self._deleting:
            self.deletes.add(key)
            self._deleting.notify_all()

    async def deleted(self, keys: list[str], timeout_s: float = 10.0) -> None:
        """Wait until every key in ``keys`` was deleted (a broker deletes payload
        objects in a side task, after the commit that drops their job)."""
        async with self._deleting:
            await asyncio.wait_for(
                self._deleting.wait_for(lambda: set(keys) <= self.deletes), timeout_s
            )

    async def list(self, prefix: str = "") -> list[str]:
        if self.list_errors:
            self.list_errors -= 1
            raise StorageError("injected: 503 on list")
        return await self._io(self.inner.list(prefix))

    async def close(self) -> None:
        await self.inner.close()


@pytest.fixture(params=BACKENDS_WITH_GCS)
async def backend(request: pytest.FixtureRequest, tmp_path: Path) -> AsyncIterator[Storage]:
    """A fresh store on each backend."""
    with backend_url(request, request.param, tmp_path, "broker") as url:
        store = from_url(url)
        try:
            yield store
        finally:
            await store.close()


def config(**kw: object) -> osqueue.BrokerConfig:
    base: dict[str, object] = {"lease_s": 10.0, "heartbeat_timeout_s": 30.0, "retry_base_s": 0.001}
    base.update(kw)
    return osqueue.BrokerConfig(**base)  # type: ignore[arg-type]


async def stored(storage: Storage) -> osqueue.state.Document:
    return decode((await storage.read(DOCUMENT_KEY)).data)


async def test_concurrent_pushes_share_few_writes_and_all_succeed(backend: Storage) -> None:
    store = Scripted(backend)
    async with osqueue.Broker(store, config()) as broker:
        q = broker.client()
        store.gate.clear()
        first = asyncio.ensure_future(q.push(b"first"))
        await asyncio.sleep(0)
        rest = [asyncio.ensure_future(q.push(b"%d" % i)) for i in range(499)]
        before = broker.commits
        store.gate.set()
        ids = await asyncio.gather(first, *rest)
        assert len(set(ids)) == 500
        assert broker.commits - before <= 3
        doc = await stored(store)
        assert {j.id for j in doc.jobs.values()} == set(ids)


async def test_a_bad_op_fails_alone_in_its_batch() -> None:
    async with osqueue.Broker(MemoryStorage(), config()) as broker:
        q = broker.client()
        results = await asyncio.gather(
            q.push(b"a"), q.push(b"b", queue="no spaces"), q.push(b"c"), return_exceptions=True
        )
        assert isinstance(results[1], InvalidInput)
        assert results[1].field == "queue"
        assert isinstance(results[0], str)
        assert isinstance(results[2], str)
        assert (await q.stats()).depth == 2


async def test_lost_response_is_resolved_as_committed_without_duplicates(backend: Storage) -> None:
    store = Scripted(backend)
    async with osqueue.Broker(store, config()) as broker:
        store.script.extend(["lost"])
        job_id = await broker.client().push(b"x", id="lost-1")
        doc = await stored(store)
        assert list(doc.jobs) == [job_id]
        assert doc.version == broker.document.version


async def test_retry_echo_conflict_is_recognised_as_our_own_write(backend: Storage) -> None:
    store = Scripted(backend)
    async with osqueue.Broker(store, config()) as broker:
        store.script.extend(["echo"])
        await broker.client().push(b"x", id="echo-1")
        assert broker.state is State.SERVING
        assert list((await stored(store)).jobs) == ["echo-1"]


async def test_error_before_apply_is_retried_and_applied_once(backend: Storage) -> None:
    store = Scripted(backend)
    async with osqueue.Broker(store, config()) as broker:
        store.script.extend(["error", "error"])
        await broker.client().push(b"x", id="err-1")
        doc = await stored(store)
        assert list(doc.jobs) == ["err-1"]
        assert doc.stats.pushed == 1


async def test_two_brokers_one_steps_down_and_no_acknowledged_push_is_lost(
    backend: Storage,
) -> None:
    store = backend
    acked: list[str] = []
    a = osqueue.Broker(store, config())
    await a.start()
    for i in range(5):
        acked.append(await a.client().push(b"a", id=f"a{i}"))
    b = osqueue.Broker(store, config())
    await b.start()  # takes over: epoch + 1
    assert b.epoch == a.epoch + 1
    for i in range(5):
        acked.append(await b.client().push(b"b", id=f"b{i}"))
    with pytest.raises(NotBroker):
        await a.client().push(b"lost?", id="a-late")
    assert a.state is State.STEPPED_DOWN
    doc = await stored(store)
    assert set(acked) <= set(doc.jobs)
    assert "a-late" not in doc.jobs
    await b.stop()
    await a.stop()


async def test_standby_takes_over_after_the_lease_runs_out(backend: Storage) -> None:
    clock = ManualClock()
    store = backend
    active = osqueue.Broker(store, config(address="10.0.0.1:7070"), clock=clock)
    await active.start()
    job_id = await active.client().push(b"x")
    standby = osqueue.Broker(store, config(address="10.0.0.2:7070"), clock=clock, standby=True)
    starting = asyncio.ensure_future(standby.start())
    for _ in range(5):
        await asyncio.sleep(0)
    assert not starting.done()
    active.tasks()[0].cancel()  # the commit loop: the active broker dies silently
    while not starting.done():
        clock.advance(1.0)
        for _ in range(20):
            await asyncio.sleep(0)
    await starting
    doc = await stored(store)
    assert doc.broker is not None
    assert doc.broker.address == "10.0.0.2:7070"
    assert job_id in doc.jobs
    await standby.stop()


class _Held(Scripted):
    """Document writes wait for ``gate``; ``waiting`` is set once one does."""

    def __init__(self, inner: Storage) -> None:
        super().__init__(inner)
        self.waiting = asyncio.Event()

    async def write(self, key: str, data: bytes, *, if_match: str | None) -> str:
        if key == DOCUMENT_KEY and not self.gate.is_set():
            self.waiting.set()
        return await super().write(key, data, if_match=if_match)


async def _turns(n: int = 20) -> None:
    for _ in range(n):
        await asyncio.sleep(0)


async def _dead_active(store: Storage, clock: ManualClock) -> osqueue.Broker:
    """A broker that served, then died silently (its lease left to run out)."""
    active = osqueue.Broker(store, config(address="10.0.0.1:7070"), clock=clock)
    await active.start()
    await active.client().push(b"x")
    active.tasks()[0].cancel()
    await _turns()
    return active


async def test_a_standby_that_loses_the_race_for_a_lease_stands_by_again() -> None:
    """Two brokers race for an expired lease: the one whose takeover write loses
    finds the winner's live lease and waits for it, instead of deposing it."""
    clock, store = ManualClock(), MemoryStorage()
    active = await _dead_active(store, clock)
    held = _Held(store)
    held.gate.clear()
    standby = osqueue.Broker(held, config(address="10.0.0.2:7070"), clock=clock, standby=True)
    starting = asyncio.ensure_future(standby.start())
    while not held.waiting.is_set():  # the lease runs out; its takeover write waits
        clock.advance(1.0)
        await _turns()
    winner = osqueue.Broker(store, config(address="10.0.0.3:7070"), clock=clock)
    await winner.start()  # takes over first, with a fresh lease
    held.gate.set()  # the standby's write goes out and loses
    await _turns(50)
    assert not starting.done()
    doc = await stored(store)
    assert doc.broker is not None
    assert (doc.broker.address, doc.broker.epoch) == ("10.0.0.3:7070", active.epoch + 1)
    await winner.stop()  # a graceful stop ends its lease: now the standby takes over
    while not starting.done():
        clock.advance(1.0)
        await _turns()
    await starting
    doc = await stored(store)
    assert doc.broker is not None
    assert (doc.broker.address, doc.broker.epoch) == ("10.0.0.2:7070", active.epoch + 2)
    await standby.stop()


class _ReadAfterVacancy(Scripted):
    """Once a document read shows an expired lease, the next document read waits for
    ``gate`` (and sets ``waiting``): the moment between a standby seeing the lease
    run out and reading the document it takes over."""

    def __init__(self, inner: Storage, clock: ManualClock) -> None:
        super().__init__(inner)
        self.clock = clock
        self.read_gate = asyncio.Event()
        self.waiting = asyncio.Event()
        self._expired_seen = False

    async def read(self, key: str) -> Blob:
        if key == DOCUMENT_KEY and self._expired_seen and not self.read_gate.is_set():
            self.waiting.set()
            await self.read_gate.wait()
        blob = await super().read(key)
        if key == DOCUMENT_KEY:
            owner = decode(blob.data).broker
            if owner is not None and owner.lease_until.timestamp() + 1.0 <= self.clock.now():
                self._expired_seen = True
        return blob


async def test_a_standby_that_finds_the_lease_taken_when_it_reads_to_take_over_waits() -> None:
    clock, store = ManualClock(), MemoryStorage()
    active = await _dead_active(store, clock)
    held = _ReadAfterVacancy(store, clock)
    standby = osqueue.Broker(held, config(address="10.0.0.2:7070"), clock=clock, standby=True)
    starting = asyncio.ensure_future(standby.start())
    while not held.waiting.is_set():  # it saw the lease run out; its next read waits
        clock.advance(1.0)
        await _turns()
    winner = osqueue.Broker(store, config(address="10.0.0.3:7070"), clock=clock)
    await winner.start()  # another broker takes the queue over meanwhile
    held.read_gate.set()
    await _turns(50)
    assert not starting.done()  # it found the winner's live lease: it waits
    doc = await stored(store)
    assert doc.broker is not None
    assert (doc.broker.address, doc.broker.epoch) == ("10.0.0.3:7070", active.epoch + 1)
    await winner.stop()
    while not starting.done():
        clock.advance(1.0)
        await _turns()
    await starting
    assert standby.epoch == active.epoch + 2
    await standby.stop()


async def test_a_takeover_whose_answer_was_lost_is_adopted_not_repeated() -> None:
    clock, store = ManualClock(), MemoryStorage()
    active = await _dead_active(store, clock)
    scripted = Scripted(store)
    scripted.script.append("lost")  # the takeover write lands; its answer does not
    standby = osqueue.Broker(scripted, config(address="10.0.0.2:7070"), clock=clock, standby=True)
    starting = asyncio.ensure_future(standby.start())
    while not starting.done():
        clock.advance(1.0)
        await _turns()
    await starting
    assert scripted.writes == 1  # one takeover, adopted when read back
    assert standby.epoch == active.epoch + 1
    doc = await stored(store)
    assert doc.broker is not None
    assert doc.broker.epoch == active.epoch + 1
    await standby.client().push(b"y")  # and it serves on the adopted version
    await standby.stop()


class FailingReadBack(Scripted):
    """After the first document write (a lost takeover), the second read (the direct
    read-back of the bytes that landed) fails once with a 503."""

    def __init__(self, inner: Storage) -> None:
        super().__init__(inner)
        self.reads_after_write: int | None = None

    async def write(self, key: str, data: bytes, *, if_match: str | None) -> str:
        try:
            return await super().write(key, data, if_match=if_match)
        finally:
            if key == DOCUMENT_KEY and self.reads_after_write is None:
                self.reads_after_write = 0

    async def read(self, key: str) -> Blob:
        if self.reads_after_write is not None:
            self.reads_after_write += 1
            if self.reads_after_write == 2:
                raise StorageError("injected: 503 on the read-back")
        return await super().read(key)


async def test_a_failed_read_back_of_a_lost_takeover_is_retried_and_adopted() -> None:
    clock, store = ManualClock(), MemoryStorage()
    active = await _dead_active(store, clock)
    scripted = FailingReadBack(store)
    scripted.script.append("lost")  # the takeover write lands; its answer does not
    standby = osqueue.Broker(scripted, config(address="10.0.0.2:7070"), clock=clock, standby=True)
    starting = asyncio.ensure_future(standby.start())
    while not starting.done():
        clock.advance(1.0)
        await _turns()
    await starting  # the 503 on the read-back did not end the start
    assert scripted.reads_after_write is not None
    assert scripted.reads_after_write >= 4  # the failed read-back was read again
    assert scripted.writes == 1  # one takeover, adopted when read back
    assert standby.epoch == active.epoch + 1
    assert standby.counters.storage_errors_by["document_read"] == 1
    await standby.stop()


# -- the observer rule: a lease runs out when its observer has seen nothing new for
# its length on its own monotonic clock, whatever the wall clocks say (docs/failover.md)

HOUR_S = 3600.0
#: config()'s lease, the default skew margin, and a standby's poll (a quarter lease)
LEASE_S, MARGIN_S, POLL_S = 10.0, 1.0, 2.5


async def _tick(*clocks: ManualClock) -> None:
    """One second passes on every clock (each broker's timers run)."""
    for clock in clocks:
        clock.advance(1.0)
    await _turns()


def _suspects(caplog: pytest.LogCaptureFixture) -> list[logging.LogRecord]:
    return [r for r in caplog.records if getattr(r, "action", None) == "lease_suspect"]


async def test_a_standby_whose_clock_runs_an_hour_ahead_does_not_take_a_live_lease(
    caplog: pytest.LogCaptureFixture,
) -> None:
    clock, ahead = ManualClock(), ManualClock()
    ahead.jump(HOUR_S)  # every lease the active broker writes ran out an hour ago here
    store = MemoryStorage()
    active = osqueue.Broker(store, config(address="10.0.0.1:7070"), clock=clock)
    await active.start()
    standby = osqueue.Broker(store, config(address="10.0.0.2:7070"), clock=ahead, standby=True)
    with caplog.at_level(logging.WARNING, logger="osqueue.broker.lease.watch"):
        starting = asyncio.ensure_future(standby.start())
        for _ in range(5 * int(LEASE_S)):  # five leases, renewed all along
            await _tick(clock, ahead)
        assert not starting.done()
    assert active.serving
    doc = await stored(store)
    assert doc.broker is not None
    assert (doc.broker.address, doc.broker.epoch) == ("10.0.0.1:7070", active.epoch)
    [suspect] = _suspects(caplog)  # logged once, with both times
    assert suspect.skew == "behind"
    assert suspect.observer_now - suspect.lease_until > HOUR_S - LEASE_S
    active.tasks()[0].cancel()  # it dies: the standby takes over after a lease of silence
    while not starting.done():
        await _tick(clock, ahead)
    await starting
    assert standby.epoch == active.epoch + 1
    await standby.stop()


async def test_a_lease_written_an_hour_ahead_does_not_block_the_standby_after_its_writer_dies(
    caplog: pytest.LogCaptureFixture,
) -> None:
    clock, ahead = ManualClock(), ManualClock()
    ahead.jump(HOUR_S)  # the active broker's leases end an hour later than they should
    store = MemoryStorage()
    active = osqueue.Broker(store, config(address="10.0.0.1:7070"), clock=ahead)
    await active.start()
    job_id = await active.client().push(b"x")
    standby = osqueue.Broker(store, config(address="10.0.0.2:7070"), clock=clock, standby=True)
    with caplog.at_level(logging.WARNING, logger="osqueue.broker.lease.watch"):
        starting = asyncio.ensure_future(standby.start())
        version, changed_at = 0, 0.0
        for _ in range(3 * int(LEASE_S)):  # alive: renewed, and not taken over
            await _tick(clock, ahead)
            doc = await stored(store)
            if doc.version != version:
                version, changed_at = doc.version, clock.monotonic()
        assert not starting.done()
        active.tasks()[0].cancel()  # it dies silently, its last lease an hour out
        while not starting.done():
            await _tick(clock)
            assert clock.monotonic() - changed_at <= LEASE_S + MARGIN_S + POLL_S + 1.0
        await starting
    # never before a whole lease (and the margin) after the last version it could see
    assert clock.monotonic() - changed_at >= LEASE_S + MARGIN_S
    doc = await stored(store)
    assert doc.broker is not None
    assert doc.broker.address == "10.0.0.2:7070"
    assert job_id in doc.jobs
    [suspect] = _suspects(caplog)  # once for the broker's epoch, over many renewals
    assert suspect.skew == "ahead"
    assert suspect.lease_until - suspect.observer_now > HOUR_S
    assert str(active.id) in suspect.getMessage()
    await standby.stop()


async def test_a_standby_that_first_sees_a_long_run_out_lease_watches_a_whole_lease() -> None:
    clock, store = ManualClock(), MemoryStorage()
    active = await _dead_active(store, clock)
    clock.advance(HOUR_S)  # its lease ran out an hour ago, by every clock
    standby = osqueue.Broker(store, config(address="10.0.0.2:7070"), clock=clock, standby=True)
    starting = asyncio.ensure_future(standby.start())
    await _turns()
    for _ in range(int(LEASE_S + MARGIN_S) - 1):  # first sight: a whole lease to watch
        assert not starting.done()
        await _tick(clock)
    for _ in range(int(POLL_S) + 2):
        await _tick(clock)
    assert starting.done()
    await starting
    assert standby.epoch == active.epoch + 1
    await standby.stop()


async def test_a_lease_released_by_a_graceful_stop_is_taken_over_at_once() -> None:
    clock, store = ManualClock(), MemoryStorage()
    active = osqueue.Broker(store, config(address="10.0.0.1:7070"), clock=clock)
    await active.start()
    await active.stop()
    doc = await stored(store)
    assert doc.broker is not None
    assert doc.broker.lease_s == 0  # released
    standby = osqueue.Broker(store, config(address="10.0.0.2:7070"), clock=clock, standby=True)
    await asyncio.wait_for(standby.start(), 5.0)  # no clock time passes
    assert standby.epoch == active.epoch + 1
    await standby.stop()


async def test_an_embedded_start_judges_the_owner_by_its_versions_not_its_lease_until() -> None:
    from osqueue.client.embedded import EmbeddedClient, start_embedded

    clock, ahead = ManualClock(), ManualClock()
    ahead.jump(HOUR_S)
    store = MemoryStorage()
    active = osqueue.Broker(store, config(address="10.0.0.1:7070"), clock=clock)
    await active.start()
    # an hour ahead, this client sees the live lease long run out: it must not depose it
    looking = asyncio.ensure_future(start_embedded(store, config(), clock=ahead))
    while not looking.done():
        await _tick(clock, ahead)
        assert clock.monotonic() <= LEASE_S
    assert looking.result() is None
    assert active.serving
    # its clock steps two hours ahead, it renews, and dies: its last lease ends two
    # hours from now for a correct client, which starts its own broker once it has
    # seen no new version for a lease (and the margin)
    clock.jump(2 * HOUR_S)
    for _ in range(int(LEASE_S / 3) + 1):
        await _tick(clock)
    active.tasks()[0].cancel()
    correct = ManualClock()
    doc = await stored(store)
    assert doc.broker is not None
    assert doc.broker.lease_until.timestamp() - correct.now() > HOUR_S
    starting = asyncio.ensure_future(start_embedded(store, config(), clock=correct))
    while not starting.done():
        await _tick(correct)
        assert correct.monotonic() <= LEASE_S + MARGIN_S + 2.0
    local = starting.result()
    assert isinstance(local, EmbeddedClient)
    assert local.broker.epoch == active.epoch + 1
    await local.close()


async def test_zombie_worker_cannot_complete_a_reclaimed_job() -> None:
    clock = ManualClock()
    async with osqueue.Broker(MemoryStorage(), config(), clock=clock) as broker:
        q = broker.client()
        await q.push(b"x")
        (zombie,) = await q.claim("zombie")
        clock.advance(31.0)
        await q.push(b"unrelated", queue="other")  # any commit sweeps stale claims
        assert broker.document.jobs[zombie.id].status == "queued"
        clock.advance(2.0)  # past the reclaim backoff
        (fresh,) = await q.claim("alive")
        assert fresh.id == zombie.id
        assert fresh.token > zombie.token
        with pytest.raises(LeaseLost):
            await q.complete(zombie)
        with pytest.raises(LeaseLost):
            await q.heartbeat(zombie)
        await q.complete(fresh)


async def test_complete_and_claim_settles_and_claims_in_one_commit() -> None:
    clock = ManualClock()
    async with osqueue.Broker(MemoryStorage(), config(), clock=clock) as broker:
        q = broker.client()
        first, second, third = [await q.push(b"%d" % i) for i in range(3)]
        held = await q.claim("w1", max_jobs=2)
        assert [j.id for j in held] == [first, second]
        stale = msgspec.structs.replace(held[1], token=held[1].token + 100)
        before = broker.commits
        errors, claimed = await q.complete_and_claim([held[0], stale], "w1", max_jobs=5)
        assert broker.commits == before + 1
        assert errors[0] is None
        assert isinstance(errors[1], LeaseLost)  # the stale one fails alone
        assert [j.id for j in claimed] == [third]
        assert broker.document.jobs.get(first) is None or (
            broker.document.jobs[first].status == "done"
        )
        assert broker.document.jobs[second].status == "claimed"
        # Bad claim arguments are refused before anything is sent.
        with pytest.raises(InvalidInput) as caught:
            await q.complete_and_claim([held[1]], "bad worker\n", max_jobs=1)
        assert caught.value.field == "worker"
        assert broker.commits == before + 1
        assert broker.document.jobs[second].status == "claimed"


async def test_long_poll_claim_answers_right_after_the_commit_that_makes_a_job_claimable() -> None:
    async with osqueue.Broker(MemoryStorage(), config()) as broker:
        q = broker.client()
        waiting = asyncio.ensure_future(q.claim("w", ["later"], wait_s=30.0))
        for _ in range(10):
            await asyncio.sleep(0)
        assert not waiting.done()
        job_id = await q.push(b"now", queue="later")
        (job,) = await asyncio.wait_for(waiting, 5.0)
        assert job.id == job_id


async def test_a_long_poll_answered_empty_by_the_commit_that_pushes_its_job_gets_the_job() -> None:
    """The claim and the push land in one commit, the claim first: its own claim
    finds nothing, and it parks only once that commit answered it (the commit's
    wake-up found nothing parked).  It parks while the commit loop yields, so the
    loop must look at it before idling, not at the lease renewal (an hour's lease
    on a manual clock: never) or when its wait runs out."""
    store = Scripted(MemoryStorage())
    async with osqueue.Broker(store, config(lease_s=3600.0), clock=ManualClock()) as broker:
        q = broker.client()
        store.gate.clear()  # the next commit waits in its write: the two ops queue behind it
        writing = asyncio.ensure_future(q.push(b"other", queue="other"))
        await _turns()
        waiting = asyncio.ensure_future(q.claim("w", ["late"], wait_s=30.0))
        pushing = asyncio.ensure_future(q.push(b"late", queue="late"))
        await _turns()
        assert [type(op) for op in broker._intake.pending] == [ClaimOp, Push]
        store.gate.set()
        await _turns()
        assert writing.done()
        assert pushing.done()
        assert waiting.done()
        (job,) = waiting.result()
        assert job.id == pushing.result()


async def test_long_poll_wakes_for_a_delayed_job_when_it_comes_due() -> None:
    clock = ManualClock()
    async with osqueue.Broker(MemoryStorage(), config(), clock=clock) as broker:
        q = broker.client()
        await q.push(b"x", delay_s=5.0)
        waiting = asyncio.ensure_future(q.claim("w", wait_s=60.0))
        for _ in range(20):
            await asyncio.sleep(0)
        assert not waiting.done()
        clock.advance(5.0)
        (job,) = await asyncio.wait_for(waiting, 5.0)
        assert job.payload == b"x"


async def test_priorities_dead_letters_cancel_and_keys_through_the_client() -> None:
    async with osqueue.Broker(MemoryStorage(), config(backoff_base_s=0.001)) as broker:
        q = broker.client()
        low = await q.push(b"low", priority=5)
        high = await q.push(b"high", priority=-5)
        jobs = await q.claim("w", max_jobs=2)
        assert [j.id for j in jobs] == [high, low]
        for j in jobs:
            await q.release(j)
        poison = await q.push(b"poison", queue="p", max_attempts=2)
        for _ in range(2):
            (j,) = await q.claim("w", ["p"], wait_s=5.0)
            await q.fail(j, error="bad", retry_after_s=0)
        assert (await q.stats()).queues["p"].dead == 1
        assert await q.retry_dead([poison]) == 1
        await q.cancel(poison)
        await q.push(b"k1", key="unique")
        with pytest.raises(osqueue.DuplicateKey):
            await q.push(b"k2", key="unique")


async def test_archive_holds_every_completed_job_exactly_once(backend: Storage) -> None:
    store = backend
    async with osqueue.Broker(store, config()) as broker:
        q = broker.client()
        ids = await q.push_many([osqueue.NewJob(b"%d" % i) for i in range(30)])
        done = []
        while len(done) < 30:
            for job in await q.claim("w", max_jobs=7):
                await q.complete(job)
                done.append(job.id)
    keys = await store.list("archive/")
    assert keys
    assert all(k.startswith("archive/date=") and "/hour=" in k for k in keys)
    archived: Counter[str] = Counter()
    for key in keys:
        for line in (await store.get(key)).splitlines():
            archived[msgspec.json.decode(line)["id"]] += 1
    assert archived == Counter({i: 1 for i in ids})
    doc = await stored(store)
    assert not [j for j in doc.jobs.values() if j.status == "done"]


async def _run_to_pruned(broker: osqueue.Broker, ids: list[str]) -> osqueue.state.Document:
    """Claim and complete every job still queued, then wait until all left the document."""
    q = broker.client()
    jobs = broker.document.jobs
    left = {i for i in ids if i in jobs and jobs[i].status == "queued"}
    while left:
        for job in await q.claim("w", max_jobs=len(left)):
            await q.complete(job)
            left.discard(job.id)
    while any(i in broker.document.jobs for i in ids):  # pruned once archived
        await q.push(b"tick")
        for job in await q.claim("w", max_jobs=10):
            await q.complete(job)
    return broker.document


async def test_a_caller_chosen_id_keeps_a_tombstone_and_its_retried_push_is_applied_once() -> None:
    async with osqueue.Broker(MemoryStorage(), config()) as broker:
        q = broker.client()
        job_id = await q.push(b"a", id="chosen-1")
        doc = await _run_to_pruned(broker, [job_id])
        assert "chosen-1" in doc.recent
        stats = await q.stats()
        assert stats.tombstones == len(doc.recent) >= 1
        assert stats.document_bytes >= len(encode(doc))  # what the cap counts, from above
        # The same push again (its answer was lost, say): recognised, not re-created.
        assert await q.push(b"a", id="chosen-1") == "chosen-1"
        assert "chosen-1" not in broker.document.jobs
        assert await q.claim("w", max_jobs=10) == []


async def test_a_made_up_id_leaves_no_tombstone() -> None:
    # Nobody else knows an id the in-process client made up: that push is never sent
    # again, so its job leaves no dedupe tombstone (the document stays small).
    store = MemoryStorage()
    async with osqueue.Broker(store, config()) as broker:
        q = broker.client()
        ids = [await q.push(b"a"), *await q.push_many([osqueue.NewJob(b"b")])]
        assert [j.dedupe for j in (await stored(store)).jobs.values()] == [False, False]
        doc = await _run_to_pruned(broker, ids)
        assert not set(ids) & set(doc.recent)


async def test_takeover_archives_inherited_done_jobs_once(backend: Storage) -> None:
    store = backend
    a = osqueue.Broker(store, config())
    await a.start()
    q = a.client()
    await q.push(b"x", id="inherit-1")
    (job,) = await q.claim("w")
    gate = asyncio.Event()
    original = store.write

    async def blocked(key: str, data: bytes, *, if_match: str | None) -> str:
        if key.startswith("archive/"):
            await gate.wait()
        return await original(key, data, if_match=if_match)

    store.write = blocked  # type: ignore[method-assign]
    await q.complete(job)  # done in the document; its archive write hangs
    for t in a.tasks():  # crash before the archive write
        t.cancel()
    store.write = original  # type: ignore[method-assign]
    b = osqueue.Broker(store, config())
    await b.start()
    keys = await store.list("archive/")
    assert len(keys) == 1
    assert b"inherit-1" in await store.get(keys[0])
    assert "inherit-1" not in (await stored(store)).jobs
    await b.stop()


async def test_large_payloads_live_under_payloads_and_are_deleted_after_completion(
    backend: Storage,
) -> None:
    store = Scripted(backend)
    async with osqueue.Broker(store, config(inline_payload_max_bytes=1024)) as broker:
        q = broker.client()
        big = bytes(range(256)) * 40
        job_id = await q.push(big)
        ref = broker.document.jobs[job_id].payload_ref
        assert ref is not None
        assert ref.startswith(f"payloads/{job_id}=")
        assert await store.list("payloads/") == [ref]
        (job,) = await q.claim("w")
        assert job.payload == big
        await q.complete(job)
        await _run_to_pruned(broker, [job_id])  # the job leaves the document...
        await store.deleted([ref])  # ...and its object is deleted after that commit
    assert await store.list("payloads/") == []


async def test_a_refused_push_leaves_no_payload_object_behind(backend: Storage) -> None:
    store = backend
    cfg = config(inline_payload_max_bytes=1024, max_document_bytes=20_000)
    async with osqueue.Broker(store, cfg) as broker:
        q = broker.client()
        big = b"x" * 5_000
        kept = await q.push(big, key="k")
        with pytest.raises(osqueue.DuplicateKey):
            await q.push(big, key="k")
        results = await q.push_results([osqueue.NewJob(big) for _ in range(60)])
        refused = [r for r in results if isinstance(r, osqueue.QueueFull)]
        accepted = [r for r in results if isinstance(r, str)]
        assert refused  # the document cap was reached part way
        jobs = broker.document.jobs
        assert sorted(await store.list("payloads/")) == sorted(
            str(jobs[i].payload_ref) for i in [kept, *accepted]
        )


async def test_a_push_refused_before_it_is_queued_leaves_no_payload_object(
    backend: Storage,
) -> None:
    store = backend
    broker = osqueue.Broker(store, config(inline_payload_max_bytes=1024))
    await broker.start()
    q = broker.client()
    await store.delete(DOCUMENT_KEY)
    with pytest.raises(DocumentGone):  # this push's commit finds the document gone
        await q.push(b"small")
    # The broker has failed: later pushes are refused before they are queued.
    with pytest.raises(DocumentGone):
        await q.push(b"z" * 5_000)
    with pytest.raises(DocumentGone):
        await q.push_many([osqueue.NewJob(b"z" * 5_000, id=f"m{i}") for i in range(3)])
    assert await store.list("payloads/") == []
    await broker.stop()


async def test_a_repeated_push_keeps_a_live_jobs_payload_and_drops_a_finished_ones(
    backend: Storage,
) -> None:
    store = Scripted(backend)
    async with osqueue.Broker(store, config(inline_payload_max_bytes=1024)) as broker:
        q = broker.client()
        big = b"y" * 5_000
        await q.push(big, id="again")
        first = await store.list("payloads/")
        assert await q.push(big, id="again") == "again"  # live: its object stays
        assert await store.list("payloads/") == first  # and the repeat's own is deleted
        (job,) = await q.claim("w")
        assert job.payload == big
        await q.complete(job)
        await _run_to_pruned(broker, ["again"])
        await store.deleted(first)  # deleted after the commit that dropped the job
        assert await store.list("payloads/") == []
        assert await q.push(big, id="again") == "again"  # finished: nothing is re-created
        assert await store.list("payloads/") == []
        assert "again" not in broker.document.jobs


async def test_a_batch_is_queued_whole_or_not_at_all() -> None:
    async with osqueue.Broker(MemoryStorage(), config(max_pending_ops=10)) as broker:
        with pytest.raises(osqueue.InvalidInput) as caught:
            await broker.submit_many([osqueue.state.Push(f"j{i}", b"") for i in range(11)])
        assert caught.value.field == "ops"
        # Six ops wait for the next commit; a batch of five does not fit beside them
        # and is refused before any of it is queued.
        first = [broker.add_op(osqueue.state.Push(f"a{i}", b"")) for i in range(6)]
        with pytest.raises(osqueue.ResourceExhausted):
            await broker.submit_many([osqueue.state.Push(f"b{i}", b"") for i in range(5)])
        assert len(await asyncio.gather(*first)) == 6
        assert sorted(broker.document.jobs) == [f"a{i}" for i in range(6)]


async def test_graceful_stop_drains_and_clears_the_address(backend: Storage) -> None:
    store = Scripted(backend)
    broker = osqueue.Broker(store, config(address="127.0.0.1:7070"))
    await broker.start()
    store.gate.clear()
    pending = [asyncio.ensure_future(broker.client().push(b"%d" % i)) for i in range(20)]
    await asyncio.sleep(0)
    stopping = asyncio.ensure_future(broker.stop())
    await asyncio.sleep(0)
    with pytest.raises(ShuttingDown):
        await broker.client().push(b"too late")
    store.gate.set()
    await stopping
    ids = await asyncio.gather(*pending)
    doc = await stored(store)
    assert set(ids) <= set(doc.jobs)
    assert doc.broker is not None
    assert doc.broker.address is None
    assert broker.state is State.STOPPED


async def test_corrupt_document_is_refused_and_left_untouched(backend: Storage) -> None:
    store = backend
    bad = b'{"format": 4, "version": "seven"}'
    await store.write(DOCUMENT_KEY, bad, if_match=None)
    with pytest.raises(CorruptDocument) as info:
        await osqueue.Broker(store, config()).start()
    assert info.value.path == "$.version"
    assert (await store.read(DOCUMENT_KEY)).data == bad


async def test_document_deleted_from_outside_stops_the_broker(backend: Storage) -> None:
    store = backend
    broker = osqueue.Broker(store, config())
    await broker.start()
    await broker.client().push(b"x")
    await store.delete(DOCUMENT_KEY)
    with pytest.raises(DocumentGone):
        await broker.client().push(b"y")
    assert broker.state is State.FAILED
    with pytest.raises(osqueue.NotFound):
        await store.read(DOCUMENT_KEY)
    await broker.stop()


async def test_idle_broker_only_writes_to_renew_its_lease() -> None:
    clock = ManualClock()
    async with osqueue.Broker(MemoryStorage(), config(lease_s=9.0), clock=clock) as broker:
        start = broker.commits
        for _ in range(50):
            await asyncio.sleep(0)
        assert broker.commits == start
        clock.advance(3.0)
        for _ in range(50):
            await asyncio.sleep(0)
        assert broker.commits == start + 1


async def test_a_crash_in_the_commit_loop_answers_every_waiting_op() -> None:
    store = MemoryStorage()
    broker = osqueue.Broker(store, config())
    await broker.start()

    def boom(*args: object, **kwargs: object) -> bytes:
        raise RuntimeError("encoder bug")

    import osqueue.broker.core.commit as module

    original = module.encode
    module.encode = boom  # type: ignore[assignment]
    try:
        results = await asyncio.gather(
            broker.client().push(b"a"), broker.client().push(b"b"), return_exceptions=True
        )
    finally:
        module.encode = original
    assert all(isinstance(r, osqueue.MaybeCommitted) for r in results)
    assert broker.state is State.FAILED
    with pytest.raises(osqueue.BrokerUnavailable):
        await broker.client().push(b"c")
    await broker.stop()


SWEEP = {"inline_payload_max_bytes": 16, "payload_sweep_interval_s": 5.0}
#: an upload whose push never committed (its broker died in between)
ORPHAN = "payloads/lost=01JD0000000000000000000000"


async def _pass(clock: ManualClock, seconds: int, store: Scripted | None = None) -> None:
    """Let ``seconds`` of clock time pass a second at a time (leases renew meanwhile).

    Each step lets every task that is due run; with ``store``, it also waits
    until the broker's calls on a real backend have come back."""
    for _ in range(seconds):
        await _settle(store)
        clock.advance(1.0)
    await _settle(store)


async def _settle(store: Scripted | None) -> None:
    for _ in range(20):  # let every task that is due run
        await asyncio.sleep(0)
    while store is not None and store.in_flight:
        await store.idle()
        for _ in range(20):  # and whatever the answers let run next
            await asyncio.sleep(0)


async def test_the_payload_sweep_deletes_objects_two_sweeps_found_unreferenced(
    backend: Storage,
) -> None:
    clock = ManualClock()
    store = Scripted(backend)
    async with osqueue.Broker(store, config(**SWEEP), clock=clock) as broker:
        q = broker.client()
        live = await q.push(b"x" * 100)
        live_ref = broker.document.jobs[live].payload_ref
        # left behind by brokers that died between an upload and its commit
        await store.put(ORPHAN, b"orphan")
        await store.put("payloads/legacy", b"an orphan named the earlier way")
        await _pass(clock, 5, store)  # the first sweep only marks them
        assert len(await store.list("payloads/")) == 3
        await store.put("payloads/late=01JD0000000000000000000001", b"orphan")
        await _pass(clock, 5, store)  # the second deletes what both found
        assert set(await store.list("payloads/")) == {
            "payloads/late=01JD0000000000000000000001",
            live_ref,
        }
        await _pass(clock, 5, store)
        assert await store.list("payloads/") == [live_ref]
        assert broker.counters.payloads_swept == 3
        (job,) = await q.claim("w")
        assert job.payload == b"x" * 100


async def test_the_payload_sweep_never_takes_the_object_of_a_push_in_flight(
    backend: Storage,
) -> None:
    clock = ManualClock()
    store = Scripted(backend)
    async with osqueue.Broker(store, config(**SWEEP), clock=clock) as broker:
        q = broker.client()
        store.put_gate.clear()  # the upload lands; its push is not submitted yet
        pushing = asyncio.ensure_future(q.push(b"p" * 100))
        await _pass(clock, 1, store)
        (ref,) = await store.list("payloads/")
        await _pass(clock, 16, store)  # three sweeps while the lease stays fresh
        assert await store.list("payloads/") == [ref]
        store.put_gate.set()
        job_id = await pushing
        assert broker.document.jobs[job_id].payload_ref == ref
        (job,) = await q.claim("w")
        assert job.payload == b"p" * 100
        assert broker.counters.payloads_swept == 0


@pytest.mark.parametrize("fault", ["writes hang", "a list fails"])
async def test_the_payload_sweep_waits_out_a_stale_lease_and_a_failed_list(
    fault: str, backend: Storage
) -> None:
    clock = ManualClock()
    store = Scripted(backend)
    async with osqueue.Broker(store, config(**SWEEP), clock=clock) as broker:
        await store.put(ORPHAN, b"orphan")
        if fault == "writes hang":  # no renewal: at 10 s the lease may be running out
            store.gate.clear()
        else:  # the sweep at 5 s fails; the broker serves on and sweeps again
            store.list_errors = 1
        await _pass(clock, 12, store)
        assert await store.list("payloads/") == [ORPHAN]
        store.gate.set()
        await _pass(clock, 9, store)  # sweeps at 15 s and 20 s, with a lease renewed meanwhile
        assert await store.list("payloads/") == []
        assert broker.counters.payloads_swept == 1
        assert broker.serving


async def test_the_payload_sweep_judges_its_own_lease_on_the_monotonic_clock() -> None:
    """Writes hang, and the broker's wall clock steps back an hour: the lease it wrote
    seems to run for an hour yet, but no renewal went out for a lease, so it is
    stale (a standby may have taken over) and the sweep deletes nothing."""
    clock = ManualClock()
    store = Scripted(MemoryStorage())
    async with osqueue.Broker(store, config(**SWEEP), clock=clock) as broker:
        await store.put(ORPHAN, b"orphan")
        store.gate.clear()
        await _pass(clock, 4, store)  # the renewal at 3.3 s hangs
        clock.jump(-3600.0)
        await _pass(clock, 8, store)  # the sweeps at 5 s and 10 s
        assert await store.list("payloads/") == [ORPHAN]
        store.gate.set()
        await _pass(clock, 9, store)  # renewed: sweeps at 15 s and 20 s
        assert await store.list("payloads/") == []
        assert broker.counters.payloads_swept == 1


async def test_the_sweeps_never_delete_outside_a_file_store(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    """The issue's reproduction: ``payloads``, ``results`` and ``segments`` of a file://
    store are links to folders outside it, holding files named like orphans.  Every
    sweep is refused (logged with the link, counted as a storage error), nothing
    outside is deleted, and the broker serves on."""
    root = tmp_path / "q"
    root.mkdir()
    outside: dict[str, Path] = {}
    orphan = ORPHAN.partition("/")[2]
    for prefix in ("payloads", "results", "segments"):
        place = outside[prefix] = tmp_path / f"outside-{prefix}"
        place.mkdir()
        (place / orphan).write_bytes(b"not yours")
        (place / "victim").write_bytes(b"not yours")
        (root / prefix).symlink_to(place)
    clock = ManualClock()
    store = Scripted(FileStorage(root))
    intervals = {"payload_sweep_interval_s": 5.0, "result_sweep_interval_s": 5.0}
    with caplog.at_level(logging.WARNING, logger="osqueue.broker"):
        async with osqueue.Broker(store, config(**intervals), clock=clock) as broker:
            await _pass(clock, 16, store)  # three sweeps of each kind
            for place in outside.values():
                assert sorted(p.name for p in place.iterdir()) == sorted([orphan, "victim"])
            assert broker.serving
            job_id = await broker.client().push(b"inline")
            assert [j.id for j in await broker.client().claim("w")] == [job_id]
            errors = broker.counters.storage_errors_by
            assert errors["payload_sweep"] >= 6  # payload and segment sweeps
            assert errors["result_sweep"] >= 3
            assert broker.counters.payloads_swept == 0
    refusals = [r.getMessage() for r in caplog.records if "symbolic link" in r.getMessage()]
    for sweep, prefix in [("payload", "payloads"), ("result", "results"), ("segment", "segments")]:
        assert any(m.startswith(sweep) and f"{prefix!r} is a symbolic link" in m for m in refusals)


async def test_a_claim_survives_one_job_whose_payload_object_vanished(backend: Storage) -> None:
    store = backend
    async with osqueue.Broker(store, config(inline_payload_max_bytes=16)) as broker:
        q = broker.client()
        gone = await q.push(b"x" * 100)
        kept = await q.push(b"y" * 100)
        await store.delete(str(broker.document.jobs[gone].payload_ref))
        jobs = await q.claim("w", max_jobs=2)
        assert [j.id for j in jobs] == [kept]
        assert jobs[0].payload == b"y" * 100


async def test_a_claim_fails_alone_a_job_whose_payload_object_is_a_link(tmp_path: Path) -> None:
    """A payload object replaced by a link to a file outside a file:// store: the
    store refuses it, and the claim fails that job alone, naming the link (the
    outside file is never read, nor handed to a handler)."""
    root = tmp_path / "q"
    async with osqueue.Broker(FileStorage(root), config(inline_payload_max_bytes=16)) as broker:
        q = broker.client()
        linked = await q.push(b"x" * 100, max_attempts=1)
        kept = await q.push(b"y" * 100)
        ref = str(broker.document.jobs[linked].payload_ref)
        (tmp_path / "outside").write_bytes(b"x" * 100)  # even the very bytes pushed
        (root / ref).unlink()
        (root / ref).symlink_to(tmp_path / "outside")
        jobs = await q.claim("w", max_jobs=2)
        assert [(j.id, j.payload) for j in jobs] == [(kept, b"y" * 100)]
        failed = broker.document.jobs[linked]
        assert failed.status == "dead"
        assert failed.last_error is not None
        assert f"payload object {ref} of job {linked} failed its check" in failed.last_error
        assert f"{ref!r} is a symbolic link" in failed.last_error


async def test_a_failed_broker_raises_without_growing_a_traceback() -> None:
    store = MemoryStorage()
    broker = osqueue.Broker(store, config())
    await broker.start()
    await store.delete(DOCUMENT_KEY)
    with pytest.raises(DocumentGone):
        await broker.client().push(b"x")
    depths = []
    for _ in range(3):
        try:
            await broker.client().push(b"y")
        except DocumentGone as exc:
            tb, n = exc.__traceback__, 0
            while tb is not None:
                n, tb = n + 1, tb.tb_next
            depths.append(n)
    assert len(set(depths)) == 1
    await broker.stop()


@pytest.mark.parametrize(
    ("kwargs", "field"),
    [
        ({"lease_s": 0}, "lease_s"),
        ({"max_batch_ops": 0}, "max_batch_ops"),
        ({"max_pending_ops": -1}, "max_pending_ops"),
        ({"archive_concurrency": 0}, "archive_concurrency"),
        ({"archive_concurrency": 2.5}, "archive_concurrency"),
        ({"payload_sweep_interval_s": 0}, "payload_sweep_interval_s"),
        ({"payload_sweep_interval_s": float("nan")}, "payload_sweep_interval_s"),
        ({"stats_log_interval_s": -1}, "stats_log_interval_s"),
    ],
)
def test_bad_config_names_the_field(kwargs: dict[str, object], field: str) -> None:
    with pytest.raises(InvalidInput) as info:
        osqueue.BrokerConfig(**kwargs)  # type: ignore[arg-type]
    assert info.value.field == field


@pytest.mark.parametrize("wait_s", [-1.0, float("nan"), "5", 10**9])
async def test_a_bad_claim_wait_names_the_field_and_changes_nothing(wait_s: object) -> None:
    store = MemoryStorage()
    async with osqueue.Broker(store, config()) as broker:
        q = broker.client()
        await q.push(b"x")
        version = broker.document.version
        with pytest.raises(InvalidInput) as info:
            await q.claim("w", wait_s=wait_s)  # type: ignore[arg-type]
        assert info.value.field == "wait_s"
        assert broker.document.version == version
        assert [job.payload for job in await q.claim("w")] == [b"x"]


async def test_archive_writes_are_bounded_by_archive_concurrency_and_stop_waits_for_them() -> None:
    store = MemoryStorage()
    two_in_flight = asyncio.Event()
    in_flight, peak = 0, 0
    original = store.write

    async def slow(key: str, data: bytes, *, if_match: str | None) -> str:
        nonlocal in_flight, peak
        if key.startswith("archive/"):  # a slow store for archive objects (50 ms each)
            in_flight += 1
            peak = max(peak, in_flight)
            if in_flight == 2:
                two_in_flight.set()
            await asyncio.sleep(0.05)
            in_flight -= 1
        return await original(key, data, if_match=if_match)

    store.write = slow  # type: ignore[method-assign]
    broker = osqueue.Broker(store, config(archive_concurrency=2))
    await broker.start()
    q = broker.client()
    await q.push_many([osqueue.NewJob(b"%d" % i) for i in range(5)])
    for job in await q.claim("w", max_jobs=5):
        await q.complete(job)  # one commit each: five archive objects due
    await two_in_flight.wait()
    archivers = [t for t in broker.tasks() if t.get_name().startswith("osqueue-archive")]
    assert len(archivers) == 2  # long-lived, not one task per commit
    await broker.stop()  # archive writes are still in flight: the last commit waits
    assert peak == 2
    assert len(await store.list("archive/")) == 5
    assert not [j for j in (await stored(store)).jobs.values() if j.status == "done"]


async def test_a_stop_past_its_drain_timeout_leaves_no_task_of_the_broker_running() -> None:
    store = Scripted(MemoryStorage())
    broker = osqueue.Broker(store, config(drain_timeout_s=0.05))
    await broker.start()
    store.gate.clear()  # the storage stops answering: the final write hangs
    await broker.stop()
    assert broker.state is State.STOPPED
    others = [t for t in asyncio.all_tasks() if t is not asyncio.current_task()]
    assert [t.get_coro() for t in others if not t.done()] == []


async def test_a_serving_broker_logs_its_activity_every_interval(
    caplog: pytest.LogCaptureFixture,
) -> None:
    caplog.set_level(logging.INFO, logger="osqueue.broker")
    clock = ManualClock()
    cfg = config(stats_log_interval_s=5.0)
    async with osqueue.Broker(MemoryStorage(), cfg, clock=clock) as broker:
        await _pass(clock, 0)  # the logger starts counting
        q = broker.client()
        for _ in range(3):
            await q.push(b"x")
        await _pass(clock, 10)
        first, second = [r.__dict__ for r in caplog.records if r.__dict__.get("action") == "stats"]
        assert (first["ops"], first["jobs"], first["storage_errors"]) == (3, 3, 0)
        assert first["commits"] >= 3  # and lease renewals
        assert (second["ops"], second["jobs"]) == (0, 3)


async def test_the_serving_broker_keeps_a_summary_of_its_last_minute_in_the_document() -> None:
    clock = ManualClock()
    store = MemoryStorage()
    async with osqueue.Broker(store, config(), clock=clock) as broker:
        q = broker.client()
        await asyncio.gather(*(q.push(b"x") for _ in range(10)))
        clock.advance(6.0)  # the summary is refreshed every 5 s
        await q.push(b"y")
        doc = await stored(store)
        assert doc.broker is not None
        perf = doc.broker.perf
        assert perf is not None
        assert perf.window_s == 60.0
        assert perf.commits >= 1
        assert perf.ops >= perf.commits
        assert 0.0 <= perf.p50_ms <= perf.p99_ms
    stopped = await stored(store)
    assert stopped.broker is not None
    assert stopped.broker.perf is None  # a stopped broker's lease carries no summary


async def test_every_option_of_a_new_job_reaches_its_push_under_its_own_name() -> None:
    # the state layer builds a Push positionally (osqueue.state.make.push): each
    # option must land in the field of the same name
    async with osqueue.Broker(MemoryStorage()) as broker:
        job = osqueue.NewJob(
            bytearray(b"payload"),  # type: ignore[arg-type]  # bytes-like is accepted
            queue="q1",
            priority=7,
            delay_s=2.5,
            key="k1",
            max_attempts=9,
            id="chosen-1",
            group="g1",
            after=["parent-1"],  # type: ignore[arg-type]  # a list is accepted too
            on_parent_failure="run",
            result_ttl_s=60.0,
        )
        op = make.push(job, broker.config.max_payload_bytes)
        assert op.payload == b"payload"
        assert type(op.payload) is bytes
        for name in ("queue", "priority", "delay_s", "key", "max_attempts", "id", "group"):
            assert getattr(op, name) == getattr(job, name), name
        assert op.after == ("parent-1",)
        assert op.on_parent_failure == "run"
        assert op.result_ttl_s == 60.0
        assert op.dedupe is True  # a chosen id may come again
        assert (op.payload_ref, op.payload_size, op.payload_sha256) == (None, 0, None)
        generated = make.push(osqueue.NewJob(b"x"), broker.config.max_payload_bytes)
        assert generated.dedupe is False
        assert len(generated.id) == 26
