"""``memory://``: shared by name, private when unnamed, counter or MD5 ETags."""

from __future__ import annotations

import asyncio
import hashlib
import threading
import uuid
from collections.abc import Iterator

import pytest

from osqueue.errors import Conflict, InvalidInput
from osqueue.storage import MemoryStorage, from_url


@pytest.fixture
def name() -> Iterator[str]:
    value = f"mem-{uuid.uuid4().hex[:8]}"
    yield value
    MemoryStorage.drop(value)


async def test_stores_are_shared_by_name(name: str) -> None:
    a, b = from_url(f"memory://{name}"), from_url(f"memory://{name}")
    etag = await a.write("k", b"v", if_match=None)
    assert await b.read("k") == (b"v", etag)
    assert name in MemoryStorage.names()
    other = from_url(f"memory://{name}-other")
    assert await other.list() == []
    MemoryStorage.drop(f"{name}-other")


async def test_unnamed_stores_are_private() -> None:
    a, b = MemoryStorage(), from_url("memory://")
    await a.put("k", b"v")
    assert await b.list() == []
    assert not any(n.startswith(".anonymous") for n in MemoryStorage.names())


async def test_reset_empties_and_drop_forgets(name: str) -> None:
    store = MemoryStorage(name)
    await store.put("k", b"v")
    MemoryStorage.reset(name)
    assert await store.list() == []
    await store.put("k", b"v")
    MemoryStorage.drop(name)
    assert name not in MemoryStorage.names()
    assert await MemoryStorage(name).list() == []


async def test_md5_etags_are_content_hashes_so_aba_is_possible(name: str) -> None:
    store = MemoryStorage(name, etag="md5")
    e1 = await store.write("k", b"same bytes", if_match=None)
    assert e1 == hashlib.md5(b"same bytes").hexdigest()
    e2 = await store.write("k", b"other bytes", if_match=e1)
    e3 = await store.write("k", b"same bytes", if_match=e2)
    assert e3 == e1
    # ABA: a writer holding the first ETag now succeeds although the object changed twice
    await store.write("k", b"late writer", if_match=e1)
    assert await store.get("k") == b"late writer"


async def test_counter_etags_never_repeat(name: str) -> None:
    store = MemoryStorage(name)
    seen = [await store.write("k", b"x", if_match=None)]
    for _ in range(50):
        seen.append(await store.write("k", b"x", if_match=seen[-1]))
    await store.delete("k")
    seen.append(await store.write("k", b"x", if_match=None))
    await MemoryStorage(f"{name}-2").put("k", b"x")
    seen.append((await MemoryStorage(f"{name}-2").read("k")).etag)
    MemoryStorage.drop(f"{name}-2")
    assert len(set(seen)) == len(seen)
    with pytest.raises(Conflict):
        await store.write("k", b"y", if_match=seen[0])


async def test_threads_racing_one_key_lose_no_update(name: str) -> None:
    """The registry and each store are thread-safe: each thread runs its own event loop."""
    store = MemoryStorage(name)
    await store.write("counter", b"0", if_match=None)

    async def increments(n: int) -> None:
        done = 0
        while done < n:
            blob = await store.read("counter")
            try:
                await store.write("counter", str(int(blob.data) + 1).encode(), if_match=blob.etag)
                done += 1
            except Conflict:
                pass

    threads = [threading.Thread(target=asyncio.run, args=(increments(200),)) for _ in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert await store.get("counter") == b"800"


def test_bad_etag_mode() -> None:
    with pytest.raises(InvalidInput) as info:
        MemoryStorage("x", etag="sha1")  # type: ignore[arg-type]
    assert info.value.field == "etag"
