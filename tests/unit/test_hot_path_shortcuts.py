"""The per-commit shortcuts change no answer: a key checked once is not checked again
but a bad key is still refused with the same error; the archive writer's own queue
writes every due object once, wakes one waiting writer per object, and a graceful
drain waits for all."""

from __future__ import annotations

import asyncio

import pytest

from osqueue.broker.archive import writer
from osqueue.broker.archive.writer import Archiver
from osqueue.broker.config import BrokerConfig
from osqueue.broker.core.retry import StorageRetry
from osqueue.broker.core.tasks import SideTasks
from osqueue.broker.observe.counters import BrokerCounters
from osqueue.clock import ManualClock
from osqueue.errors import InvalidInput
from osqueue.state import StoredJob
from osqueue.storage import MemoryStorage
from osqueue.storage import keys as keys_module
from osqueue.storage.keys import check_key
from osqueue.storage.port import Storage

BAD_KEYS: list[tuple[object, str]] = [
    ("", "must not be empty"),
    ("/queue.json", "is absolute"),
    ("a//b", "an empty segment"),
    ("a/../b", "a '..' segment"),
    ("./queue.json", "a '.' segment"),
    ("queue.json/", "an empty segment"),
    (".osqueue-lock", "are reserved"),
    ("a\x00b", "control character"),
    ("x" * 256, "longer than 255 bytes"),
    ("y" * 1025, "longer than 1024 bytes"),
    (b"queue.json", "must be a str, not bytes"),
]


@pytest.mark.parametrize(("bad", "why"), BAD_KEYS)
def test_a_bad_key_is_refused_after_good_keys_were_checked(bad: object, why: str) -> None:
    for good in ("queue.json", "archive/date=2027-01-15/hour=08/1-x.jsonl", "ünïcode key"):
        assert check_key(good) == good
        assert check_key(good) == good  # (the second time from what was checked)
    with pytest.raises(InvalidInput, match="key") as first:
        check_key(bad)
    with pytest.raises(InvalidInput) as again:
        check_key(bad)  # a refusal is not remembered as a pass either
    assert why in str(first.value)
    assert str(again.value) == str(first.value)


async def test_the_memory_store_refuses_a_bad_key_after_writing_a_good_one() -> None:
    store = MemoryStorage()
    etag = await store.write("queue.json", b"{}", if_match=None)
    await store.write("queue.json", b"{}", if_match=etag)
    for bad, why in BAD_KEYS:
        with pytest.raises(InvalidInput, match=why):
            await store.write(bad, b"{}", if_match=None)  # type: ignore[arg-type]
        with pytest.raises(InvalidInput, match=why):
            await store.put(bad, b"{}")  # type: ignore[arg-type]
    assert await store.list() == ["queue.json"]
    with pytest.raises(InvalidInput, match="must be bytes, not str"):
        await store.write("other.json", "{}", if_match=None)  # type: ignore[arg-type]
    await store.write("other.json", bytearray(b"[]"), if_match=None)  # type: ignore[arg-type]
    stored = await store.read("other.json")
    assert type(stored.data) is bytes
    assert stored.data == b"[]"


def test_a_str_subclass_is_checked_in_full_and_the_checked_keys_stay_few() -> None:
    class Key(str):
        pass

    assert check_key("queue.json") == "queue.json"
    assert type(check_key(Key("queue.json"))) is Key
    with pytest.raises(InvalidInput, match="empty segment"):
        check_key(Key("a//b"))
    for n in range(3 * keys_module._CHECKED_MAX):
        check_key(f"archive/{n}.jsonl")
    assert len(keys_module._CHECKED) <= keys_module._CHECKED_MAX


def _archiver(written: list[int], concurrency: int) -> tuple[Archiver, SideTasks]:
    config = BrokerConfig()
    tasks = SideTasks()
    archiver = Archiver(
        MemoryStorage(),
        concurrency,
        tasks=tasks,
        retry=StorageRetry(config, ManualClock()),
        counters=BrokerCounters(),
        written=written.append,
    )
    return archiver, tasks


def _jobs(version: int) -> list[StoredJob]:
    return [version] * 2  # type: ignore[list-item]  # (the fake write reads the version only)


@pytest.fixture
def gated(monkeypatch: pytest.MonkeyPatch) -> tuple[asyncio.Event, list[int]]:
    """Archive writes that wait for the gate; the versions whose write started."""
    gate, started = asyncio.Event(), []

    async def write_archive(storage: Storage, jobs: list[StoredJob], queue_id: str) -> int:
        version = int(jobs[0])  # type: ignore[call-overload]
        started.append(version)
        await gate.wait()
        return version

    monkeypatch.setattr(writer, "write_archive", write_archive)
    return gate, started


async def test_every_due_object_is_written_once_by_at_most_concurrency_writers(
    gated: tuple[asyncio.Event, list[int]],
) -> None:
    gate, started = gated
    written: list[int] = []
    archiver, tasks = _archiver(written, concurrency=3)
    for version in range(1, 8):
        archiver.add(_jobs(version), "q")
    assert archiver.pending == 7
    drained = asyncio.ensure_future(archiver.drain(60.0))
    for _ in range(5):
        await asyncio.sleep(0)
    assert sorted(started) == [1, 2, 3]  # three writers, each on one object
    assert not drained.done()  # a drain waits for the writes in flight
    gate.set()
    await drained
    assert sorted(written) == list(range(1, 8))
    assert sorted(started) == list(range(1, 8))
    assert archiver.pending == 0
    # The writers wait, idle; a new object wakes one of them (no fourth writer).
    archiver.add(_jobs(8), "q")
    await archiver.drain(60.0)
    assert sorted(written) == list(range(1, 9))
    assert len(list(tasks)) == 3
    await tasks.cancel()


async def test_a_writer_cancelled_after_it_was_woken_passes_the_object_on(
    gated: tuple[asyncio.Event, list[int]],
) -> None:
    gate, _ = gated
    gate.set()
    written: list[int] = []
    archiver, tasks = _archiver(written, concurrency=2)
    archiver.add(_jobs(1), "q")
    archiver.add(_jobs(2), "q")
    await archiver.drain(60.0)
    for _ in range(3):
        await asyncio.sleep(0)
    assert archiver.pending == 0  # both writers wait
    writers = list(tasks)
    assert len(writers) == 2
    archiver.add(_jobs(3), "q")  # wakes one writer, which is cancelled before it runs
    woken = [task for task in writers if _woken(task)]
    assert len(woken) == 1
    woken[0].cancel()
    await archiver.drain(5.0)  # (returns at once once it is written; 5 s only if never)
    assert sorted(written) == [1, 2, 3]  # the other writer took the object
    await tasks.cancel()


def _woken(task: asyncio.Task[None]) -> bool:
    """The task waits on a future already resolved (it runs at the next turn)."""
    waiting = getattr(task, "_fut_waiter", None)
    return waiting is not None and waiting.done() and not waiting.cancelled()
