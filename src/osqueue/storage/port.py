"""The storage port: the only way osqueue touches an object store.

Adapters implement :class:`Storage`.  Keys are relative to the store's root
(the URL's prefix): ``s3://bucket/jobs`` with key ``queue.json`` is the object
``jobs/queue.json``.  Keys use ``/`` as separator and never start with ``/``.

Errors are :class:`~osqueue.errors.NotFound`, :class:`~osqueue.errors.Conflict`
and :class:`~osqueue.errors.StorageError` (with ``OutcomeUnknown`` for a write
whose result is unknown); adapters translate their library's errors with
``raise ... from exc``.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import NamedTuple, Protocol, runtime_checkable


class Blob(NamedTuple):
    """An object's bytes and the ETag they were read with."""

    data: bytes
    etag: str


@dataclass(frozen=True, slots=True)
class Capabilities:
    """What a backend can promise; tests branch on these, never skip."""

    #: Two processes on one machine can race writes safely.
    cross_process: bool = True
    #: ETags are a content hash (same bytes, same ETag: ABA is possible).
    content_etags: bool = False
    #: Data survives the process (false for memory://).
    durable: bool = True


@runtime_checkable
class Storage(Protocol):
    """Compare-and-set object storage."""

    @property
    def url(self) -> str:
        """The URL this store was opened from (credentials removed)."""
        ...

    @property
    def capabilities(self) -> Capabilities: ...

    async def read(self, key: str) -> Blob:
        """Return the object's bytes and ETag, or raise ``NotFound``."""
        ...

    async def write(self, key: str, data: bytes, *, if_match: str | None) -> str:
        """Write conditionally and return the new ETag.

        ``if_match=None`` creates the object only if it is absent; otherwise the
        write lands only if the current ETag equals ``if_match``.  A lost race
        (or a missing object with ``if_match`` set) raises ``Conflict``.
        """
        ...

    async def put(self, key: str, data: bytes) -> None:
        """Write unconditionally (archive and payload objects)."""
        ...

    async def get(self, key: str) -> bytes:
        """Return the object's bytes, or raise ``NotFound``."""
        ...

    async def delete(self, key: str) -> None:
        """Delete the object; deleting a missing object is not an error."""
        ...

    async def list(self, prefix: str = "") -> list[str]:
        """Return every key under ``prefix`` (relative to the root), sorted."""
        ...

    async def close(self) -> None:
        """Release connections and files."""
        ...
