"""Hostile input for the document codec (Hypothesis).

``osqueue.state.decode`` gets truncated, mutated, deeply nested, oversized,
mistyped, non-UTF-8 and duplicated documents, and documents of other format
versions.  It either returns a document that re-encodes and decodes to itself,
or raises ``CorruptDocument`` naming the field path or the byte offset: never
anything else.  A broker started on a corrupt document refuses to start and
leaves the bytes untouched.
"""

from __future__ import annotations

import asyncio
import json
import re
from typing import Any

import pytest
from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st

from osqueue.broker import Broker, BrokerConfig
from osqueue.errors import CorruptDocument
from osqueue.state import (
    DOCUMENT_KEY,
    ClaimOp,
    Complete,
    Document,
    Push,
    decode,
    encode,
    transition,
)
from osqueue.state.codec import decode_owner
from osqueue.storage.memory import MemoryStorage

T0 = 1_800_000_000.0
FUZZ = settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])


def _valid(jobs: int = 4) -> bytes:
    """A realistic document: queued, claimed, done, delayed, keyed jobs and a broker."""
    from osqueue.state import BrokerInfo, to_datetime

    doc = Document.empty()
    owner = BrokerInfo(
        id="b-1", address="10.0.0.1:7070", epoch=3, lease_until=to_datetime(T0), lease_s=10.0
    )
    pushes = [
        Push(id=f"j{i}", payload=b"p" * i, key=f"k{i}" if i % 2 else None, delay_s=float(i % 3))
        for i in range(jobs)
    ]
    t = transition(doc, pushes, T0, owner=owner)
    t = transition(t.doc, [ClaimOp("w-1", ("default",), 2)], T0 + 5, owner=owner)
    claimed = [j for j in t.doc.jobs.values() if j.claim is not None]
    if claimed:
        first = claimed[0]
        assert first.claim is not None
        t = transition(t.doc, [Complete(first.id, first.claim.token)], T0 + 6, owner=owner)
    return encode(t.doc)


VALID = _valid()
WIRE: dict[str, Any] = json.loads(VALID)


def _outcome(data: bytes) -> Document | CorruptDocument:
    """decode's answer; anything but a Document or CorruptDocument fails the test."""
    try:
        doc = decode(data)
    except CorruptDocument as exc:
        error = exc
    else:
        error = None
    if error is not None:
        assert error.path is not None or error.offset is not None, f"no location in: {error}"
        assert error.offset is None or 0 <= error.offset <= len(data)
        return error
    again = decode(encode(doc))  # whatever decodes is a document we can keep writing
    assert again == doc
    return doc


def _corrupt(data: bytes) -> CorruptDocument:
    outcome = _outcome(data)
    assert isinstance(outcome, CorruptDocument), f"decoded: {data[:200]!r}"
    return outcome


# --------------------------------------------------------------------------- byte-level damage


def test_the_reference_document_decodes() -> None:
    doc = decode(VALID)
    assert len(doc.jobs) == 4
    assert any(j.status == "done" for j in doc.jobs.values())


@FUZZ
@given(st.integers(min_value=0, max_value=len(VALID) - 1))
def test_every_truncation_is_corrupt_with_an_offset(cut: int) -> None:
    err = _corrupt(VALID[:cut])
    assert err.offset is not None or err.path is not None


@FUZZ
@given(st.lists(st.tuples(st.integers(0, len(VALID) - 1), st.integers(0, 255)), max_size=8))
def test_random_byte_mutations_decode_or_are_corrupt(edits: list[tuple[int, int]]) -> None:
    data = bytearray(VALID)
    for at, value in edits:
        data[at] = value
    _outcome(bytes(data))


@FUZZ
@given(st.binary(max_size=400))
def test_arbitrary_bytes_decode_or_are_corrupt(data: bytes) -> None:
    _outcome(data)


#: where every string value of the reference document starts (ids, names, times, keys)
STRING_VALUES = [m.end() for m in re.finditer(rb':"', VALID)]


@FUZZ
@given(st.sampled_from(STRING_VALUES), st.sampled_from([b"\xff", b"\xc3\x28", b"\xed\xa0\x80"]))
@example(VALID.index(b'"queue":"default"') + 9, b"\xff")
def test_invalid_utf8_in_any_string_value_is_corrupt(at: int, bad: bytes) -> None:
    data = VALID[:at] + bad + VALID[at:]
    err = _corrupt(data)
    assert err.offset is not None or err.path is not None


def test_invalid_utf8_in_a_dedupe_tombstone_id_names_its_byte() -> None:
    assert b'"tombstones":{}' in VALID
    data = VALID.replace(
        b'"tombstones":{}', b'"tombstones":{"2027-01-15T08:00:00Z":["ok","\xc3\x28"]}', 1
    )
    err = _corrupt(data)
    assert err.offset == data.index(b"\xc3\x28")


@pytest.mark.parametrize(
    ("section", "path"),
    [
        (b'{"2027-01-15 08:00:00":["a"]}', "$.tombstones['2027-01-15 08:00:00']"),
        (b'{"2027-02-30T08:00:00Z":["a"]}', "$.tombstones['2027-02-30T08:00:00Z']"),
        (b'{"2027-01-15T08:00:00Z":["a",""]}', "$.tombstones['2027-01-15T08:00:00Z'][1]"),
    ],
)
def test_a_bad_tombstone_second_or_id_names_its_path(section: bytes, path: str) -> None:
    data = VALID.replace(b'"tombstones":{}', b'"tombstones":' + section, 1)
    assert _corrupt(data).path == path


@pytest.mark.parametrize("fmt", [1, 2, 3])
def test_a_document_of_an_earlier_format_is_refused_at_format(fmt: int) -> None:
    """The formats before 4 were never released: one of them is refused as a
    later one is, at ``$.format``, with what to do (start a new queue)."""
    err = _corrupt(VALID.replace(b'"format":4', b'"format":%d' % fmt, 1))
    assert err.path == "$.format"
    assert f"has format {fmt}; this osqueue reads format 4 only" in str(err)
    assert "pre-release" in str(err)


def test_a_format_1_document_is_refused_whatever_its_tombstones() -> None:
    """Format 1 kept one creation time per id (``recent``): refused, not read."""
    format1 = VALID.replace(b'"format":4', b'"format":1', 1).replace(
        b'"tombstones":{}', b'"recent":{"old-a":"2027-01-15T07:59:59.250Z"}', 1
    )
    assert _corrupt(format1).path == "$.format"


@pytest.mark.parametrize("depth", [100, 10_000, 200_000])
@pytest.mark.parametrize("bracket", [(b"[", b"]"), (b'{"a":', b"}")])
def test_deep_nesting_is_corrupt_not_a_recursion_error(
    depth: int, bracket: tuple[bytes, bytes]
) -> None:
    opening, closing = bracket
    data = b'{"format":1,"version":' + opening * depth + b"1" + closing * depth + b"}"
    err = _corrupt(data)
    assert err.path is not None or err.offset is not None


@pytest.mark.parametrize("root", [b"[]", b"null", b"1", b'"queue"', b"true", b"{}"])
def test_a_root_that_is_not_a_document_names_the_root(root: bytes) -> None:
    err = _corrupt(root)
    assert err.path is not None or err.offset is not None


# --------------------------------------------------------------------------- structural damage


json_values = st.recursive(
    st.none()
    | st.booleans()
    | st.integers(min_value=-(2**70), max_value=2**70)
    | st.floats(allow_nan=False)
    | st.text(max_size=20),
    lambda inner: (
        st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=5), inner, max_size=3)
    ),
    max_leaves=8,
)

HEADER_FIELDS = [k for k in WIRE if k != "jobs"]
JOB_FIELDS = sorted({k for job in WIRE["jobs"] for k in job})


@FUZZ
@given(st.sampled_from(HEADER_FIELDS), json_values)
def test_a_header_field_of_any_value_decodes_or_names_its_path(field: str, value: object) -> None:
    wire = dict(WIRE, **{field: value})
    outcome = _outcome(json.dumps(wire).encode())
    if isinstance(outcome, CorruptDocument) and outcome.path is not None:
        assert outcome.path.startswith("$")


@FUZZ
@given(st.integers(0, len(WIRE["jobs"]) - 1), st.sampled_from(JOB_FIELDS), json_values)
def test_a_job_field_of_any_value_decodes_or_names_its_path(
    index: int, field: str, value: object
) -> None:
    jobs = [dict(job) for job in WIRE["jobs"]]
    jobs[index][field] = value
    outcome = _outcome(json.dumps(dict(WIRE, jobs=jobs)).encode())
    if isinstance(outcome, CorruptDocument) and outcome.path is not None:
        assert outcome.path.startswith("$")


@FUZZ
@given(
    st.sampled_from(["version", "next_token", "next_seq", "archived_through"]),
    st.one_of(
        st.integers(min_value=2**53, max_value=2**200),
        st.integers(max_value=-1, min_value=-(2**200)),
        st.sampled_from(["1e400", "-1e400", "1" + "0" * 400, "1.5", "-0.0"]),
    ),
)
def test_huge_and_negative_numbers_are_corrupt_at_their_field(field: str, value: object) -> None:
    number = str(value)
    data = VALID.replace(f'"{field}":'.encode(), f'"{field}":{number},"_was":'.encode(), 1)
    err = _corrupt(data)
    assert err.path == f"$.{field}" or err.offset is not None


@pytest.mark.parametrize("fmt", [0, 1, 2, 3, 5, 99, -1, "4", None, 4.0, True, [4]])
def test_unknown_format_versions_are_refused_at_format(fmt: object) -> None:
    err = _corrupt(json.dumps(dict(WIRE, format=fmt)).encode())
    assert err.path == "$.format"
    assert "format" in str(err)


@FUZZ
@given(st.integers(0, len(WIRE["jobs"]) - 1), st.integers(0, len(WIRE["jobs"])))
def test_duplicate_job_ids_are_corrupt_at_the_second(source: int, at: int) -> None:
    jobs = list(WIRE["jobs"])
    jobs.insert(at, dict(jobs[source]))
    err = _corrupt(json.dumps(dict(WIRE, jobs=jobs)).encode())
    assert err.path is not None
    assert err.path.endswith(".id")
    assert "duplicate" in str(err)


@FUZZ
@given(st.sampled_from(JOB_FIELDS + HEADER_FIELDS))
def test_a_missing_required_field_is_corrupt_or_defaulted(field: str) -> None:
    if field in HEADER_FIELDS:
        wire = {k: v for k, v in WIRE.items() if k != field}
    else:
        wire = dict(WIRE, jobs=[{k: v for k, v in j.items() if k != field} for j in WIRE["jobs"]])
    _outcome(json.dumps(wire).encode())


# --------------------------------------------------------------------------- the broker refuses


@pytest.mark.parametrize(
    "damage",
    [
        VALID[: len(VALID) // 2],
        VALID.replace(b'"format":4', b'"format":7', 1),
        VALID.replace(b'"format":4', b'"format":3', 1),
        VALID.replace(b'"format":4', b'"format":2', 1),
        VALID.replace(b'"queue":"default"', b'"queue":"\xff"', 1),
        b'{"format":1,"version":' + b"[" * 50_000 + b"]" * 50_000 + b"}",
        b"",
    ],
    ids=["truncated", "format-7", "format-3", "format-2", "bad-utf8", "deep", "empty"],
)
def test_a_broker_on_a_corrupt_document_refuses_to_start_and_leaves_the_bytes(
    damage: bytes,
) -> None:
    async def scenario() -> tuple[CorruptDocument | None, bytes, list[str]]:
        store = MemoryStorage("codec-fuzz-broker")
        try:
            await store.put(DOCUMENT_KEY, damage)
            broker = Broker(store, BrokerConfig(lease_s=5.0))
            refused: CorruptDocument | None = None
            try:
                await broker.start()
            except CorruptDocument as exc:
                refused = exc
            finally:
                await broker.stop()
            return refused, (await store.read(DOCUMENT_KEY)).data, await store.list()
        finally:
            MemoryStorage.drop("codec-fuzz-broker")

    refused, after, keys = asyncio.run(scenario())
    assert refused is not None
    assert refused.path is not None or refused.offset is not None
    assert after == damage  # not a byte changed
    assert keys == [DOCUMENT_KEY]  # and nothing else written beside it


# --------------------------------------------------------------------------- finding the broker


def test_decode_owner_reads_only_the_broker_of_any_format() -> None:
    doc = decode(VALID)
    assert decode_owner(VALID) == (doc.version, doc.broker)
    future = json.dumps(dict(WIRE, format=99, jobs={"new": "layout"}, extra=[1, 2])).encode()
    assert decode_owner(future) == (doc.version, doc.broker)  # a client still finds it
    assert _corrupt(future).path == "$.format"  # while a broker refuses to touch it


@FUZZ
@given(st.lists(st.tuples(st.integers(0, len(VALID) - 1), st.integers(0, 255)), max_size=8))
@example([])
def test_decode_owner_returns_or_names_the_damage(edits: list[tuple[int, int]]) -> None:
    data = bytearray(VALID)
    for at, value in edits:
        data[at] = value
    for candidate in (bytes(data), bytes(data[: len(data) // 2])):
        error: CorruptDocument | None = None
        try:
            decode_owner(candidate)
        except CorruptDocument as exc:
            error = exc
        assert error is None or error.path is not None or error.offset is not None


@pytest.mark.parametrize(
    "value",
    [b'""', b'"01JD0000000000000000000000"', b'"01jd00000000000000000000"', b"42", b'"../x"'],
)
def test_a_queue_id_that_is_not_one_is_corrupt_naming_it(value: bytes) -> None:
    data = VALID.replace(b'"stats":', b'"queue_id":' + value + b',"stats":', 1)
    error = _corrupt(data)
    assert error.path == "$.queue_id", error
    assert "queue_id" in str(error)


def test_a_queue_id_is_kept_by_every_transition() -> None:
    doc = decode(VALID)
    doc.queue_id = "01jd0000000000000000000000"
    again = decode(encode(doc))
    assert again.queue_id == "01jd0000000000000000000000"
    t = transition(again, [Push(id="more", payload=b"x")], T0 + 10)
    assert decode(encode(t.doc)).queue_id == "01jd0000000000000000000000"
