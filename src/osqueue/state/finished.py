"""A bounded record of jobs that finished and left the document.

A job pushed with ``after=[parent]`` must know how its parent ended even when
the parent already left the document (a completed job leaves once archived,
a cancelled one at once).  The document keeps, for ``finished_window_s``
after they left and at most ``max_finished`` of them, the ids of finished
jobs with how they ended: ``done``, ``dead`` (purged dead letters) or
``cancelled``.  :func:`osqueue.state.deps.parent_outcome` asks it through
:meth:`Finished.status` only, so another record (one kept for job results)
can take its place behind that one call.

The record starts with the document's first push that names parents (a queue
that never uses dependencies pays nothing for it) and is kept from then on.
Encoded as ``"finished": {"<id>": ["done", <Unix second>], ...}``, oldest
first; the section grows by appending, like the dedupe tombstones, and is
rebuilt only when a quarter of it is past the bounds.  A release that does
not know the record ignores it (it is a cache of what the archive holds).
"""

from __future__ import annotations

from typing import Literal

import msgspec

Outcome = Literal["done", "dead", "cancelled"]

_encode = msgspec.json.Encoder().encode


class Finished:
    __slots__ = ("_blob", "active", "items")

    def __init__(self, items: dict[str, tuple[str, int]] | None = None) -> None:
        #: False until the document's first push with parents: nothing is recorded
        self.active = items is not None
        #: id -> (outcome, the second it left), oldest first
        self.items: dict[str, tuple[str, int]] = items if items is not None else {}
        self._blob: bytearray | None = None

    def copy(self) -> Finished:
        new = Finished(dict(self.items) if self.active else None)
        new._blob = None if self._blob is None else bytearray(self._blob)
        return new

    def activate(self) -> None:
        self.active = True

    def __bool__(self) -> bool:
        """True once active (the section is written, even empty)."""
        return self.active

    def __len__(self) -> int:
        return len(self.items)

    def __eq__(self, other: object) -> bool:
        if not isinstance(other, Finished):
            return NotImplemented
        return self.active == other.active and list(self.items.items()) == list(other.items.items())

    __hash__ = None  # type: ignore[assignment]

    def status(self, job_id: str) -> Outcome | None:
        """How ``job_id`` ended, if it is remembered."""
        entry = self.items.get(job_id)
        return None if entry is None else entry[0]  # type: ignore[return-value]

    def add(self, job_id: str, outcome: Outcome, now: float) -> None:
        items = self.items
        if not self.active or job_id in items:
            return
        second = int(now)
        if items:
            last = next(reversed(items.values()))[1]
            second = max(second, last)  # seconds never decrease in insertion order
        items[job_id] = (outcome, second)
        if self._blob is not None:
            _append(self._blob, job_id, outcome, second)

    def prune(self, now: float, window_s: float, max_items: int) -> None:
        """Forget entries older than ``window_s`` or beyond the newest ``max_items``
        (rebuilt only once a quarter of the record is past a bound)."""
        items = self.items
        if not items:
            return
        oldest = next(iter(items.values()))[1]
        if oldest + 1 >= now - 1.25 * window_s and len(items) <= max_items * 1.25:
            return
        cutoff = now - window_s
        kept = [(k, v) for k, v in items.items() if v[1] + 1 >= cutoff]
        if len(kept) > max_items:
            kept = kept[len(kept) - max_items :]
        self.items = dict(kept)
        self._blob = None

    def section(self) -> bytes:
        """The encoded inside of the ``finished`` map (cached; grows by appending)."""
        blob = self._blob
        if blob is None:
            blob = self._blob = bytearray()
            for job_id, (outcome, second) in self.items.items():
                _append(blob, job_id, outcome, second)
        return bytes(blob)

    def section_len(self) -> int:
        if self._blob is None:
            self.section()
        assert self._blob is not None
        return len(self._blob)


def _append(blob: bytearray, job_id: str, outcome: str, second: int) -> None:
    if blob:
        blob += b","
    blob += _encode(job_id)
    blob += b':["'
    blob += outcome.encode()
    blob += b'",'
    blob += str(second).encode()
    blob += b"]"
