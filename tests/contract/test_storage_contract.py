"""The storage contract: every backend runs exactly these tests.

Backends: ``memory``, ``file``, ``s3`` (moto's server, single-threaded),
``azure`` (Azurite) and ``gcs`` (the GCS XML-API shim of
:mod:`servers.gcs_shim`: generation preconditions as Google documents
them; it checks obstore's GCS code paths and our use of them, not GCS
itself).  A backend that cannot do something says so through its
``Capabilities`` and the test asserts what that flag implies; nothing is
skipped.  Each test gets a fresh store (its own memory name, directory or
bucket prefix).
"""

from __future__ import annotations

import asyncio
import random
import sys
from collections.abc import AsyncIterator, Awaitable, Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest
from backends import BACKENDS_WITH_GCS, backend_url

from osqueue.errors import Conflict, InvalidInput, NotFound
from osqueue.storage import Storage, from_url

WORKER = Path(__file__).with_name("cas_worker.py")


@dataclass
class Backend:
    name: str
    url: str

    def open(self) -> Storage:
        return from_url(self.url)


@pytest.fixture(params=BACKENDS_WITH_GCS)
def backend(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[Backend]:
    with backend_url(request, request.param, tmp_path, "contract") as url:
        yield Backend(request.param, url)


@pytest.fixture
async def store(backend: Backend) -> AsyncIterator[Storage]:
    s = backend.open()
    yield s
    await s.close()


async def outcomes(calls: list[Awaitable[str]]) -> tuple[list[str], int]:
    """Run writes concurrently; return the ETags of the winners and the number of Conflicts."""
    results = await asyncio.gather(*calls, return_exceptions=True)
    wins = [r for r in results if isinstance(r, str)]
    conflicts = sum(isinstance(r, Conflict) for r in results)
    unexpected = [r for r in results if not isinstance(r, str | Conflict)]
    assert not unexpected, unexpected
    return wins, conflicts


# ---------------------------------------------------------------------- conditional writes


async def test_create_if_absent(store: Storage) -> None:
    etag = await store.write("queue.json", b"v1", if_match=None)
    assert await store.read("queue.json") == (b"v1", etag)
    with pytest.raises(Conflict):
        await store.write("queue.json", b"v2", if_match=None)
    assert await store.read("queue.json") == (b"v1", etag)


async def test_racing_creates_exactly_one_wins(store: Storage) -> None:
    bodies = [f"writer-{i}".encode() for i in range(8)]
    wins, conflicts = await outcomes(
        [store.write("queue.json", body, if_match=None) for body in bodies]
    )
    assert len(wins) == 1
    assert conflicts == 7
    blob = await store.read("queue.json")
    assert blob.etag == wins[0]
    assert blob.data in bodies


async def test_stale_etag_is_rejected(store: Storage) -> None:
    first = await store.write("queue.json", b"v1", if_match=None)
    second = await store.write("queue.json", b"v2", if_match=first)
    assert second != first
    with pytest.raises(Conflict):
        await store.write("queue.json", b"v3", if_match=first)
    assert await store.read("queue.json") == (b"v2", second)
    third = await store.write("queue.json", b"v3", if_match=second)
    assert await store.read("queue.json") == (b"v3", third)


async def test_if_match_on_missing_key_is_conflict(store: Storage) -> None:
    etag = await store.write("other.json", b"x", if_match=None)
    with pytest.raises(Conflict):
        await store.write("queue.json", b"x", if_match=etag)
    with pytest.raises(NotFound):
        await store.read("queue.json")


async def test_deleted_object_cannot_be_updated_with_its_old_etag(store: Storage) -> None:
    etag = await store.write("queue.json", b"v1", if_match=None)
    await store.delete("queue.json")
    with pytest.raises(Conflict):
        await store.write("queue.json", b"v2", if_match=etag)
    again = await store.write("queue.json", b"v3", if_match=None)
    assert await store.read("queue.json") == (b"v3", again)


async def test_put_changes_the_etag(store: Storage) -> None:
    etag = await store.write("queue.json", b"v1", if_match=None)
    await store.put("queue.json", b"v2")
    with pytest.raises(Conflict):
        await store.write("queue.json", b"v3", if_match=etag)
    assert await store.get("queue.json") == b"v2"


async def test_same_bytes_again_repeat_the_etag_only_for_content_etags(store: Storage) -> None:
    e1 = await store.write("queue.json", b"A", if_match=None)
    e2 = await store.write("queue.json", b"B", if_match=e1)
    e3 = await store.write("queue.json", b"A", if_match=e2)
    assert e1 != e2 != e3
    if store.capabilities.content_etags:
        assert e3 == e1  # ABA: the document's version field is what tells them apart
    else:
        assert e3 != e1
        with pytest.raises(Conflict):
            await store.write("queue.json", b"C", if_match=e1)


# ---------------------------------------------------------------------- concurrency


async def test_concurrent_writers_one_winner_per_round(store: Storage) -> None:
    """8 writers x 10 rounds: each round all read the same state, exactly one CAS lands."""
    writers, rounds = 8, 10
    await store.write("counter", b"0", if_match=None)
    successes = 0
    for _ in range(rounds):
        blobs = await asyncio.gather(*(store.read("counter") for _ in range(writers)))
        assert len({b.etag for b in blobs}) == 1
        wins, conflicts = await outcomes(
            [store.write("counter", str(int(b.data) + 1).encode(), if_match=b.etag) for b in blobs]
        )
        assert (len(wins), conflicts) == (1, writers - 1)
        successes += len(wins)
    blob = await store.read("counter")
    assert int(blob.data) == successes == rounds


async def test_free_running_writers_lose_no_update(store: Storage) -> None:
    """Writers retry read-modify-write until each landed its share; the total is exact."""
    writers, increments = 4, 8
    await store.write("counter", b"0", if_match=None)
    seen: list[int] = []

    async def writer() -> int:
        conflicts = 0
        done = 0
        while done < increments:
            blob = await store.read("counter")
            value = int(blob.data) + 1
            try:
                await store.write("counter", str(value).encode(), if_match=blob.etag)
            except Conflict:
                conflicts += 1
            else:
                seen.append(value)
                done += 1
        return conflicts

    await asyncio.gather(*(writer() for _ in range(writers)))
    assert int((await store.read("counter")).data) == writers * increments
    assert sorted(seen) == list(range(1, writers * increments + 1))  # every value won once


async def _spawn_worker(url: str, key: str, count: int) -> asyncio.subprocess.Process:
    proc = await asyncio.create_subprocess_exec(
        sys.executable,
        str(WORKER),
        url,
        key,
        str(count),
        stdin=asyncio.subprocess.PIPE,
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.PIPE,
    )
    assert proc.stdout is not None
    assert await proc.stdout.readline() == b"ready\n"
    return proc


async def _finish(proc: asyncio.subprocess.Process) -> str:
    out, err = await proc.communicate(b"go\n")
    assert proc.returncode == 0, err.decode(errors="replace")[-2000:]
    return out.decode().strip()


async def test_writers_in_other_processes(backend: Backend, store: Storage) -> None:
    """Processes racing CAS increments; a store that is not cross-process is invisible to them."""
    await store.write("counter", b"0", if_match=None)
    if not store.capabilities.cross_process:
        probe = await _spawn_worker(backend.url, "counter", 0)
        assert await _finish(probe) == "missing"
        return
    processes, increments = 3, 10
    procs = [await _spawn_worker(backend.url, "counter", increments) for _ in range(processes)]
    reports = await asyncio.gather(*(_finish(p) for p in procs))
    assert all(r.startswith(f"done {increments} ") for r in reports), reports
    assert int((await store.read("counter")).data) == processes * increments


# ---------------------------------------------------------------------- plain objects


async def test_read_after_write_through_another_handle(backend: Backend, store: Storage) -> None:
    other = backend.open()
    try:
        etag = await store.write("queue.json", b"v1", if_match=None)
        assert await other.read("queue.json") == (b"v1", etag)
        etag = await other.write("queue.json", b"v2", if_match=etag)
        assert await store.read("queue.json") == (b"v2", etag)
        await store.put("payloads/p1", b"payload")
        assert await other.get("payloads/p1") == b"payload"
        assert await other.list() == ["payloads/p1", "queue.json"]
        await other.delete("queue.json")
        with pytest.raises(NotFound):
            await store.read("queue.json")
    finally:
        await other.close()


async def test_large_object_round_trip(store: Storage) -> None:
    """50 MB through a conditional write and through put (multipart upload on the clouds)."""
    data = random.Random(50).randbytes(50 * 1024 * 1024 + 7)
    etag = await store.write("big.bin", data, if_match=None)
    blob = await store.read("big.bin")
    assert blob.etag == etag
    assert len(blob.data) == len(data)
    assert blob.data == data
    await store.delete("big.bin")
    await store.put("payloads/big.bin", data)
    assert await store.get("payloads/big.bin") == data
    await store.delete("payloads/big.bin")


UNUSUAL_KEYS = [
    "a b/c d.json",
    "ünï/çødé.json",
    "x=1+2%3.json",
    "p%20q",
    "semi;colon,comma",
    "q?x&y",
    "hash#tag",
    "tilde~star*",
    "emoji-🎉",
    "quote'double\"",
    "archive/date=2026-11-21/hour=23/00000000000000001842.jsonl",
]


async def test_unusual_keys(store: Storage) -> None:
    for i, key in enumerate(UNUSUAL_KEYS):
        etag = await store.write(key, f"value {i}".encode(), if_match=None)
        assert await store.read(key) == (f"value {i}".encode(), etag)
        await store.write(key, f"value {i}!".encode(), if_match=etag)
    assert await store.list() == sorted(UNUSUAL_KEYS)
    for i, key in enumerate(UNUSUAL_KEYS):
        assert await store.get(key) == f"value {i}!".encode()


async def test_list_with_prefix(store: Storage) -> None:
    keys = [
        "archive/date=2026-11-20/hour=23/00000000000000000007.jsonl",
        "archive/date=2026-11-21/hour=00/00000000000000000009.jsonl",
        "archive/date=2026-11-21/hour=01/00000000000000000012.jsonl",
        "archived.txt",
        "payloads/01JD0000000000000000000000",
        "queue.json",
    ]
    for key in reversed(keys):
        await store.put(key, b"x")
    assert await store.list() == keys
    assert await store.list("") == keys
    assert await store.list("archive/") == keys[:3]
    assert await store.list("archive/date=2026-11-21/") == keys[1:3]
    assert await store.list("archive/date=2026-11-21/hour=0") == keys[1:3]
    assert await store.list("arch") == keys[:4]
    assert await store.list("queue.json") == ["queue.json"]
    assert await store.list("nothing/") == []
    assert await store.list("q") == ["queue.json"]


async def test_missing_objects(store: Storage) -> None:
    with pytest.raises(NotFound):
        await store.read("missing.json")
    with pytest.raises(NotFound):
        await store.get("missing.json")
    with pytest.raises(NotFound):  # error text naming a missing bucket is not fooled by keys
        await store.read("NoSuchBucket/ContainerNotFound")
    await store.delete("missing.json")  # deleting a missing object is fine
    await store.put("present.json", b"x")
    await store.delete("present.json")
    await store.delete("present.json")
    with pytest.raises(NotFound):
        await store.get("present.json")
    assert await store.list() == []


BAD_KEYS = [
    "",
    "/abs.json",
    "../escape",
    "a/../../b",
    "a//b",
    "a/./b",
    "trailing/",
    "nul\x00x",
    "line\nbreak",
    ".osqueue-locks/000.lock",  # reserved for the backends' own files
    "x" * 256,  # a segment longer than 255 bytes
]


async def test_invalid_keys_are_rejected(store: Storage) -> None:
    for key in BAD_KEYS:
        with pytest.raises(InvalidInput) as info:
            await store.write(key, b"x", if_match=None)
        assert info.value.field == "key"
        with pytest.raises(InvalidInput):
            await store.read(key)
        with pytest.raises(InvalidInput):
            await store.put(key, b"x")
        with pytest.raises(InvalidInput):
            await store.delete(key)
    assert await store.list() == []


async def test_url_and_capabilities_are_stable(backend: Backend, store: Storage) -> None:
    reopened = from_url(store.url) if backend.name in ("memory", "file") else backend.open()
    try:
        assert reopened.capabilities == store.capabilities
        await store.put("k", b"v")
        assert await reopened.get("k") == b"v"
    finally:
        await reopened.close()
    assert store.capabilities.durable == (backend.name != "memory")
    assert "secret" not in store.url
    assert "account_key" not in store.url
