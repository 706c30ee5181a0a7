"""Segment objects as bytes, their keys, and the reference that describes one.

A segment object is JSON lines: a header line, then one job per line in seq
order, each as the document stores it (so a spill reuses the document's
cached job encodings, and a reader needs nothing but the job codec)::

    {"format":1,"queue":"index","priority":0,"first_seq":120000,"last_seq":139999,"count":20000}
    {"id":"01JD…","queue":"index","seq":120000,"status":"queued",…}
    …

It is written whole, under a key of its own
(``segments/<queue>/p<priority>/<first_seq:020d>=<unique>.jsonl``), and never
changed.  :func:`decode_segment` validates it and names the line and field of
the first thing wrong (a :class:`~osqueue.errors.CorruptDocument`).
"""

from __future__ import annotations

import hashlib
import re
from collections.abc import Sequence
from datetime import datetime
from typing import Any, Literal, Protocol

import msgspec

from osqueue.errors import CorruptDocument, InvalidInput
from osqueue.state import dedupe_filter
from osqueue.state.model import DelayedRef, SegmentRef, StoredJob
from osqueue.storage.keys import check_key

SEGMENT_PREFIX = "segments/"
SEGMENT_FORMAT = 1
_UNIQUE_RE = re.compile(r"[0-9A-Za-z_\-]{1,64}")

_encoder = msgspec.json.Encoder()
_job_decoder = msgspec.json.Decoder(StoredJob)


class SegmentHeader(msgspec.Struct, frozen=True, omit_defaults=True):
    """The first line of a segment object."""

    format: int
    queue: str
    priority: int
    first_seq: int
    last_seq: int
    count: int
    #: the status every job of the object has: ``queued`` (ready jobs, one stream),
    #: or ``dead`` (dead letters of one queue, any priority: :mod:`osqueue.state.cold_dead`)
    status: str = "queued"


class ObjectRef(Protocol):
    """What the checks below read of a reference (a :class:`SegmentRef`, or a
    reference of another kind of cold object written with this codec)."""

    @property
    def key(self) -> str: ...
    @property
    def queue(self) -> str: ...
    @property
    def priority(self) -> int: ...
    @property
    def first_seq(self) -> int: ...
    @property
    def last_seq(self) -> int: ...
    @property
    def count(self) -> int: ...
    @property
    def size_bytes(self) -> int: ...
    @property
    def sha256(self) -> str: ...


_header_decoder = msgspec.json.Decoder(SegmentHeader)


class DelayedHeader(msgspec.Struct, frozen=True):
    """The first line of an object of delayed jobs (:mod:`osqueue.state.cold_delayed`):
    the same layout as a segment's, its jobs sorted by ``(run_at, seq)``."""

    format: int
    kind: Literal["delayed"]
    queue: str
    #: the start of the due-time window its jobs fall in
    window_at: datetime
    count: int


_delayed_header_decoder = msgspec.json.Decoder(DelayedHeader)


def segment_key(queue: str, priority: int, first_seq: int, unique: str) -> str:
    """The key of a new segment object (``unique``: a fresh id per object, e.g. a ULID).

    A queue name may hold ``/`` and start with ``.``; in the key ``/`` becomes
    ``~`` and a leading ``.`` gets a ``~`` before it (``~`` is not allowed in
    queue names), so the key is one valid path segment per part."""
    return object_key(SEGMENT_PREFIX, queue, f"p{priority}/{first_seq:020d}", unique)


def object_key(prefix: str, queue: str, middle: str, unique: str) -> str:
    """``<prefix><queue>/<middle>=<unique>.jsonl``, the queue name made one path
    segment (see :func:`segment_key`)."""
    if not _UNIQUE_RE.fullmatch(unique):
        raise InvalidInput(f"{unique!r} is not 1-64 characters of A-Z a-z 0-9 _ -", field="unique")
    name = queue.replace("/", "~")
    if name.startswith("."):
        name = "~" + name
    return check_key(f"{prefix}{name}/{middle}={unique}.jsonl")


def encode_segment(
    jobs: Sequence[StoredJob], lines: Sequence[bytes] | None = None, status: str = "queued"
) -> bytes:
    """A segment object holding ``jobs`` (one stream, seq order; ``status="dead"``:
    dead jobs of one queue, seq order).  ``lines``: the jobs' encodings if the
    caller has them (the document's cache)."""
    if not jobs:
        raise InvalidInput("a segment holds at least one job", field="jobs")
    first, last = jobs[0], jobs[-1]
    header = SegmentHeader(
        format=SEGMENT_FORMAT,
        queue=first.queue,
        priority=first.priority if status == "queued" else 0,
        first_seq=first.seq,
        last_seq=last.seq,
        count=len(jobs),
        status=status,
    )
    return join_lines(header, jobs, lines)


def join_lines(
    header: SegmentHeader | DelayedHeader,
    jobs: Sequence[StoredJob],
    lines: Sequence[bytes] | None = None,
) -> bytes:
    """An object's bytes: ``header``'s line, then one line per job (``lines``: their
    encodings if the caller has them)."""
    body = lines if lines is not None else [_encoder.encode(job) for job in jobs]
    return _join(header, body)


def _join(header: SegmentHeader | DelayedHeader, lines: Sequence[bytes]) -> bytes:
    return b"\n".join((_encoder.encode(header), *lines, b""))


def join_segments(objects: Sequence[SegmentLines]) -> bytes:
    """One object holding the jobs of ``objects`` (adjacent segments of one stream,
    in seq order), their lines as they are: what a compaction writes."""
    first, last = objects[0].header, objects[-1].header
    assert isinstance(first, SegmentHeader)  # ready segments
    assert isinstance(last, SegmentHeader)
    header = SegmentHeader(
        format=SEGMENT_FORMAT,
        queue=first.queue,
        priority=first.priority,
        first_seq=first.first_seq,
        last_seq=last.last_seq,
        count=sum(len(obj) for obj in objects),
    )
    return _join(header, [line for obj in objects for line in obj.lines])


def make_ref(key: str, jobs: Sequence[StoredJob], size_bytes: int, sha256: str) -> SegmentRef:
    """The reference to a new segment object ``key`` of ``size_bytes`` with digest
    ``sha256`` (hex) holding ``jobs``.

    The last one made is kept until it is asked for again: a spill's reference
    is made where its object is built and made again where the ``Spill`` is
    checked, from the same tuple of frozen jobs (a tuple, so the same object
    means the same jobs).  Taken once, it is let go (with the jobs it holds)."""
    global _last_made
    made = _last_made  # (read once: a spill's object may be built in a thread)
    if made is not None and made[0] is jobs and made[1] == (key, size_bytes, sha256):
        _last_made = None
        return made[2]
    ref = _make_ref(key, jobs, size_bytes, sha256)
    if type(jobs) is tuple:
        _last_made = (jobs, (key, size_bytes, sha256), ref)
    return ref


#: (jobs, (key, size_bytes, sha256), ref) of the last :func:`make_ref` of a tuple
_last_made: tuple[Sequence[StoredJob], tuple[str, int, str], SegmentRef] | None = None


def _make_ref(key: str, jobs: Sequence[StoredJob], size_bytes: int, sha256: str) -> SegmentRef:
    first = jobs[0]
    ids = [job.id for job in jobs]
    return SegmentRef(
        key=key,
        queue=first.queue,
        priority=first.priority,
        first_seq=first.seq,
        last_seq=jobs[-1].seq,
        count=len(jobs),
        size_bytes=size_bytes,
        sha256=sha256,
        next_seq=first.seq,
        next_created_at=first.created_at,
        min_id=min(ids),
        max_id=max(ids),
        keyed={job.id: job.key for job in jobs if job.key is not None},
        payload_refs=tuple(job.payload_ref for job in jobs if job.payload_ref is not None),
        **dedupe_fields(jobs),
    )


def priority_bounds(jobs: Sequence[StoredJob]) -> tuple[int, int]:
    """The ``min_priority``/``max_priority`` of a cold object's reference holding
    ``jobs`` (with its seqs, the claim-order bounds a listing pages by)."""
    priorities = [job.priority for job in jobs]
    return min(priorities), max(priorities)


def dedupe_fields(jobs: Sequence[StoredJob]) -> dict[str, Any]:
    """A reference's filter of the ids of ``jobs``' dedupe jobs (none: no fields),
    for any kind of cold object (:mod:`osqueue.state.dedupe_filter`)."""
    jobs = [job for job in jobs if job.dedupe]
    if not jobs:
        return {}
    return {
        "id_filter": (dedupe_filter.build(job.id for job in jobs),),
        "dedupe_created": max(job.created_at for job in jobs),
    }


def build_segment(
    jobs: Sequence[StoredJob], unique: str, lines: Sequence[bytes] | None = None
) -> tuple[SegmentRef, bytes]:
    """The object for ``jobs`` and the reference a ``Spill`` of them carries."""
    data = encode_segment(jobs, lines)
    first = jobs[0]
    key = segment_key(first.queue, first.priority, first.seq, unique)
    return make_ref(key, jobs, len(data), hashlib.sha256(data).hexdigest()), data


# --------------------------------------------------------------------------- decoding


def _bad(key: str, line: int, field: str, message: str, offset: int | None) -> CorruptDocument:
    return CorruptDocument(
        f"segment object {key} is invalid at line {line}, {field}: {message}",
        path=f"line {line}: {field}",
        offset=offset,
    )


def decode_segment(data: bytes, key: str = "segment") -> tuple[SegmentHeader, list[StoredJob]]:
    """Parse and validate a segment object: its header and its jobs, in order."""
    if not data.endswith(b"\n"):
        raise _bad(key, data.count(b"\n") + 1, "$", "truncated (no final newline)", len(data))
    head_end = data.index(b"\n")
    try:
        header = _header_decoder.decode(data[:head_end])
    except msgspec.MsgspecError as exc:
        raise _bad(key, 1, "$", str(exc), 0) from exc
    if header.format != SEGMENT_FORMAT:
        raise _bad(key, 1, "$.format", f"{header.format} is not {SEGMENT_FORMAT}", 0)
    body = data[head_end + 1 :]
    try:
        jobs = _job_decoder.decode_lines(body)
    except (msgspec.MsgspecError, UnicodeDecodeError):
        jobs = _decode_each(body, key, head_end + 1)
    _check_jobs(header, jobs, data, key)
    return header, jobs


def _decode_each(body: bytes, key: str, base: int) -> list[StoredJob]:
    """Decode line by line to name the line that does not decode."""
    jobs: list[StoredJob] = []
    offset = base
    for i, line in enumerate(body.split(b"\n")[:-1]):
        try:
            jobs.append(_job_decoder.decode(line))
        except (msgspec.MsgspecError, UnicodeDecodeError) as exc:
            field = _field_of(str(exc))
            raise _bad(key, i + 2, field, str(exc), offset) from exc
        offset += len(line) + 1
    raise _bad(key, 1, "$", "does not decode", base)  # decode_lines refused what each line took


def _field_of(text: str) -> str:
    match = re.search(r"at `([^`]+)`", text)
    return match.group(1) if match else "$"


def _line_offset(data: bytes, line: int) -> int:
    offset = 0
    for _ in range(line - 1):
        offset = data.index(b"\n", offset) + 1
    return offset


def _check_jobs(header: SegmentHeader, jobs: list[StoredJob], data: bytes, key: str) -> None:
    if len(jobs) != header.count or not jobs:
        raise _bad(key, 1, "$.count", f"{header.count}, but it holds {len(jobs)} jobs", 0)
    seen: set[str] = set()
    previous = header.first_seq - 1
    for i, job in enumerate(jobs):
        problem = _job_problem(header, job, previous, seen)
        if problem is not None:
            raise _bad(key, i + 2, f"$.{problem[0]}", problem[1], _line_offset(data, i + 2))
        seen.add(job.id)
        previous = job.seq
    if jobs[0].seq != header.first_seq or jobs[-1].seq != header.last_seq:
        raise _bad(key, 1, "$.first_seq", "the jobs' seqs do not span first_seq..last_seq", 0)


def _job_problem(
    header: SegmentHeader, job: StoredJob, previous: int, seen: set[str]
) -> tuple[str, str] | None:
    """What is wrong with one job of a segment (field, message), if anything."""
    if not job.id or job.id in seen:
        return ("id", f"{job.id!r} is empty or listed twice")
    ready = header.status == "queued"
    if job.queue != header.queue or (ready and job.priority != header.priority):
        return ("queue", f"not of the segment's stream ({header.queue!r}, p{header.priority})")
    if job.seq <= previous:
        return ("seq", f"{job.seq} is not after {previous}")
    if job.status != header.status or job.claim is not None or job.run_at is not None:
        return ("status", "a segment holds only ready queued jobs" if ready else "not dead")
    if job.payload is not None and job.payload_ref is not None:
        return ("payload_ref", "a job has an inline payload or a reference")
    if job.attempts < 0 or job.max_attempts < 1:
        return ("attempts", "attempts must be >= 0 and max_attempts >= 1")
    return None


class Referenced(Protocol):
    """What a reference to an object of job lines records (a segment's, or one of
    waiting children: :class:`~osqueue.state.waiting_refs.WaitingRef`)."""

    @property
    def key(self) -> str: ...
    @property
    def size_bytes(self) -> int: ...
    @property
    def sha256(self) -> str: ...


def check_segment(ref: Referenced, data: bytes) -> None:
    """``data`` is the object ``ref`` recorded at spill: its size and SHA-256 (else
    :class:`~osqueue.errors.CorruptDocument` naming the key, what the reference
    says and what was found).  Every reader of a segment object calls this
    before it parses one: the broker's load and cancel paths, the listings,
    the Spark reader, ``osqueue segments readmit``."""
    digest = hashlib.sha256(data).hexdigest()
    if len(data) != ref.size_bytes or digest != ref.sha256:
        raise CorruptDocument(
            f"segment object {ref.key} does not match its reference: expected "
            f"{ref.size_bytes} bytes with sha256 {ref.sha256}, found {len(data)} bytes "
            f"with sha256 {digest}",
            path="$.sha256" if len(data) == ref.size_bytes else "$.bytes",
        )


def decode_checked(ref: ObjectRef, data: bytes) -> list[StoredJob]:
    """``data``, read for ``ref``, checked (:func:`check_segment`), decoded whole and
    its header checked against ``ref``: the object's jobs, in order."""
    check_segment(ref, data)
    header, jobs = decode_segment(data, ref.key)
    check_object(ref, header)
    return jobs


def check_object(ref: ObjectRef, header: SegmentHeader) -> None:
    """The object read for ``ref`` is the one it describes (else CorruptDocument)."""
    expected = (ref.queue, ref.priority, ref.first_seq, ref.last_seq, ref.count)
    got = (header.queue, header.priority, header.first_seq, header.last_seq, header.count)
    for name, want, have in zip(
        ("queue", "priority", "first_seq", "last_seq", "count"), expected, got, strict=True
    ):
        if want != have:
            raise _bad(ref.key, 1, f"$.{name}", f"{have!r}, but its reference says {want!r}", 0)


# --------------------------------------------------------------------------- reading in chunks


class SegmentLines:
    """A segment object split into its job lines, decoded a chunk at a time.

    The broker keeps what it has read this way: a load takes ``load_jobs`` jobs
    of a segment of any size, so decoding the whole object at once would stall
    the commits for no use, and the lines take less memory than the decoded
    jobs.  The header is checked when the object is parsed; a chunk's jobs
    are checked by the ``Load`` that carries them (stream, seq order, status).
    """

    __slots__ = ("header", "key", "lines", "size_bytes")

    def __init__(
        self,
        key: str,
        header: SegmentHeader | DelayedHeader,
        lines: list[bytes],
        size_bytes: int,
    ):
        self.key = key
        self.header = header
        #: one encoded job per line, in seq order (the object's line ``i + 2``)
        self.lines = lines
        self.size_bytes = size_bytes

    @classmethod
    def parse(cls, data: bytes, key: str, *, delayed: bool = False) -> SegmentLines:
        """Split ``data`` (a whole segment object, or with ``delayed`` an object of
        delayed jobs) and check its header."""
        if not data.endswith(b"\n"):
            raise _bad(key, data.count(b"\n") + 1, "$", "truncated (no final newline)", len(data))
        lines = data.split(b"\n")
        lines.pop()  # after the final newline
        decoder = _delayed_header_decoder if delayed else _header_decoder
        try:
            header: SegmentHeader | DelayedHeader = decoder.decode(lines[0])
        except msgspec.MsgspecError as exc:
            raise _bad(key, 1, "$", str(exc), 0) from exc
        if header.format != SEGMENT_FORMAT:
            raise _bad(key, 1, "$.format", f"{header.format} is not {SEGMENT_FORMAT}", 0)
        del lines[0]
        if len(lines) != header.count or not lines:
            raise _bad(key, 1, "$.count", f"{header.count}, but it holds {len(lines)} jobs", 0)
        return cls(key, header, lines, len(data))

    @classmethod
    def checked(cls, ref: SegmentRef, data: bytes) -> SegmentLines:
        """``data``, read for ``ref``: checked against its recorded size and SHA-256
        (:func:`check_segment`), split, and its header checked against ``ref``."""
        check_segment(ref, data)
        obj = cls.parse(data, ref.key)
        assert isinstance(obj.header, SegmentHeader)
        check_object(ref, obj.header)
        return obj

    @classmethod
    def written(cls, key: str, data: bytes, lines: Sequence[bytes]) -> SegmentLines:
        """The object ``key`` this broker built as ``data`` from ``lines`` (its job
        lines, :func:`build_segment`), kept as written: nothing to read or check."""
        header = _header_decoder.decode(data[: data.index(b"\n")])
        return cls(key, header, list(lines), len(data))

    @classmethod
    def checked_delayed(cls, ref: DelayedRef, data: bytes) -> SegmentLines:
        """``data``, read for the delayed object ``ref``: checked (size, SHA-256),
        split, and its header checked against ``ref``."""
        check_segment(ref, data)
        obj = cls.parse(data, ref.key, delayed=True)
        header = obj.header
        assert isinstance(header, DelayedHeader)
        for name in ("queue", "window_at", "count"):
            want, have = getattr(ref, name), getattr(header, name)
            if want != have:
                raise _bad(ref.key, 1, f"$.{name}", f"{have!r}, but its reference says {want!r}", 0)
        return obj

    def __len__(self) -> int:
        return len(self.lines)

    def jobs(self, start: int, end: int) -> list[StoredJob]:
        """The jobs at positions ``start..end-1`` (CorruptDocument names a line that
        does not decode)."""
        out: list[StoredJob] = []
        decode = _job_decoder.decode
        for i in range(start, min(end, len(self.lines))):
            try:
                out.append(decode(self.lines[i]))
            except (msgspec.MsgspecError, UnicodeDecodeError) as exc:
                raise _bad(self.key, i + 2, _field_of(str(exc)), str(exc), None) from exc
        return out

    def find(self, job_id: str) -> int | None:
        """The position of ``job_id``'s line, if the object holds it."""
        needle = b'{"id":' + _encoder.encode(job_id) + b","
        for i, line in enumerate(self.lines):
            if line.startswith(needle):
                return i
        return None
