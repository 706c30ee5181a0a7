"""The pipeline's data root: one location seen two ways.

Spark reads and writes it through Hadoop URIs (``file:///data/lake``,
``s3a://bucket/lake``); plain Python (WAL generation, manifests, verify) goes
through the osqueue storage port (``file:///data/lake``, ``s3://bucket/lake``),
whose compare-and-set ``write`` is what publishes an index version.

The storage port is async; the pipeline runs in worker threads and scripts, so
:class:`DataRoot` offers blocking twins (:mod:`osqueue.spark.blocking`).
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Iterable
from pathlib import Path
from typing import TypeVar
from urllib.parse import urlsplit

from osqueue.errors import InvalidInput
from osqueue.spark.blocking import with_storage
from osqueue.storage.port import Blob, Storage

T = TypeVar("T")

#: Hadoop scheme -> storage-port scheme, for the schemes both sides understand.
_STORAGE_SCHEME = {"file": "file", "s3a": "s3", "s3": "s3", "gs": "gs"}


def normalize_root(root: str) -> str:
    """Return ``root`` as a Hadoop URI without a trailing slash.

    A bare path (``./demo-data/lake``) becomes an absolute ``file://`` URI.
    """
    if not root:
        raise InvalidInput("must not be empty", field="root")
    parts = urlsplit(root)
    if not parts.scheme:
        return Path(root).expanduser().resolve().as_uri()
    if parts.scheme not in _STORAGE_SCHEME:
        supported = ", ".join(sorted(_STORAGE_SCHEME))
        raise InvalidInput(
            f"unsupported scheme {parts.scheme!r} in {root!r} (use one of {supported})",
            field="root",
        )
    if parts.scheme == "file" and parts.netloc not in ("", "localhost"):
        raise InvalidInput(f"file URIs take an absolute path: {root!r}", field="root")
    return root.rstrip("/")


class DataRoot:
    """A pipeline data root: ``hadoop(key)`` for Spark, blocking storage calls for Python."""

    def __init__(self, root: str) -> None:
        self.uri = normalize_root(root)
        parts = urlsplit(self.uri)
        self.storage_url = _STORAGE_SCHEME[parts.scheme] + self.uri[len(parts.scheme) :]

    def __repr__(self) -> str:
        return f"DataRoot({self.uri!r})"

    def hadoop(self, key: str) -> str:
        """The Hadoop URI of ``key`` (a path relative to the root)."""
        return f"{self.uri}/{key.lstrip('/')}"

    def _with_store(self, use: Callable[[Storage], Awaitable[T]]) -> T:
        return with_storage(self.storage_url, use)

    def read(self, key: str) -> Blob:
        """Bytes and ETag of ``key``; ``NotFound`` if absent."""
        return self._with_store(lambda s: s.read(key))

    def write(self, key: str, data: bytes, *, if_match: str | None) -> str:
        """Compare-and-set write (``if_match=None``: create only if absent)."""
        return self._with_store(lambda s: s.write(key, data, if_match=if_match))

    def get(self, key: str) -> bytes:
        return self._with_store(lambda s: s.get(key))

    def get_many(self, keys: Iterable[str]) -> list[bytes]:
        wanted = list(keys)

        async def use(store: Storage) -> list[bytes]:
            return [await store.get(key) for key in wanted]

        return self._with_store(use)

    def put_many(self, items: Iterable[tuple[str, bytes]]) -> int:
        """Write every ``(key, data)`` unconditionally; return how many."""
        todo = list(items)

        async def use(store: Storage) -> int:
            for key, data in todo:
                await store.put(key, data)
            return len(todo)

        return self._with_store(use)

    def list(self, prefix: str = "") -> list[str]:
        return self._with_store(lambda s: s.list(prefix))

    def delete_prefix(self, prefix: str) -> int:
        """Delete every key under ``prefix`` (best effort cleanup); return how many."""

        async def use(store: Storage) -> int:
            keys = await store.list(prefix)
            for key in keys:
                await store.delete(key)
            return len(keys)

        return self._with_store(use)
