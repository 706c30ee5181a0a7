"""``memory://name``: an in-process store, the fake that tests and users build on.

Stores are shared by name inside one process through a module registry, so a
broker and a checker that both open ``memory://q`` see the same objects.
``memory://`` without a name opens a fresh private store.

ETags:

* default (``?etag=counter``): a process-wide counter, so an ETag never repeats,
  not even after a delete and re-create;
* ``?etag=md5``: the MD5 hex of the bytes, exactly like S3, MinIO and moto, so
  writing the same bytes again gives the same ETag (ABA is possible).  The
  queue's ``version`` field is what protects against that; this mode lets the
  tests prove it.

Every operation completes without awaiting at all, so it is atomic with
respect to other coroutines and costs no trip through the event loop (like an
uncontended lock); a ``threading.Lock`` also makes it safe to share a store
between threads and event loops (sync twins).  Tests that need a store to
suspend wrap it (``latency+memory://``, or a gate around ``write``).
"""

from __future__ import annotations

import hashlib
import itertools
import threading
from dataclasses import dataclass, field
from typing import Literal

from osqueue.errors import Conflict, InvalidInput, NotFound
from osqueue.storage.keys import as_bytes, check_key, check_prefix
from osqueue.storage.port import Blob, Capabilities

EtagMode = Literal["counter", "md5"]
ETAG_MODES: tuple[EtagMode, ...] = ("counter", "md5")

_counter = itertools.count(1)
_anonymous = itertools.count(1)


@dataclass
class _Bucket:
    objects: dict[str, Blob] = field(default_factory=dict)
    lock: threading.Lock = field(default_factory=threading.Lock)


_registry: dict[str, _Bucket] = {}
_registry_lock = threading.Lock()


def _bucket(name: str) -> _Bucket:
    with _registry_lock:
        bucket = _registry.get(name)
        if bucket is None:
            bucket = _registry[name] = _Bucket()
        return bucket


class MemoryStorage:
    """A :class:`~osqueue.storage.port.Storage` held in this process's memory."""

    def __init__(self, name: str | None = None, *, etag: EtagMode = "counter") -> None:
        if etag not in ETAG_MODES:
            raise InvalidInput(
                f"must be one of {', '.join(ETAG_MODES)}, not {etag!r}", field="etag"
            )
        if name is None or name == "":
            # private: not in the registry, so nobody else can open it and it dies with us
            self.name = f".anonymous-{next(_anonymous)}"
            self._url = "memory://" + ("?etag=md5" if etag == "md5" else "")
            self._bucket = _Bucket()
        else:
            self.name = name
            self._url = f"memory://{name}" + ("?etag=md5" if etag == "md5" else "")
            self._bucket = _bucket(name)
        self.etag_mode: EtagMode = etag
        self._capabilities = Capabilities(
            cross_process=False, content_etags=etag == "md5", durable=False
        )

    # ------------------------------------------------------------------ test helpers

    @staticmethod
    def reset(name: str) -> None:
        """Empty the named store (it stays registered; open handles see it empty)."""
        bucket = _bucket(name)
        with bucket.lock:
            bucket.objects.clear()

    @staticmethod
    def drop(name: str) -> None:
        """Forget the named store; the next ``memory://name`` starts empty."""
        with _registry_lock:
            _registry.pop(name, None)

    @staticmethod
    def names() -> list[str]:
        """The names of every registered store."""
        with _registry_lock:
            return sorted(_registry)

    # ------------------------------------------------------------------ Storage

    @property
    def url(self) -> str:
        return self._url

    @property
    def capabilities(self) -> Capabilities:
        return self._capabilities

    def _etag(self, data: bytes) -> str:
        if self.etag_mode == "md5":
            return hashlib.md5(data, usedforsecurity=False).hexdigest()
        return f"m{next(_counter)}"

    async def read(self, key: str) -> Blob:
        check_key(key)
        with self._bucket.lock:
            blob = self._bucket.objects.get(key)
        if blob is None:
            raise NotFound(f"{self._url}: {key!r} does not exist")
        return blob

    async def write(self, key: str, data: bytes, *, if_match: str | None) -> str:
        check_key(key)
        if type(data) is not bytes:  # (the document's write, every commit, skips the call)
            data = as_bytes(data)
        bucket = self._bucket
        with bucket.lock:
            current = bucket.objects.get(key)
            if if_match is None and current is not None:
                raise Conflict(f"{self._url}: {key!r} already exists")
            if if_match is not None and (current is None or current.etag != if_match):
                state = "does not exist" if current is None else "changed"
                raise Conflict(f"{self._url}: {key!r} {state} (if_match={if_match!r})")
            etag = self._etag(data)
            bucket.objects[key] = Blob(data, etag)
            return etag

    async def put(self, key: str, data: bytes) -> None:
        check_key(key)
        data = as_bytes(data)
        with self._bucket.lock:
            self._bucket.objects[key] = Blob(data, self._etag(data))

    async def get(self, key: str) -> bytes:
        return (await self.read(key)).data

    async def delete(self, key: str) -> None:
        check_key(key)
        with self._bucket.lock:
            self._bucket.objects.pop(key, None)

    async def list(self, prefix: str = "") -> list[str]:
        check_prefix(prefix)
        with self._bucket.lock:
            return sorted(k for k in self._bucket.objects if k.startswith(prefix))

    async def close(self) -> None:
        return None

    def __repr__(self) -> str:
        return f"MemoryStorage({self._url!r})"
