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

Nor can the files: the store never follows a symbolic link below its root.
Every operation opens the root (the one path it follows: the operator chose
it), then each folder of the key one name at a time with ``O_NOFOLLOW``
relative to its parent's descriptor, and does its work on the last name
relative to that folder's descriptor (``openat``, ``mkdirat``, ``renameat``,
``unlinkat``, ``fstatat`` without following).  A link (or a FIFO, socket or
device) met anywhere on the way is refused with :class:`~osqueue.errors.UnsafePath`
naming the key and the entry; a listing that meets one is refused the same
way and never descends into it.  There is no check-then-use gap for links: a
link swapped in after a check is still never followed, since a rename and an
unlink act on the link itself, not its target.  What remains is a folder
*moved* out of the root (by someone who can write the root) while an
operation holds its descriptor: that one operation finishes in the moved
folder.  A hard link is a plain file to the store: a write replaces it and a
delete removes the name only, so neither reaches the other file's bytes, but a
read returns them (a payload object's checksum still catches that).
"""

from __future__ import annotations

import asyncio
import contextlib
import errno
import fcntl
import hashlib
import os
import secrets
import stat
import time
from collections.abc import Iterator
from pathlib import Path

from osqueue.errors import Conflict, InvalidInput, NotFound, StorageError, UnsafePath
from osqueue.storage.keys import RESERVED_PREFIX, as_bytes, check_key, check_prefix
from osqueue.storage.port import Blob, Capabilities

LOCK_DIR = f"{RESERVED_PREFIX}locks"
TMP_PREFIX = f"{RESERVED_PREFIX}tmp-"
LOCK_STRIPES = 256
# Steps tried when the filesystem truncates the mtime we set (ns, us, ms, s, 2 s: FAT).
_MTIME_STEPS_NS = (1, 1_000, 1_000_000, 1_000_000_000, 2_000_000_000)

_CAPABILITIES = Capabilities(cross_process=True, content_etags=False, durable=True)

#: a folder below the root: never through a link (a link gives ENOTDIR or ELOOP)
_DIR_FLAGS = os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC
#: an object: never through a link; O_NONBLOCK so a FIFO put there cannot hang a read
_READ_FLAGS = os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC
_TMP_FLAGS = os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC


def _etag(st: os.stat_result) -> str:
    return f"{st.st_mtime_ns:x}-{st.st_ino:x}-{st.st_size:x}"


def _kind(mode: int) -> str:
    if stat.S_ISLNK(mode):
        return "a symbolic link"
    return "a special file (not a folder or a plain file)"


@contextlib.contextmanager
def _closing(fd: int) -> Iterator[int]:
    try:
        yield fd
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
        self._url = path.as_uri()
        try:
            os.makedirs(self.root, exist_ok=True)
            with _closing(self._open_root()) as root_fd:
                os.close(self._child(root_fd, LOCK_DIR, LOCK_DIR, create=True))
        except OSError as exc:
            raise StorageError(f"cannot create store directory {self.root!r}", cause=exc) from exc

    @property
    def url(self) -> str:
        return self._url

    @property
    def capabilities(self) -> Capabilities:
        return _CAPABILITIES

    # ------------------------------------------------------------------ helpers

    def _open_root(self) -> int:
        try:
            return os.open(self.root, os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)
        except (FileNotFoundError, NotADirectoryError) as exc:
            raise self._root_missing(exc) from exc

    def _refused(self, key: str, entry: str, mode: int) -> UnsafePath:
        cause = OSError(errno.ELOOP, "not followed", os.path.join(self.root, *entry.split("/")))
        return UnsafePath(
            f"{self._url}: {key!r} is refused: {entry!r} is {_kind(mode)}; "
            "file:// never follows one out of its root",
            cause=cause,
        )

    def _child(self, parent: int, entry: str, key: str, *, create: bool) -> int:
        """The descriptor of the folder ``entry`` (a path below the root) whose parent
        folder is ``parent``, never through a link; ``key`` is what the caller works
        on, for errors.  Raises FileNotFoundError (also for a plain file where the
        folder would be) unless ``create``."""
        name = entry.rpartition("/")[2]
        for _ in range(3):  # a folder made or removed by someone else meanwhile: look again
            try:
                return os.open(name, _DIR_FLAGS, dir_fd=parent)
            except FileNotFoundError:
                if not create:
                    raise
                try:
                    os.mkdir(name, dir_fd=parent)
                except FileExistsError:
                    continue
                if self.fsync:
                    os.fsync(parent)
            except NotADirectoryError:  # a file, or a link (O_NOFOLLOW says ENOTDIR then)
                mode = os.stat(name, dir_fd=parent, follow_symlinks=False).st_mode
                if not stat.S_ISREG(mode):
                    raise self._refused(key, entry, mode) from None
                if not create:
                    raise
                raise InvalidInput(
                    f"{entry!r} is an object in {self._url}; it cannot also be a folder",
                    field="key",
                ) from None
        raise StorageError(f"{self._url}: {entry!r} keeps changing; cannot open it as a folder")

    def _folder(self, key: str, names: list[str], *, create: bool) -> int:
        """The descriptor of the folder ``names`` below the root, opened one name at a
        time without following links (created if missing when ``create``)."""
        fd = self._open_root()
        try:
            for i in range(len(names)):
                child = self._child(fd, "/".join(names[: i + 1]), key, create=create)
                os.close(fd)
                fd = child
        except BaseException:
            os.close(fd)
            raise
        return fd

    @contextlib.contextmanager
    def _parent(self, key: str, *, create: bool) -> Iterator[tuple[int, str]]:
        """The descriptor of ``key``'s folder, and its last name (FileNotFoundError:
        a folder on the way is missing, and not ``create``)."""
        *names, name = check_key(key).split("/")
        fd = self._folder(key, names, create=create)
        try:
            yield fd, name
        finally:
            os.close(fd)

    @contextlib.contextmanager
    def _locked(self, key: str) -> Iterator[None]:
        stripe = int.from_bytes(hashlib.blake2b(key.encode(), digest_size=2).digest())
        name = f"{stripe % LOCK_STRIPES:03d}.lock"
        with _closing(self._folder(key, [LOCK_DIR], create=True)) as locks:
            try:
                fd = os.open(
                    name, os.O_RDWR | os.O_CREAT | os.O_NOFOLLOW | os.O_CLOEXEC, 0o644, dir_fd=locks
                )
            except OSError as exc:
                if exc.errno != errno.ELOOP:
                    raise
                raise self._refused(key, f"{LOCK_DIR}/{name}", stat.S_IFLNK) from exc
        try:
            fcntl.flock(fd, fcntl.LOCK_EX)
            yield
        finally:
            os.close(fd)  # closing the descriptor releases the lock

    def _current(self, key: str, folder: int, name: str) -> os.stat_result | None:
        try:
            st = os.stat(name, dir_fd=folder, follow_symlinks=False)
        except FileNotFoundError:
            return None
        if stat.S_ISDIR(st.st_mode):
            raise InvalidInput(
                f"{key!r} is a folder of other keys in {self._url}; it cannot also be an object",
                field="key",
            )
        if not stat.S_ISREG(st.st_mode):
            raise self._refused(key, key, st.st_mode)
        return st

    def _root_missing(self, cause: OSError) -> StorageError:
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
        try:
            with self._parent(key, create=False) as (folder, name):
                fd = os.open(name, _READ_FLAGS, dir_fd=folder)
        except FileNotFoundError:
            raise NotFound(f"{self._url}: {key!r} does not exist") from None
        except OSError as exc:
            if exc.errno != errno.ELOOP:  # O_NOFOLLOW met a link
                raise
            raise self._refused(key, key, stat.S_IFLNK) from exc
        with _closing(fd):
            st = os.fstat(fd)
            if stat.S_ISDIR(st.st_mode):
                raise NotFound(f"{self._url}: {key!r} is a folder, not an object")
            if not stat.S_ISREG(st.st_mode):
                raise self._refused(key, key, st.st_mode)
            with os.fdopen(fd, "rb", closefd=False) as f:
                data = f.read()
        return Blob(data, _etag(st))

    def _write_sync(self, key: str, data: bytes, if_match: str | None, conditional: bool) -> str:
        with self._parent(key, create=True) as (folder, name):
            tmp = f"{TMP_PREFIX}{secrets.token_hex(8)}"
            fd = os.open(tmp, _TMP_FLAGS, 0o600, dir_fd=folder)
            try:
                with memoryview(data) as view:
                    written = 0
                    while written < len(view):
                        written += os.write(fd, view[written:])
                if self.fsync:
                    os.fsync(fd)
                with self._locked(key):
                    current = self._current(key, folder, name)
                    if conditional:
                        self._check(key, current, if_match)
                    st = self._stamp(fd, current)
                    if self.fsync:
                        os.fsync(fd)
                    # renameat replaces a link swapped in meanwhile, never its target
                    os.replace(tmp, name, src_dir_fd=folder, dst_dir_fd=folder)
                    tmp = ""
                    if self.fsync:
                        os.fsync(folder)
                    return _etag(st)
            finally:
                os.close(fd)
                if tmp:
                    with contextlib.suppress(FileNotFoundError):
                        os.unlink(tmp, dir_fd=folder)

    def _check(self, key: str, current: os.stat_result | None, if_match: str | None) -> None:
        if if_match is None:
            if current is not None:
                raise Conflict(f"{self._url}: {key!r} already exists")
        elif current is None:
            raise Conflict(f"{self._url}: {key!r} does not exist (if_match={if_match!r})")
        elif _etag(current) != if_match:
            raise Conflict(f"{self._url}: {key!r} changed (if_match={if_match!r})")

    def _delete_sync(self, key: str) -> None:
        try:
            with self._parent(key, create=False) as (folder, name), self._locked(key):
                if self._current(key, folder, name) is None:
                    return
                os.unlink(name, dir_fd=folder)  # unlinkat: a link swapped in goes, not its target
                if self.fsync:
                    os.fsync(folder)
        except FileNotFoundError:
            return

    def _list_sync(self, prefix: str) -> list[str]:
        head, _, _ = prefix.rpartition("/")
        keys: list[str] = []
        stack = [head.split("/") if head else []]
        while stack:
            names = stack.pop()
            try:
                # each folder is opened from the root again: a listing holds one descriptor
                with _closing(self._folder(prefix, names, create=False)) as fd:
                    found = self._scan(prefix, fd, "".join(f"{n}/" for n in names))
            except FileNotFoundError:
                continue
            for key, is_dir in found:
                if is_dir:
                    stack.append(key.split("/"))
                else:
                    keys.append(key)
        keys.sort()
        return keys

    def _scan(self, prefix: str, fd: int, rel: str) -> list[tuple[str, bool]]:
        """The entries of the folder ``fd`` (``rel``: its path) a listing of ``prefix``
        wants: (key, is a folder).  A link or special file there is refused."""
        found: list[tuple[str, bool]] = []
        with os.scandir(fd) as entries:
            for entry in entries:
                key = rel + entry.name
                wanted = key.startswith(prefix)
                if entry.name.startswith(RESERVED_PREFIX) or not (
                    wanted or prefix.startswith(key + "/")
                ):
                    continue
                if entry.is_dir(follow_symlinks=False):
                    found.append((key, True))
                elif entry.is_file(follow_symlinks=False):
                    if wanted:
                        found.append((key, False))
                else:
                    raise self._refused(prefix, key, entry.stat(follow_symlinks=False).st_mode)
        return found

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
