"""``file:///abs/dir``: compare-and-set on a local filesystem, safe across processes.

Layout: the key ``a/b.json`` is the plain file ``<root>/a/b.json`` (so ``cat``
works), and the store keeps two kinds of private files whose names start with
the reserved ``.osqueue-`` prefix: temporary files beside their target, and
lock files in ``<root>/.osqueue-locks/``.  Listing skips both.

Writing (``write``, ``put``, ``delete``):

1. the bytes go to a temporary file in the target's own directory and are
   fsynced, before any lock is taken (a 50 MB payload does not hold anyone up);
2. under an exclusive ``fcntl.flock`` on the key's lock file (one of 256 lock
   files chosen by a hash of the key; ``flock`` locks belong to the open file,
   so they exclude other threads of this process as well as other processes),
   the current ETag is compared with ``if_match``;
3. the temporary file's mtime is set (see below), it is fsynced again and
   ``os.replace``-d over the target, and the directory is fsynced.

A crash at any point leaves either the old file or the new one, never a torn
one; at worst a stray ``.osqueue-tmp-*`` file remains (listing ignores it).

The ETag is ``<mtime_ns>-<inode>-<size>`` (hex) of the file.  A file is never
modified in place, only replaced, so reading opens the file and takes the ETag
from ``fstat`` of the same descriptor: bytes and ETag always belong together,
and readers need no lock.  To make ETags never repeat, the writer sets the new
file's mtime, under the lock, to ``max(now, previous mtime + 1 ns)``: for one
key the mtime grows strictly with every write, so an old ETag can never match
again (no ABA, even when the same bytes are written twice and the inode number
is reused).  After a delete the next file starts from the wall clock, and the
inode and size are part of the ETag too, so a repeat would need the clock to
step back to the same nanosecond with the same inode and size.  On filesystems
that store coarse timestamps the writer detects the truncation and steps the
mtime further (up to 2 s) until it grows.  This needs a local filesystem with
``flock`` (not NFS).

Blocking calls run in ``asyncio.to_thread``; a cancelled write may still
finish in its thread, so cancellation leaves the outcome unknown (re-read).  Keys are checked by
:mod:`osqueue.storage.keys`, so they cannot leave the root (no ``..``, no
absolute keys, no NUL).
"""

from __future__ import annotations

import asyncio
import contextlib
import errno
import fcntl
import hashlib
import os
import stat
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path

from osqueue.errors import Conflict, InvalidInput, NotFound, StorageError
from osqueue.storage.keys import RESERVED_PREFIX, as_bytes, check_key, check_prefix
from osqueue.storage.port import Blob, Capabilities

LOCK_DIR = f"{RESERVED_PREFIX}locks"
TMP_PREFIX = f"{RESERVED_PREFIX}tmp-"
LOCK_STRIPES = 256
# Steps tried when the filesystem truncates the mtime we set (ns, us, ms, s, 2 s: FAT).
_MTIME_STEPS_NS = (1, 1_000, 1_000_000, 1_000_000_000, 2_000_000_000)

_CAPABILITIES = Capabilities(cross_process=True, content_etags=False, durable=True)


def _etag(st: os.stat_result) -> str:
    return f"{st.st_mtime_ns:x}-{st.st_ino:x}-{st.st_size:x}"


def _fsync_dir(path: str) -> None:
    fd = os.open(path, os.O_RDONLY | os.O_DIRECTORY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


class FileStorage:
    """A :class:`~osqueue.storage.port.Storage` in a local directory."""

    def __init__(self, root: str | os.PathLike[str], *, fsync: bool = True) -> None:
        path = Path(root)
        if not path.is_absolute():
            raise InvalidInput(f"{str(root)!r} is not an absolute path", field="root")
        self.root = str(path)
        self.fsync = fsync
        try:
            os.makedirs(os.path.join(self.root, LOCK_DIR), exist_ok=True)
        except OSError as exc:
            raise StorageError(f"cannot create store directory {self.root!r}", cause=exc) from exc
        self._url = path.as_uri()

    @property
    def url(self) -> str:
        return self._url

    @property
    def capabilities(self) -> Capabilities:
        return _CAPABILITIES

    # ------------------------------------------------------------------ helpers

    def _path(self, key: str) -> str:
        return os.path.join(self.root, *check_key(key).split("/"))

    @contextlib.contextmanager
    def _locked(self, key: str) -> Iterator[None]:
        stripe = int.from_bytes(hashlib.blake2b(key.encode(), digest_size=2).digest())
        lock_path = os.path.join(self.root, LOCK_DIR, f"{stripe % LOCK_STRIPES:03d}.lock")
        fd = os.open(lock_path, os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o644)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX)
            yield
        finally:
            os.close(fd)  # closing the descriptor releases the lock

    def _current(self, key: str, path: str) -> os.stat_result | None:
        try:
            st = os.stat(path)
        except (FileNotFoundError, NotADirectoryError):
            return None
        if not stat.S_ISREG(st.st_mode):
            raise InvalidInput(
                f"{key!r} is a folder of other keys in {self._url}; it cannot also be an object",
                field="key",
            )
        return st

    def _makedirs(self, directory: str) -> None:
        """Create ``directory`` and missing parents, fsyncing each new entry's parent."""
        if os.path.isdir(directory):
            return
        if directory == self.root:
            raise self._root_missing()
        parent = os.path.dirname(directory)
        self._makedirs(parent)
        try:
            os.mkdir(directory)
        except FileExistsError:
            if not os.path.isdir(directory):
                name = os.path.relpath(directory, self.root).replace(os.sep, "/")
                raise InvalidInput(
                    f"{name!r} is an object in {self._url}; it cannot also be a folder",
                    field="key",
                ) from None
            return
        if self.fsync:
            _fsync_dir(parent)

    def _root_missing(self) -> StorageError:
        cause = FileNotFoundError(errno.ENOENT, "missing or not a directory", self.root)
        return StorageError(f"{self._url}: the store's directory is gone", cause=cause)

    def _stamp(self, fd: int, previous: os.stat_result | None) -> os.stat_result:
        """Give the new file an mtime strictly above the previous one's; return its stat."""
        floor = previous.st_mtime_ns if previous is not None else -1
        wanted = max(time.time_ns(), floor + 1)
        for step in _MTIME_STEPS_NS:
            os.utime(fd, ns=(wanted, wanted))
            st = os.fstat(fd)
            if st.st_mtime_ns > floor:
                return st
            wanted = max(wanted, floor) + step
        raise StorageError(f"{self._url}: the filesystem does not keep file mtimes; cannot version")

    # ------------------------------------------------------------------ blocking parts

    def _read_sync(self, key: str) -> Blob:
        path = self._path(key)
        try:
            fd = os.open(path, os.O_RDONLY | os.O_CLOEXEC)
        except (FileNotFoundError, NotADirectoryError):
            if not os.path.isdir(self.root):
                raise self._root_missing() from None
            raise NotFound(f"{self._url}: {key!r} does not exist") from None
        try:
            st = os.fstat(fd)
            if not stat.S_ISREG(st.st_mode):
                raise NotFound(f"{self._url}: {key!r} is a folder, not an object")
            with os.fdopen(fd, "rb", closefd=False) as f:
                data = f.read()
        finally:
            os.close(fd)
        return Blob(data, _etag(st))

    def _write_sync(self, key: str, data: bytes, if_match: str | None, conditional: bool) -> str:
        path = self._path(key)
        directory = os.path.dirname(path)
        self._makedirs(directory)
        fd, tmp = tempfile.mkstemp(prefix=TMP_PREFIX, dir=directory)
        try:
            with memoryview(data) as view:
                written = 0
                while written < len(view):
                    written += os.write(fd, view[written:])
            if self.fsync:
                os.fsync(fd)
            with self._locked(key):
                current = self._current(key, path)
                if conditional:
                    self._check(key, current, if_match)
                st = self._stamp(fd, current)
                if self.fsync:
                    os.fsync(fd)
                os.replace(tmp, path)
                tmp = ""
                if self.fsync:
                    _fsync_dir(directory)
                return _etag(st)
        finally:
            os.close(fd)
            if tmp:
                with contextlib.suppress(FileNotFoundError):
                    os.unlink(tmp)

    def _check(self, key: str, current: os.stat_result | None, if_match: str | None) -> None:
        if if_match is None:
            if current is not None:
                raise Conflict(f"{self._url}: {key!r} already exists")
        elif current is None:
            raise Conflict(f"{self._url}: {key!r} does not exist (if_match={if_match!r})")
        elif _etag(current) != if_match:
            raise Conflict(f"{self._url}: {key!r} changed (if_match={if_match!r})")

    def _delete_sync(self, key: str) -> None:
        path = self._path(key)
        with self._locked(key):
            if self._current(key, path) is None:
                return
            os.unlink(path)
            if self.fsync:
                _fsync_dir(os.path.dirname(path))

    def _list_sync(self, prefix: str) -> list[str]:
        if not os.path.isdir(self.root):
            raise self._root_missing()
        head, _, _ = prefix.rpartition("/")
        start = os.path.join(self.root, *head.split("/")) if head else self.root
        keys: list[str] = []
        stack = [(start, f"{head}/" if head else "")]
        while stack:
            directory, rel = stack.pop()
            try:
                entries = list(os.scandir(directory))
            except (FileNotFoundError, NotADirectoryError):
                continue
            for entry in entries:
                if entry.name.startswith(RESERVED_PREFIX):
                    continue
                key = rel + entry.name
                if entry.is_dir(follow_symlinks=False):
                    if key.startswith(prefix) or prefix.startswith(key + "/"):
                        stack.append((entry.path, key + "/"))
                elif entry.is_file() and key.startswith(prefix):
                    keys.append(key)
        keys.sort()
        return keys

    # ------------------------------------------------------------------ Storage

    async def read(self, key: str) -> Blob:
        check_key(key)
        try:
            return await asyncio.to_thread(self._read_sync, key)
        except OSError as exc:
            raise _io_error("read", self._url, key, exc) from exc

    async def write(self, key: str, data: bytes, *, if_match: str | None) -> str:
        check_key(key)
        data = as_bytes(data)
        try:
            return await asyncio.to_thread(self._write_sync, key, data, if_match, True)
        except OSError as exc:
            raise _io_error("write", self._url, key, exc) from exc

    async def put(self, key: str, data: bytes) -> None:
        check_key(key)
        data = as_bytes(data)
        try:
            await asyncio.to_thread(self._write_sync, key, data, None, False)
        except OSError as exc:
            raise _io_error("put", self._url, key, exc) from exc

    async def get(self, key: str) -> bytes:
        return (await self.read(key)).data

    async def delete(self, key: str) -> None:
        check_key(key)
        try:
            await asyncio.to_thread(self._delete_sync, key)
        except OSError as exc:
            raise _io_error("delete", self._url, key, exc) from exc

    async def list(self, prefix: str = "") -> list[str]:
        check_prefix(prefix)
        try:
            return await asyncio.to_thread(self._list_sync, prefix)
        except OSError as exc:
            raise _io_error("list", self._url, prefix, exc) from exc

    async def close(self) -> None:
        return None

    def __repr__(self) -> str:
        return f"FileStorage({self.root!r})"


def _io_error(op: str, url: str, key: str, exc: OSError) -> StorageError:
    reason = errno.errorcode.get(exc.errno or 0, type(exc).__name__)
    return StorageError(f"{url}: {op} {key!r} failed ({reason}: {exc.strerror or exc})", cause=exc)
