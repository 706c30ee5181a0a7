"""``file://`` specifics: plain files on disk, private files hidden, ETags that never repeat."""

from __future__ import annotations

import os
import shutil
import time
from collections.abc import Awaitable, Callable
from pathlib import Path

import pytest

from osqueue.errors import Conflict, InvalidInput, NotFound, StorageError, UnsafePath
from osqueue.storage import FileStorage, from_url


@pytest.fixture
def root(tmp_path: Path) -> Path:
    return tmp_path / "q"


@pytest.fixture
def store(root: Path) -> FileStorage:
    return FileStorage(root)


def private_files(root: Path) -> list[str]:
    return sorted(
        str(p.relative_to(root))
        for p in root.rglob("*")
        if p.name.startswith(".osqueue-")
        and p.name != ".osqueue-locks"
        and ".osqueue-locks" not in p.parts
    )


async def test_objects_are_plain_files(store: FileStorage, root: Path) -> None:
    await store.write("queue.json", b'{"version": 1}', if_match=None)
    await store.put("archive/date=2026-11-21/hour=23/1.jsonl", b"line\n")
    assert (root / "queue.json").read_bytes() == b'{"version": 1}'
    assert (root / "archive/date=2026-11-21/hour=23/1.jsonl").read_bytes() == b"line\n"
    assert private_files(root) == []  # no temporary file left behind


async def test_stray_temporary_files_are_ignored(store: FileStorage, root: Path) -> None:
    etag = await store.write("queue.json", b"v1", if_match=None)
    (root / ".osqueue-tmp-crashed").write_bytes(b"half a docu")  # a crash mid-write
    assert await store.list() == ["queue.json"]
    assert await store.read("queue.json") == (b"v1", etag)
    await store.write("queue.json", b"v2", if_match=etag)


async def test_etags_never_repeat_for_the_same_bytes(
    store: FileStorage, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Even with the wall clock standing still (or going back) and inode numbers reused."""
    clock = iter(range(10_000_000, 0, -1))
    monkeypatch.setattr(time, "time_ns", lambda: next(clock))
    etags = [await store.write("k", b"same", if_match=None)]
    for _ in range(100):
        etags.append(await store.write("k", b"same", if_match=etags[-1]))
    assert len(set(etags)) == len(etags)
    mtimes = [int(e.split("-")[0], 16) for e in etags]
    assert mtimes == sorted(mtimes)
    for old in etags[:-1]:
        with pytest.raises(Conflict):
            await store.write("k", b"same", if_match=old)


async def test_folder_and_object_with_one_name(store: FileStorage) -> None:
    await store.put("a/b", b"x")
    with pytest.raises(InvalidInput) as info:
        await store.write("a", b"y", if_match=None)
    assert info.value.field == "key"
    with pytest.raises(NotFound):
        await store.read("a")
    await store.put("x", b"x")
    with pytest.raises(InvalidInput):
        await store.put("x/y", b"y")


async def test_a_vanished_root_is_a_storage_error_with_cause(
    store: FileStorage, root: Path
) -> None:
    await store.put("k", b"v")
    shutil.rmtree(root)
    with open(root, "wb") as f:  # noqa: ASYNC230 (test setup)
        f.write(b"not a directory")
    calls: list[Callable[[], Awaitable[object]]] = [
        lambda: store.read("k"),
        lambda: store.put("k", b"v"),
        store.list,
        lambda: store.delete("k"),
    ]
    for call in calls:
        with pytest.raises(StorageError) as info:
            await call()
        assert isinstance(info.value.cause, OSError)
        assert info.value.__cause__ is not None or info.value.cause is not None


async def test_keys_never_leave_the_root(store: FileStorage, tmp_path: Path) -> None:
    before = sorted(os.listdir(tmp_path))
    for key in ("../outside", "a/../../outside", "/etc/passwd", "x\x00y"):
        with pytest.raises(InvalidInput):
            await store.put(key, b"x")
    assert sorted(os.listdir(tmp_path)) == before


async def test_fsync_can_be_turned_off(root: Path) -> None:
    store = from_url(root.as_uri() + "?fsync=false")
    assert isinstance(store, FileStorage)
    assert store.fsync is False
    etag = await store.write("k", b"v", if_match=None)
    assert await FileStorage(root).read("k") == (b"v", etag)


def test_root_must_be_absolute() -> None:
    with pytest.raises(InvalidInput) as info:
        FileStorage("relative/dir")
    assert info.value.field == "root"


# --------------------------------------------------------------------------- symbolic links


@pytest.fixture
def outside(tmp_path: Path) -> Path:
    """A folder beside the store, with a file the store must never touch."""
    place = tmp_path / "outside"
    place.mkdir()
    (place / "victim").write_bytes(b"not yours")
    return place


def untouched(outside: Path) -> None:
    assert sorted(p.name for p in outside.iterdir()) == ["victim"]
    assert (outside / "victim").read_bytes() == b"not yours"


async def refused(call: Awaitable[object], key: str, entry: str) -> UnsafePath:
    with pytest.raises(UnsafePath) as info:
        await call
    message = str(info.value)
    assert repr(key) in message, message
    assert f"{entry!r} is a symbolic link" in message, message
    assert isinstance(info.value, StorageError)
    return info.value


@pytest.mark.parametrize("depth", ["payloads", "archive/date=2026-11-21"])
async def test_a_linked_folder_is_refused_by_every_operation(
    store: FileStorage, root: Path, outside: Path, depth: str
) -> None:
    """A folder of the store replaced by a link to a folder outside: nothing is read,
    written, listed or deleted through it, and each refusal names the key and the link."""
    (root / depth).parent.mkdir(parents=True, exist_ok=True)
    (root / depth).symlink_to(outside)
    key = f"{depth}/victim"
    await refused(store.read(key), key, depth)
    await refused(store.get(key), key, depth)
    await refused(store.delete(key), key, depth)
    await refused(store.put(key, b"mine"), key, depth)
    await refused(store.put(f"{depth}/new/deeper", b"mine"), f"{depth}/new/deeper", depth)
    await refused(store.write(f"{depth}/new", b"mine", if_match=None), f"{depth}/new", depth)
    await refused(store.list(f"{depth}/"), f"{depth}/", depth)
    await refused(store.list(depth[:2]), depth[:2], depth)
    await refused(store.list(), "", depth)
    untouched(outside)
    # keys elsewhere work as ever, and the listing of another prefix is not disturbed
    await store.put("queue.json", b"{}")
    assert await store.list("queue") == ["queue.json"]


async def test_an_object_replaced_by_a_link_is_refused(
    store: FileStorage, root: Path, outside: Path
) -> None:
    etag = await store.write("payloads/p", b"payload", if_match=None)
    (root / "payloads/p").unlink()
    (root / "payloads/p").symlink_to(outside / "victim")
    await refused(store.read("payloads/p"), "payloads/p", "payloads/p")
    await refused(store.write("payloads/p", b"mine", if_match=etag), "payloads/p", "payloads/p")
    await refused(store.put("payloads/p", b"mine"), "payloads/p", "payloads/p")
    await refused(store.delete("payloads/p"), "payloads/p", "payloads/p")
    await refused(store.list("payloads/"), "payloads/", "payloads/p")
    untouched(outside)
    assert (root / "payloads/p").is_symlink()  # a delete never removes the link's target


async def test_a_link_to_a_folder_in_an_objects_place_is_refused(
    store: FileStorage, root: Path, outside: Path
) -> None:
    (root / "queue.json").symlink_to(outside)
    await refused(store.read("queue.json"), "queue.json", "queue.json")
    await refused(store.delete("queue.json"), "queue.json", "queue.json")
    untouched(outside)


async def test_a_linked_lock_folder_is_refused(root: Path, outside: Path) -> None:
    store = FileStorage(root)
    await store.put("k", b"v")
    shutil.rmtree(root / ".osqueue-locks")
    (root / ".osqueue-locks").symlink_to(outside)
    await refused(store.put("k", b"w"), "k", ".osqueue-locks")
    await refused(store.delete("k"), "k", ".osqueue-locks")
    with pytest.raises(UnsafePath):
        FileStorage(root)
    untouched(outside)
    assert await store.get("k") == b"v"  # reads take no lock
    (root / ".osqueue-locks").unlink()
    await store.put("k", b"w")  # the lock folder is made again
    (lock,) = [p for p in (root / ".osqueue-locks").iterdir()]
    lock.unlink()
    lock.symlink_to(outside / "victim")
    await refused(store.put("k", b"x"), "k", f".osqueue-locks/{lock.name}")
    untouched(outside)
    assert await store.get("k") == b"w"


async def test_a_fifo_in_an_objects_place_is_refused_without_blocking(
    store: FileStorage, root: Path
) -> None:
    """Opening a FIFO for reading waits for a writer; the store never does."""
    os.mkfifo(root / "queue.json")
    with pytest.raises(UnsafePath, match=r"'queue\.json'.*special file"):
        await store.read("queue.json")
    with pytest.raises(UnsafePath, match="special file"):
        await store.list()


@pytest.mark.parametrize("key", ["../outside/victim", "a/../../outside/victim", "/etc/passwd"])
async def test_no_operation_takes_a_key_out_of_the_root(
    store: FileStorage, tmp_path: Path, outside: Path, key: str
) -> None:
    calls: list[Callable[[], Awaitable[object]]] = [
        lambda: store.read(key),
        lambda: store.get(key),
        lambda: store.write(key, b"x", if_match=None),
        lambda: store.put(key, b"x"),
        lambda: store.delete(key),
    ]
    for call in calls:
        with pytest.raises(InvalidInput) as info:
            await call()
        assert info.value.field == "key"
    for prefix in ("../outside/", "/etc/", "a/\x00/"):
        with pytest.raises(InvalidInput):
            await store.list(prefix)
    untouched(outside)
