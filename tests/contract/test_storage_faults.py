"""The latency/fault wrapper: delays on an injected clock, injected errors, lost responses."""

from __future__ import annotations

import asyncio
import random
import uuid
from collections.abc import Iterator

import pytest

from osqueue.clock import ManualClock
from osqueue.errors import Conflict, InvalidInput, OutcomeUnknown, StorageError
from osqueue.storage import FaultConfig, FaultyStorage, MemoryStorage, from_url


@pytest.fixture
def inner() -> Iterator[MemoryStorage]:
    name = f"faults-{uuid.uuid4().hex[:8]}"
    yield MemoryStorage(name)
    MemoryStorage.drop(name)


async def wait_for_sleepers(clock: ManualClock, count: int) -> None:
    """Yield to the loop until ``count`` coroutines are parked on the clock."""
    for _ in range(1000):
        if clock.sleepers >= count:
            return
        await asyncio.sleep(0)
    raise AssertionError(f"expected {count} sleepers, have {clock.sleepers}")


async def test_write_waits_for_the_configured_delay(inner: MemoryStorage) -> None:
    clock = ManualClock()
    store = FaultyStorage(inner, FaultConfig(write_ms=200, read_ms=20), clock=clock)
    task = asyncio.create_task(store.write("k", b"v", if_match=None))
    await wait_for_sleepers(clock, 1)
    clock.advance(0.199)
    await asyncio.sleep(0)
    assert not task.done()
    assert await inner.list() == []  # the write has not reached the inner store yet
    clock.advance(0.001)
    etag = await task
    assert await inner.read("k") == (b"v", etag)

    reading = asyncio.create_task(store.read("k"))
    await wait_for_sleepers(clock, 1)
    assert not reading.done()
    clock.advance(0.02)
    assert (await reading).data == b"v"
    assert (store.reads, store.writes) == (1, 1)
    assert store.delay_s == pytest.approx(0.22)


async def test_jitter_stays_within_bounds_and_follows_the_seed(inner: MemoryStorage) -> None:
    clock = ManualClock()
    config = FaultConfig(read_ms=10, jitter_ms=5)
    store = FaultyStorage(inner, config, rng=random.Random(1), clock=clock)
    await inner.put("k", b"v")
    delays = []
    for _ in range(20):
        before = store.delay_s
        task = asyncio.create_task(store.get("k"))
        await wait_for_sleepers(clock, 1)
        clock.advance(0.015)
        await task
        delays.append(store.delay_s - before)
    assert all(0.010 <= d <= 0.015 for d in delays)
    assert len(set(delays)) > 1
    expected_rng = random.Random(1)
    assert delays == pytest.approx([0.010 + expected_rng.uniform(0, 5) / 1000 for _ in range(20)])


async def test_injected_error_happens_before_the_write(inner: MemoryStorage) -> None:
    store = FaultyStorage(inner, FaultConfig(error_rate=1.0))
    with pytest.raises(StorageError) as info:
        await store.write("k", b"v", if_match=None)
    assert not isinstance(info.value, OutcomeUnknown)
    with pytest.raises(StorageError):
        await store.put("k", b"v")
    assert await inner.list() == []
    assert (store.errors_injected, store.lost_injected, store.faults) == (2, 0, 2)


async def test_lost_response_applies_the_write_then_raises_outcome_unknown(
    inner: MemoryStorage,
) -> None:
    store = FaultyStorage(inner, FaultConfig(lost_rate=1.0))
    with pytest.raises(OutcomeUnknown):
        await store.write("k", b"v1", if_match=None)
    blob = await inner.read("k")
    assert blob.data == b"v1"  # it landed
    # The caller resolves the unknown outcome by re-reading: the bytes are its own.
    assert (await store.read("k")).data == b"v1"
    with pytest.raises(OutcomeUnknown):
        await store.write("k", b"v2", if_match=blob.etag)
    assert (await inner.read("k")).data == b"v2"
    assert store.lost_injected == 2


async def test_conflicts_pass_through_unchanged(inner: MemoryStorage) -> None:
    store = FaultyStorage(inner, FaultConfig(lost_rate=1.0))
    await inner.put("k", b"v")
    with pytest.raises(Conflict):
        await store.write("k", b"x", if_match=None)  # rejected before any response is lost
    assert store.lost_injected == 0


async def test_read_errors(inner: MemoryStorage) -> None:
    await inner.put("k", b"v")
    store = FaultyStorage(inner, FaultConfig(read_error_rate=1.0))
    for call in (lambda: store.read("k"), lambda: store.get("k"), store.list):
        with pytest.raises(StorageError):
            await call()
    assert store.errors_injected == 3


async def test_rates_follow_the_seed() -> None:
    config = FaultConfig(error_rate=0.3, lost_rate=0.2)

    async def pattern(seed: int) -> tuple[list[str], set[str]]:
        inner = MemoryStorage()  # a private store per run
        store = FaultyStorage(inner, config, rng=random.Random(seed))
        kinds = []
        for i in range(200):
            try:
                await store.put(f"k{i:03d}", b"v")
                kinds.append("ok")
            except OutcomeUnknown:
                kinds.append("lost")
            except StorageError:
                kinds.append("error")
        return kinds, set(await inner.list())

    (first, landed), (again, _), (other, _) = await pattern(7), await pattern(7), await pattern(8)
    assert first == again
    assert first != other
    assert 30 <= first.count("error") <= 90
    assert 15 <= first.count("lost") <= 70
    # a lost write landed, an errored one did not
    assert landed == {f"k{i:03d}" for i, kind in enumerate(first) if kind != "error"}


async def test_url_opens_a_wrapper_with_counters() -> None:
    name = f"faults-url-{uuid.uuid4().hex[:8]}"
    store = from_url(f"latency+memory://{name}?error_rate=1&seed=1")
    assert isinstance(store, FaultyStorage)
    with pytest.raises(StorageError):
        await store.put("k", b"v")
    assert store.faults == 1
    assert store.capabilities == store.inner.capabilities
    await store.close()
    MemoryStorage.drop(name)


def test_config_validation_names_the_field() -> None:
    with pytest.raises(InvalidInput) as info:
        FaultConfig(lost_rate=0.7, error_rate=0.5)
    assert info.value.field == "lost_rate"
    with pytest.raises(InvalidInput) as info:
        FaultConfig(jitter_ms=float("nan"))
    assert info.value.field == "jitter_ms"
