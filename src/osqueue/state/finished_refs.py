"""The document's references to sealed objects of the record of finished jobs
(``finished/``; see :mod:`osqueue.state.finished_objects`).  Pure values."""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from typing import Annotated

import msgspec

from osqueue.errors import CorruptDocument

_encode = msgspec.json.Encoder().encode

#: Sealed records of finished jobs live under this prefix.
FINISHED_PREFIX = "finished/"


class FinishedRef(msgspec.Struct, frozen=True, omit_defaults=True, gc=False):
    """The document's reference to one sealed object of finished jobs (JSON lines,
    one :class:`~osqueue.state.finished_jobs.FinishedJob` per line)."""

    key: str
    count: int
    size_bytes: int = msgspec.field(name="bytes")
    sha256: Annotated[str, msgspec.Meta(pattern="^[0-9a-f]{64}$")]
    min_id: str
    max_id: str
    #: broker time (seconds) after which every entry has expired
    expires_at: float
    #: the result objects the entries reference (the result sweep keeps them)
    result_refs: tuple[str, ...] = ()
    #: every entry is ``held`` (kept only for the children that may name it): such
    #: objects are bounded by ``max_finished_jobs``, oldest dropped first
    held: bool = False


class SealedRecord:
    """The references of one document (in the order sealed), kept with the record."""

    __slots__ = ("_section", "_soonest", "held_entries", "refs", "results")

    def __init__(self, refs: Sequence[FinishedRef] = ()) -> None:
        self.refs: dict[str, FinishedRef] = {}
        #: result object key -> the job whose sealed entry references it
        self.results: dict[str, str] = {}
        self._section: bytes | None = None
        #: the entries of the ``held`` references
        self.held_entries = 0
        #: the earliest ``expires_at`` of the references (None: not known)
        self._soonest: float | None = None
        for ref in refs:
            self.add(ref)

    def copy(self) -> SealedRecord:
        new = SealedRecord()
        new.refs, new.results, new._section = dict(self.refs), dict(self.results), self._section
        new.held_entries, new._soonest = self.held_entries, self._soonest
        return new

    def __bool__(self) -> bool:
        return bool(self.refs)

    def __iter__(self) -> Iterator[FinishedRef]:
        return iter(self.refs.values())

    def __eq__(self, other: object) -> bool:
        if not isinstance(other, SealedRecord):
            return NotImplemented
        return list(self.refs.items()) == list(other.refs.items())

    __hash__ = None  # type: ignore[assignment]

    def holds(self, key: str) -> bool:
        return key in self.refs

    def candidates(self, job_id: str, now: float) -> list[FinishedRef]:
        """The unexpired objects whose id bounds hold ``job_id``, newest first."""
        return [
            r
            for r in reversed(self.refs.values())
            if r.min_id <= job_id <= r.max_id and now <= r.expires_at
        ]

    def soonest(self) -> float | None:
        """The earliest time a reference's every entry has expired (None: no reference)."""
        if self._soonest is None and self.refs:
            self._soonest = min(r.expires_at for r in self.refs.values())
        return self._soonest

    def entries(self) -> int:
        return sum(r.count for r in self.refs.values())

    def framed(self) -> bytes:
        """The document's ``,"finished_objects":[...]`` section (empty when none)."""
        if not self.refs:
            return b""
        if self._section is None:
            self._section = b",".join(_encode(r) for r in self.refs.values())
        return b',"finished_objects":[' + self._section + b"]"

    def framed_bytes(self) -> int:
        if not self.refs:
            return 0
        if self._section is None:
            self._section = b",".join(_encode(r) for r in self.refs.values())
        return len(b',"finished_objects":[]') + len(self._section)

    def add(self, ref: FinishedRef) -> None:
        self.refs[ref.key] = ref
        self._section = None
        if self._soonest is not None:
            self._soonest = min(self._soonest, ref.expires_at)
        if ref.held:
            self.held_entries += ref.count
        for result in ref.result_refs:
            self.results[result] = ref.key

    def remove(self, key: str) -> None:
        ref = self.refs.pop(key)
        self._section = None
        self._soonest = None
        if ref.held:
            self.held_entries -= ref.count
        for result in ref.result_refs:
            self.results.pop(result, None)


def sealed_of(refs: list[FinishedRef]) -> SealedRecord:
    """The stored references, checked (``CorruptDocument`` names the field)."""
    out = SealedRecord()
    for i, ref in enumerate(refs):
        where = f"$.finished_objects[{i}]"
        if not ref.key.startswith(FINISHED_PREFIX) or out.holds(ref.key):
            message = f"{where}.key: {ref.key!r} is not a new key"
            raise CorruptDocument(message, path=f"{where}.key")
        if ref.count < 1 or not ref.min_id <= ref.max_id:
            raise CorruptDocument(
                f"{where}.count: no entries, or bad bounds", path=f"{where}.count"
            )
        out.add(ref)
    return out
