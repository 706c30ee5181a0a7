"""The broker's delayed objects in detail (memory storage): a broker that dies with a
spill's object written but not referenced, a spill whose jobs changed meanwhile,
the commit loop's hold while a delayed spill is written, and the one cheap check
a commit costs with nothing delayed to spill."""

from __future__ import annotations

import asyncio

from backends import Wrapped
from segment_helpers import DELAYED_T0 as T0
from segment_helpers import delayed_config as config

from osqueue.broker import Broker
from osqueue.clock import ManualClock
from osqueue.state import Document
from osqueue.state.cold_delayed import DELAYED_PREFIX
from osqueue.storage import MemoryStorage
from osqueue.storage.port import Storage


class Gated(Wrapped):
    """Delayed objects land, then wait for :attr:`gate` before their writer hears back."""

    def __init__(self, inner: Storage) -> None:
        super().__init__(inner)
        self.gate = asyncio.Event()
        self.gate.set()
        self.arrived = asyncio.Event()

    async def put(self, key: str, data: bytes) -> None:
        await self.inner.put(key, data)
        if key.startswith(DELAYED_PREFIX):
            self.arrived.set()
            await self.gate.wait()


async def push(broker: Broker, delays: list[float]) -> list[str]:
    q = broker.client()
    return [await q.push(b"p%d" % i, delay_s=d, id=f"d{i}") for i, d in enumerate(delays)]


async def test_a_broker_dying_between_a_delayed_write_and_its_commit_loses_nothing() -> None:
    inner = MemoryStorage()
    store = Gated(inner)
    clock = ManualClock(T0)
    first = Broker(store, config(), clock=clock)
    await first.start()
    store.gate.clear()
    ids = await push(first, [500.0, 510.0, 520.0, 530.0])
    await store.arrived.wait()  # the object is stored; its SpillDelayed never commits
    (orphan,) = await inner.list(DELAYED_PREFIX)
    for task in first.tasks():  # it dies where it stands
        task.cancel()
    await asyncio.gather(*first.tasks(), return_exceptions=True)
    async with Broker(inner, config(), clock=clock) as second:
        doc = second.document
        assert not doc.delayed  # the spill never landed: the jobs are in the document
        assert sorted(doc.jobs) == sorted(ids)
        await second.segments.settled()  # it spills them itself, to an object of its own
        assert orphan not in {ref.key for ref in second.document.delayed}
        suspects = await second.segments.sweep(set())
        assert orphan in suspects
        await second.client().push(b"a commit")
        await second.segments.sweep(suspects)
        await second.client().push(b"the next commit deletes it")
        await second.segments.settled()
        assert orphan not in await inner.list(DELAYED_PREFIX)
        clock.advance(600.0)
        for _ in range(30):
            await asyncio.sleep(0)
        await second.segments.settled()
        jobs = await second.client().claim("w", max_jobs=10, wait_s=0)
        assert sorted(j.id for j in jobs if j.id.startswith("d")) == sorted(ids)


async def test_a_delayed_spill_whose_job_changed_fails_alone_and_its_object_goes() -> None:
    inner = MemoryStorage()
    store = Gated(inner)
    clock = ManualClock(T0)
    async with Broker(store, config(), clock=clock) as broker:
        store.gate.clear()
        ids = await push(broker, [500.0, 510.0, 520.0, 530.0])
        await store.arrived.wait()
        (written,) = await inner.list(DELAYED_PREFIX)
        await broker.client().cancel(ids[1])  # a job of the snapshot changes
        store.gate.set()
        await broker.segments.settled()
        assert broker.segments.delayed.counters.failed_spills == 1
        assert written not in await inner.list(DELAYED_PREFIX)
        assert not broker.document.delayed
        assert ids[1] not in broker.document.jobs


async def test_with_nothing_delayed_a_commit_plans_no_delayed_work() -> None:
    async with Broker(MemoryStorage(), config()) as broker:
        manager = broker.segments.delayed
        planned: list[Document] = []
        original = manager._plan_loads

        def spy(doc: Document, now: float) -> None:
            planned.append(doc)
            original(doc, now)

        manager._plan_loads = spy  # type: ignore[method-assign]
        q = broker.client()
        for i in range(5):
            await q.push(b"x", delay_s=30.0, id=f"near{i}")  # within the horizon
        assert not broker.document.delayed
        assert planned == []
        assert manager.counters.spills == 0


class SleepOnly:
    """A clock of one's own with no ``call_later``: the delayed manager's timer
    falls back to a sleeping task, as the commit loop's does."""

    def __init__(self, inner: ManualClock) -> None:
        self.inner = inner

    def now(self) -> float:
        return self.inner.now()

    def monotonic(self) -> float:
        return self.inner.monotonic()

    async def sleep(self, seconds: float) -> None:
        await self.inner.sleep(seconds)


async def test_a_clock_without_call_later_still_loads_delayed_objects_ahead() -> None:
    manual = ManualClock(T0)
    async with Broker(MemoryStorage(), config(), clock=SleepOnly(manual)) as broker:
        ids = await push(broker, [1000.0 + i for i in range(8)])
        await broker.segments.settled()
        assert not broker.document.jobs
        assert broker.document.delayed
        manual.advance(990.0)  # the lead before the first is due: only the timer loads
        for _ in range(30):
            await asyncio.sleep(0)
        await broker.segments.settled()
        assert ids[0] in broker.document.jobs  # (no timer armed: still in its object)
