"""Encoding and decoding the queue document.

``encode`` writes jobs from a per-job cache of encoded bytes, so a commit
re-encodes only the jobs it changed.  ``decode`` validates types and the
document's own invariants and raises :class:`~osqueue.errors.CorruptDocument`
naming the field path or byte offset; it never "repairs" anything, and the
broker never overwrites a document it could not decode.
"""

from __future__ import annotations

import re

import msgspec

from osqueue.errors import CorruptDocument, InvalidInput
from osqueue.state.codec_checks import check_job_fields, queue_settings_of, schedules_of
from osqueue.state.cold_delayed import DELAYED_PREFIX, DelayedCold
from osqueue.state.dead_letters import DeadLetters
from osqueue.state.document import Document, parse_second
from osqueue.state.finished_jobs import RESULT_PREFIX, FinishedJob, FinishedRecord
from osqueue.state.finished_refs import sealed_of
from osqueue.state.model import (
    FORMAT,
    QUEUE_ID_RE,
    BrokerInfo,
    DelayedRef,
    QueueTotals,
    SegmentRef,
    StoredJob,
    StoredSettings,
    WireDocument,
)
from osqueue.state.schedules import Schedules
from osqueue.state.segment_codec import SEGMENT_PREFIX
from osqueue.state.segments import Segments
from osqueue.state.validate import NAME_RE, PRIORITY_MAX, PRIORITY_MIN
from osqueue.state.waiting_refs import cold_waiting_of
from osqueue.storage.keys import check_key

_encoder = msgspec.json.Encoder()
_decoder = msgspec.json.Decoder(WireDocument)
_BYTE_RE = re.compile(r"\(byte (\d+)\)")
#: how msgspec's DecodeError starts for a string that is not UTF-8
_MSGSPEC_NOT_UTF8 = "Invalid UTF-8"
_PATH_RE = re.compile(r"at `([^`]+)`")
_MAX_INT = 2**53
#: jobs of at least this many bytes, and more than the rest of the document, are
#: joined once (:func:`encode`); below it a second copy costs less than the check
_FOLD_BYTES = 16_384


class _FormatOnly(msgspec.Struct):
    format: object = None


def encode(doc: Document) -> bytes:
    """The document's bytes; deterministic for equal documents.

    Jobs are joined from their cached encodings (only jobs changed since the
    last encode are re-encoded), the dedupe tombstones (ids grouped by second)
    from a section that grows by appending, and the segment references from
    a section cached until one changes, so a commit's encode cost is
    dominated by a byte join.  Every document is written as :data:`FORMAT`.
    ``len(encode(doc)) == doc.size_bytes()``.
    """
    head = doc.header_bytes()
    tombstones = doc.recent_section()
    parts: list[bytes | bytearray] = [
        head[:-1],
        b',"tombstones":{',
        tombstones,
        b"]}" if tombstones else b"}",  # close the last second's list, then the map
    ]
    # the sections a queue may not use cost one check each
    segments = doc.segments
    if segments.streams or segments.aside:
        parts.append(b',"queues":{' + segments.section() + b"}")
    if doc.schedules.by_name:
        parts.append(b',"schedules":[' + doc.schedules.section() + b"]")
    finished = doc.finished
    if finished.entries:
        parts += (b',"finished":[', finished.section(), b"]")
    if doc.waiting_cold:
        parts.append(doc.waiting_cold.framed())
    if finished.sealed.refs:
        parts.append(finished.sealed.framed())
    if doc.dead.queues:
        parts.append(b',"dead":{' + doc.dead.section() + b"}")
    if doc.dead.aside:
        parts.append(doc.dead.aside_section())
    if doc.delayed:
        parts.append(doc.delayed.section())
    frags = doc.fragments(_encoder.encode)
    size = doc.jobs_bytes  # (exact once the fragments are up to date)
    if size < _FOLD_BYTES or size <= sum(map(len, parts)):
        parts += (b',"jobs":[', b",".join(frags), b"]}")
        return b"".join(parts)
    parts.append(b',"jobs":[')
    # The jobs are most of a busy document's bytes: copied once, by one join of
    # them all, with everything before them joined into the first (a join of
    # the joined jobs with the rest would copy them twice every commit).
    jobs = list(frags)
    parts.append(jobs[0])
    jobs[0] = b"".join(parts)
    jobs[-1] += b"]}"
    return b",".join(jobs)


def _corrupt(exc: msgspec.MsgspecError, data: bytes) -> CorruptDocument:
    text = str(exc)
    if text.startswith(_MSGSPEC_NOT_UTF8):  # (msgspec 0.23 on; before, a UnicodeDecodeError)
        return _not_utf8(data)  # its message names no byte: find it
    byte = _BYTE_RE.search(text)
    path = _PATH_RE.search(text)
    offset = int(byte.group(1)) if byte else None
    if offset is None and "truncated" in text:
        offset = len(data)
    where = f" at byte {offset} of {len(data)}" if offset is not None else ""
    return CorruptDocument(
        f"queue document does not decode{where}: {text}",
        path=path.group(1) if path else ("$" if offset is None else None),
        offset=offset,
    )


def _not_utf8(data: bytes) -> CorruptDocument:
    try:
        data.decode("utf-8")
    except UnicodeDecodeError as exc:
        return CorruptDocument(
            f"queue document is not valid UTF-8 at byte {exc.start} of {len(data)}",
            offset=exc.start,
        )
    return CorruptDocument("queue document has a string that is not valid UTF-8", path="$")


def _too_deep(data: bytes, limit: int = 64) -> CorruptDocument:
    """Where nesting first passes ``limit`` (a document needs about 5 levels)."""
    depth, in_string, escaped = 0, False, False
    for i, byte in enumerate(data):
        if in_string:
            escaped, in_string = (False, True) if escaped else (byte == 0x5C, byte != 0x22)
        elif byte == 0x22:
            in_string = True
        elif byte in (0x5B, 0x7B):
            depth += 1
            if depth > limit:
                return CorruptDocument(
                    f"queue document is nested more than {limit} deep at byte {i}", offset=i
                )
        elif byte in (0x5D, 0x7D):
            depth -= 1
    return CorruptDocument("queue document is nested too deeply to decode", path="$")


def _check_format(data: bytes) -> None:
    try:
        probe = msgspec.json.decode(data, type=_FormatOnly)
    except (msgspec.MsgspecError, UnicodeDecodeError, RecursionError):
        return  # the full decode reports the real problem
    if type(probe.format) is not int or probe.format != FORMAT:
        hint = (
            "an earlier, pre-release format: start a new queue"
            if type(probe.format) is int and 0 < probe.format < FORMAT
            else "upgrade osqueue, or point it at the right queue"
        )
        raise CorruptDocument(
            f"queue document has format {probe.format!r}; this osqueue reads format {FORMAT}"
            f" only ({hint})",
            path="$.format",
        )


def decode(data: bytes) -> Document:
    """Parse and validate a stored document."""
    if not data:
        raise CorruptDocument("queue document is empty (0 bytes)", offset=0)
    try:
        wire = _decoder.decode(data)
    except msgspec.MsgspecError as exc:
        _check_format(data)
        raise _corrupt(exc, data) from exc
    except UnicodeDecodeError as exc:  # msgspec's own message has no document offset
        raise _not_utf8(data) from exc
    except RecursionError as exc:
        raise _too_deep(data) from exc
    if wire.format != FORMAT or type(wire.format) is not int:
        _check_format(data)
    _validate(wire)
    jobs = {job.id: job for job in wire.jobs}
    doc = Document(
        version=wire.version,
        broker=wire.broker,
        next_token=wire.next_token,
        next_seq=wire.next_seq,
        archived_through=wire.archived_through,
        stats=wire.stats,
        recent=_tombstones(wire),
        jobs=jobs,
        segments=_segments(wire),
        history=wire.history,
        queue_settings=_queue_settings(wire),
        schedules=_schedules(wire),
        finished=_finished(wire),
        dependencies_at=wire.dependencies_at,
        queue_totals=_queue_totals(wire),
        queue_id=wire.queue_id,
    )
    doc.dead = _dead(wire)
    doc.waiting_cold = cold_waiting_of(wire.waiting, wire.waiting_aside)
    doc.finished.sealed = sealed_of(wire.finished_objects)
    doc.delayed = _delayed(wire)
    return doc


def _tombstones(wire: WireDocument) -> dict[str, int]:
    """The dedupe tombstones as id -> second."""
    out: dict[str, int] = {}
    for key, ids in wire.tombstones.items():
        second = parse_second(key)
        if second is None:
            raise _fail(f"$.tombstones[{key!r}]", "is not a second (YYYY-MM-DDTHH:MM:SSZ)")
        for i, job_id in enumerate(ids):
            if not job_id:
                raise _fail(f"$.tombstones[{key!r}][{i}]", "must not be empty")
            out[job_id] = second
    return out


class _Owner(msgspec.Struct):
    version: int
    broker: BrokerInfo | None


_owner_decoder = msgspec.json.Decoder(_Owner)


def decode_owner(data: bytes) -> tuple[int, BrokerInfo | None]:
    """Only the document's ``version`` and ``broker``: what a client needs to find
    the broker.  Every other field is skipped unread, so this is fast on a large
    document and works on any format (a client need not know the tombstones'
    or jobs' layout of the broker it looks for)."""
    if not data:
        raise CorruptDocument("queue document is empty (0 bytes)", offset=0)
    try:
        owner = _owner_decoder.decode(data)
    except msgspec.MsgspecError as exc:
        raise _corrupt(exc, data) from exc
    except UnicodeDecodeError as exc:
        raise _not_utf8(data) from exc
    except RecursionError as exc:
        raise _too_deep(data) from exc
    return owner.version, owner.broker


def _fail(path: str, message: str) -> CorruptDocument:
    return CorruptDocument(f"queue document is invalid at {path}: {message}", path=path)


def _validate(wire: WireDocument) -> None:
    for name in ("version", "next_token", "next_seq", "archived_through"):
        value = getattr(wire, name)
        if not 0 <= value < _MAX_INT:
            raise _fail(f"$.{name}", f"{value} is out of range")
    if wire.queue_id is not None and not QUEUE_ID_RE.fullmatch(wire.queue_id):
        raise _fail(
            "$.queue_id",
            f"{wire.queue_id!r} is not a queue id (26 lowercase letters and digits of a ULID)",
        )
    seen: set[str] = set()
    for i, job in enumerate(wire.jobs):
        where = f"$.jobs[{i}]"
        if job.id in seen:
            raise _fail(f"{where}.id", f"duplicate job id {job.id!r}")
        seen.add(job.id)
        _validate_job(where, job, wire)


def _validate_job(where: str, job: StoredJob, wire: WireDocument) -> None:
    if not job.id or not job.queue:
        raise _fail(f"{where}.id" if not job.id else f"{where}.queue", "must not be empty")
    if not 0 <= job.seq < wire.next_seq:
        raise _fail(f"{where}.seq", f"{job.seq} is not below next_seq {wire.next_seq}")
    if not -(2**31) <= job.priority < 2**31:
        raise _fail(f"{where}.priority", f"{job.priority} is out of range")
    if job.attempts < 0 or job.max_attempts < 1:
        raise _fail(f"{where}.attempts", "attempts must be >= 0 and max_attempts >= 1")
    if job.status == "claimed" and job.claim is None:
        raise _fail(f"{where}.claim", "a claimed job must carry its claim")
    if job.claim is not None and not 0 < job.claim.token < wire.next_token:
        raise _fail(f"{where}.claim.token", f"{job.claim.token} is not below next_token")
    if job.status == "done" and job.done_version is None:
        raise _fail(f"{where}.done_version", "a done job must record its version")
    if job.payload is not None and job.payload_ref is not None:
        raise _fail(f"{where}.payload_ref", "a job has an inline payload or a reference")
    problem = check_job_fields(job)
    if problem is not None:
        raise _fail(f"{where}.{problem[0]}", problem[1])


def _queue_settings(wire: WireDocument) -> dict[str, StoredSettings]:
    try:
        return queue_settings_of(wire.queue_settings)
    except ValueError as exc:
        path, _, message = str(exc).partition(": ")
        raise _fail(f"$.queue_settings{path}", message) from exc


def _queue_totals(wire: WireDocument) -> dict[str, QueueTotals]:
    """The known queues (their counters' types and signs are msgspec's to check)."""
    for queue in wire.queue_totals:
        if not NAME_RE.match(queue):
            raise _fail(f"$.queue_totals[{queue!r}]", f"{queue!r} is not a queue name")
    return dict(wire.queue_totals)


def _schedules(wire: WireDocument) -> Schedules:
    try:
        return schedules_of(wire.schedules)
    except ValueError as exc:
        path, _, message = str(exc).partition(": ")
        raise _fail(f"$.schedules{path}", message) from exc


def _dead(wire: WireDocument) -> DeadLetters:
    """The dead segments, each filed under its own queue, keys unique."""
    dead = DeadLetters()
    for queue, refs in wire.dead.items():
        for i, ref in enumerate(refs):
            where = f"$.dead[{queue!r}][{i}]"
            if ref.queue != queue or dead.holds(ref.key) or not ref.key.startswith("dead/"):
                raise _fail(where, f"{ref.key!r} is not a new dead segment of {queue!r}")
            if ref.count < 1 or ref.first_seq > ref.last_seq or ref.min_id > ref.max_id:
                raise _fail(f"{where}.count", "its count and bounds do not hold together")
            dead.append(ref)
    for i, entry in enumerate(wire.dead_aside):
        where = f"$.dead_aside[{i}]"
        ref = entry.ref
        if dead.holds(ref.key) or not ref.key.startswith("dead/"):
            raise _fail(f"{where}.ref.key", f"{ref.key!r} is not a new dead segment")
        if ref.count < 1 or ref.first_seq > ref.last_seq or ref.min_id > ref.max_id:
            raise _fail(f"{where}.ref.count", "its count and bounds do not hold together")
        if not entry.reason:
            raise _fail(f"{where}.reason", "must say why it was set aside")
        dead.set_aside(entry, listed=False)
    return dead


def _segments(wire: WireDocument) -> Segments:
    """The segment references, checked: each one on its own, the seq order and
    overlap per stream, and key and id uniqueness across them."""
    segments = Segments()
    live_keys = {
        job.key
        for job in wire.jobs
        if job.key is not None and job.status in ("queued", "claimed", "waiting")
    }
    for queue, section in wire.queues.items():
        if not queue:
            raise _fail("$.queues['']", "a queue name must not be empty")
        for i, ref in enumerate(section.segments):
            where = f"$.queues[{queue!r}].segments[{i}]"
            _check_listed(where, queue, ref, wire, segments, live_keys)
            last = segments.last(ref.stream)
            if last is not None and ref.first_seq <= last.last_seq:
                raise _fail(
                    f"{where}.first_seq",
                    f"{ref.first_seq} is not after the stream's previous segment "
                    f"(last_seq {last.last_seq})",
                )
            segments.append(ref)
        for i, entry in enumerate(section.set_aside):
            where = f"$.queues[{queue!r}].set_aside[{i}]"
            _check_listed(f"{where}.ref", queue, entry.ref, wire, segments, live_keys)
            if not entry.reason:
                raise _fail(f"{where}.reason", "must say why the segment was set aside")
            segments.set_aside(entry, listed=False)
    return segments


def _check_listed(
    where: str,
    queue: str,
    ref: SegmentRef,
    wire: WireDocument,
    segments: Segments,
    live_keys: set[str],
) -> None:
    """A reference (listed or set aside) on its own, and against the ones before it."""
    if ref.queue != queue:
        raise _fail(f"{where}.queue", f"{ref.queue!r} is not the queue it is listed under")
    _check_ref(where, ref, wire.next_seq)
    if segments.holds(ref.key):
        raise _fail(f"{where}.key", f"{ref.key!r} is referenced twice")
    for job_id, key in ref.keyed.items():
        if key in live_keys or key in segments.keys:
            raise _fail(f"{where}.keyed[{job_id!r}]", f"key {key!r} is held twice")


def _check_ref(where: str, ref: SegmentRef, next_seq: int) -> None:
    """One reference's fields, each against the others."""
    try:
        check_key(ref.key)
    except InvalidInput as exc:
        raise _fail(f"{where}.key", str(exc)) from exc
    if not ref.key.startswith(SEGMENT_PREFIX):
        raise _fail(f"{where}.key", f"{ref.key!r} is not under {SEGMENT_PREFIX}")
    if not PRIORITY_MIN <= ref.priority <= PRIORITY_MAX:
        raise _fail(f"{where}.priority", f"{ref.priority} is out of range")
    if not 0 <= ref.first_seq <= ref.last_seq < next_seq:
        raise _fail(
            f"{where}.last_seq",
            f"first_seq {ref.first_seq} <= last_seq {ref.last_seq} < next_seq {next_seq} fails",
        )
    if not 0 < ref.count <= ref.last_seq - ref.first_seq + 1:
        raise _fail(f"{where}.count", f"{ref.count} jobs do not fit its seq range")
    if ref.size_bytes < 0:
        raise _fail(f"{where}.bytes", f"{ref.size_bytes} is negative")
    if not 0 <= ref.loaded < ref.count:
        raise _fail(f"{where}.loaded", f"{ref.loaded} is not below count {ref.count}")
    if not ref.first_seq <= ref.next_seq <= ref.last_seq or (ref.loaded == 0) != (
        ref.next_seq == ref.first_seq
    ):
        raise _fail(f"{where}.next_seq", f"{ref.next_seq} does not fit first_seq and loaded")
    if not ref.min_id or ref.max_id < ref.min_id:
        raise _fail(f"{where}.min_id", "ids are bounded by a non-empty min_id <= max_id")
    _check_ref_ids(where, ref)


def _check_ref_ids(where: str, ref: SegmentRef | DelayedRef) -> None:
    if len(ref.cancelled) > ref.count - ref.loaded:
        raise _fail(f"{where}.cancelled", "more cancelled jobs than jobs left to load")
    if len(set(ref.cancelled)) != len(ref.cancelled):
        raise _fail(f"{where}.cancelled", "an id is listed twice")
    for j, job_id in enumerate(ref.cancelled):
        if not ref.min_id <= job_id <= ref.max_id:
            raise _fail(f"{where}.cancelled[{j}]", f"{job_id!r} is outside min_id..max_id")
    for job_id, key in ref.keyed.items():
        if not ref.min_id <= job_id <= ref.max_id or not key or job_id in ref.cancelled:
            raise _fail(
                f"{where}.keyed[{job_id!r}]", "a live spilled job's id (in min_id..max_id) and key"
            )
    for j, payload in enumerate(ref.payload_refs):
        if not payload:
            raise _fail(f"{where}.payload_refs[{j}]", "must not be empty")


def _delayed(wire: WireDocument) -> DelayedCold:
    """The references to objects of delayed jobs (and those set aside), each checked,
    keys held once."""
    cold = DelayedCold()
    live = ("queued", "claimed", "waiting")
    held = {job.key for job in wire.jobs if job.key is not None and job.status in live}
    for i, ref in enumerate(wire.delayed):
        _check_delayed(f"$.delayed[{i}]", ref, wire.next_seq, cold, held)
        cold.add(ref)
    for i, entry in enumerate(wire.delayed_aside):
        _check_delayed(f"$.delayed_aside[{i}].ref", entry.ref, wire.next_seq, cold, held)
        if not entry.reason:
            raise _fail(f"$.delayed_aside[{i}].reason", "must say why it was set aside")
        cold.set_aside(entry, listed=False)
    return cold


def _check_delayed(
    where: str, ref: DelayedRef, next_seq: int, cold: DelayedCold, held: set[str]
) -> None:
    try:
        check_key(ref.key)
    except InvalidInput as exc:
        raise _fail(f"{where}.key", str(exc)) from exc
    if not ref.key.startswith(DELAYED_PREFIX) or cold.holds(ref.key):
        raise _fail(f"{where}.key", f"{ref.key!r} is not under {DELAYED_PREFIX}, or twice")
    if not NAME_RE.match(ref.queue):
        raise _fail(f"{where}.queue", f"{ref.queue!r} is not a queue name")
    if not 0 <= ref.loaded < ref.count or ref.size_bytes < 0:
        raise _fail(f"{where}.loaded", f"{ref.loaded} is not below count {ref.count}")
    if not 0 <= ref.min_seq <= ref.max_seq < next_seq:
        raise _fail(f"{where}.max_seq", "min_seq <= max_seq < next_seq fails")
    if not ref.first_run_at <= ref.next_run_at <= ref.last_run_at:
        raise _fail(f"{where}.next_run_at", "not within first_run_at..last_run_at")
    if not ref.min_id or ref.max_id < ref.min_id:
        raise _fail(f"{where}.min_id", "ids are bounded by a non-empty min_id <= max_id")
    _check_ref_ids(where, ref)
    for job_id, key in ref.keyed.items():
        if key in held or key in cold.keys:
            raise _fail(f"{where}.keyed[{job_id!r}]", f"key {key!r} is held twice")


def _finished(wire: WireDocument) -> FinishedRecord:
    """The record of finished jobs, each entry checked."""
    record = FinishedRecord()
    for i, entry in enumerate(wire.finished):
        where = f"$.finished[{i}]"
        if not entry.id:
            raise _fail(f"{where}.id", "must not be empty")
        if entry.id in record:
            raise _fail(f"{where}.id", f"{entry.id!r} is recorded twice")
        if not 0 <= entry.ttl_s < _MAX_INT or entry.ttl_s != entry.ttl_s:
            raise _fail(f"{where}.ttl_s", f"{entry.ttl_s} is out of range")
        if entry.attempts < 0:
            raise _fail(f"{where}.attempts", f"{entry.attempts} is negative")
        if entry.result is not None:
            _check_result(where, entry)
        record.add(entry)
    return record


def _check_result(where: str, entry: FinishedJob) -> None:
    result = entry.result
    assert result is not None
    if entry.status != "done":
        raise _fail(f"{where}.result", f"a {entry.status} job has no result")
    if (result.value is None) == (result.ref is None):
        raise _fail(f"{where}.result", "a result has a value or a ref")
    if result.value is not None and len(result.value) != result.size:
        raise _fail(f"{where}.result.size", f"{result.size} is not the value's length")
    if result.ref is not None and not result.ref.startswith(f"{RESULT_PREFIX}{entry.id}="):
        raise _fail(f"{where}.result.ref", f"{result.ref!r} is not this job's object")
    if result.size < 0:
        raise _fail(f"{where}.result.size", f"{result.size} is negative")
