"""Segment objects and segment references as bytes, and the document's size accounting."""

from __future__ import annotations

import json
from typing import Any

import msgspec
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from osqueue.errors import CorruptDocument, InvalidInput, QueueFull
from osqueue.state import (
    Cancel,
    ClaimOp,
    Complete,
    Document,
    Fail,
    MarkArchived,
    Policy,
    Push,
    Pushed,
    apply,
    build_segment,
    cancel_op,
    check_object,
    decode,
    decode_segment,
    encode,
    encode_segment,
    load_op,
    plan_spills,
    segment_key,
    transition,
)
from osqueue.state.admission import CLAIM_RESERVE_BYTES
from osqueue.state.document import HEAD_SLACK_BYTES
from osqueue.state.model import Claim, StoredJob, to_datetime
from osqueue.state.segment_codec import SegmentLines
from osqueue.storage.keys import check_key

T0 = 1_800_000_000.0
P = Policy(segment_jobs=3, head_jobs=1, load_jobs=1, spill_above_jobs=3)


def _jobs(n: int = 4, **kw: Any) -> list[Any]:
    doc = apply(Document.empty(), [Push(id=f"j{i}", payload=b"p" * i, **kw) for i in range(n)], T0)[
        0
    ]
    return list(doc.jobs.values())


# --------------------------------------------------------------------------- objects


def test_a_segment_object_round_trips_and_reuses_the_documents_encodings() -> None:
    doc = apply(
        Document.empty(), [Push(id=f"j{i}", payload=b"x" * i, key=f"k{i}") for i in range(5)], T0
    )[0]
    jobs = list(doc.jobs.values())
    data = encode_segment(jobs)
    assert data == encode_segment(jobs, [doc.encoded_job(j.id) for j in jobs])
    assert data.count(b"\n") == 6
    header, back = decode_segment(data)
    assert back == jobs
    assert (header.queue, header.priority, header.first_seq, header.last_seq, header.count) == (
        "default",
        0,
        1,
        5,
        5,
    )
    ref, again = build_segment(jobs, "01JD0000000000000000000000")
    assert again == data
    assert ref.size_bytes == len(data)
    check_object(ref, header)


@pytest.mark.parametrize("queue", ["index", "a/b", ".", "..", ".osqueue-x", "ns:1/../x", "-"])
def test_segment_keys_are_valid_storage_keys_for_any_queue_name(queue: str) -> None:
    key = segment_key(queue, -3, 120_000, "01JD0000000000000000000000")
    assert check_key(key) == key
    assert key.startswith("segments/")
    assert key.endswith("/p-3/00000000000000120000=01JD0000000000000000000000.jsonl")
    assert segment_key(queue, -3, 120_000, "other") != key


def test_a_segment_key_needs_a_plain_unique_part() -> None:
    with pytest.raises(InvalidInput) as err:
        segment_key("q", 0, 1, "a/b")
    assert err.value.field == "unique"


def _lines(data: bytes) -> list[bytes]:
    return data.split(b"\n")


def _corrupt_line(data: bytes, line: int, change: Any) -> bytes:
    lines = _lines(data)
    value = json.loads(lines[line - 1])
    change(value)
    lines[line - 1] = json.dumps(value, separators=(",", ":")).encode()
    return b"\n".join(lines)


@pytest.mark.parametrize(
    ("edit", "path"),
    [
        (lambda d: d[:-1], "line 5: $"),
        (lambda d: d.replace(b'"status":"queued"', b'"status":"queued', 1), "line 2: $.status"),
        (lambda d: d.replace(b'"created_at":"', b'"created_at":[', 1), "line 2: $.created_at"),
        (lambda d: b"\n".join([*_lines(d)[:2], b"{nope", *_lines(d)[3:]]), "line 3: $"),
        (lambda d: _corrupt_line(d, 3, lambda v: v.update(seq="x")), "line 3: $.seq"),
        (lambda d: _corrupt_line(d, 3, lambda v: v.update(queue="other")), "line 3: $.queue"),
        (lambda d: _corrupt_line(d, 4, lambda v: v.update(seq=1)), "line 4: $.seq"),
        (lambda d: _corrupt_line(d, 2, lambda v: v.update(status="claimed")), "line 2: $.status"),
        (lambda d: _corrupt_line(d, 5, lambda v: v.update(id="j0")), "line 5: $.id"),
        (lambda d: _corrupt_line(d, 1, lambda v: v.update(count=3)), "line 1: $.count"),
        (lambda d: _corrupt_line(d, 1, lambda v: v.update(format=2)), "line 1: $.format"),
        (lambda d: _corrupt_line(d, 1, lambda v: v.update(last_seq=9)), "line 1: $.first_seq"),
    ],
)
def test_a_corrupt_segment_object_names_its_line_and_field(edit: Any, path: str) -> None:
    data = edit(encode_segment(_jobs()))
    with pytest.raises(CorruptDocument) as err:
        decode_segment(data, "segments/q/x.jsonl")
    assert err.value.path == path
    assert "segments/q/x.jsonl" in str(err.value)


def test_segment_lines_decode_a_chunk_at_a_time_and_find_a_job() -> None:
    jobs = _jobs(6)
    data = encode_segment(jobs)
    obj = SegmentLines.parse(data, "segments/q/x.jsonl")
    assert (len(obj), obj.size_bytes, obj.header.count) == (6, len(data), 6)
    assert obj.jobs(2, 4) == jobs[2:4]
    assert obj.jobs(5, 9) == jobs[5:]  # a chunk past the end stops at it
    assert [obj.find(j.id) for j in jobs] == list(range(6))
    assert obj.find("j") is None  # a prefix of an id is not the id
    assert obj.lines == [msgspec.json.encode(j) for j in jobs]


@pytest.mark.parametrize(
    ("edit", "path"),
    [
        (lambda d: d[:-1], "line 7: $"),
        (lambda d: b"{nope" + d[d.index(b"\n") :], "line 1: $"),
        (lambda d: _corrupt_line(d, 1, lambda v: v.update(format=2)), "line 1: $.format"),
        (lambda d: _corrupt_line(d, 1, lambda v: v.update(count=5)), "line 1: $.count"),
    ],
)
def test_segment_lines_name_a_broken_header(edit: Any, path: str) -> None:
    with pytest.raises(CorruptDocument) as err:
        SegmentLines.parse(edit(encode_segment(_jobs(6))), "segments/q/x.jsonl")
    assert err.value.path == path


def test_segment_lines_name_a_line_that_does_not_decode_when_its_chunk_is_read() -> None:
    data = encode_segment(_jobs(6))
    broken = b"\n".join([*_lines(data)[:4], b'{"id":"j3","seq":"x"}', *_lines(data)[5:]])
    obj = SegmentLines.parse(broken, "segments/q/x.jsonl")
    assert len(obj.jobs(0, 3)) == 3  # the chunks before it decode
    with pytest.raises(CorruptDocument) as err:
        obj.jobs(2, 5)
    assert err.value.path is not None
    assert err.value.path.startswith("line 5: ")


def _two_on_one_line(data: bytes) -> bytes:
    """Line 5 holds its own job and, after a space, line 6's; line 6 is left empty:
    as many lines as before, and as many values."""
    lines = _lines(data)
    lines[4], lines[5] = lines[4] + b" " + lines[5], b""
    return b"\n".join(lines)


@pytest.mark.parametrize(
    "edit",
    [
        lambda d: b"\n".join([*_lines(d)[:4], b"", *_lines(d)[5:]]),
        lambda d: b"\n".join([*_lines(d)[:4], b"  ", *_lines(d)[5:]]),
        lambda d: b"\n".join([*_lines(d)[:4], b'{"id":"j3"},{"id":"j4"}', *_lines(d)[5:]]),
        _two_on_one_line,
    ],
    ids=["empty", "blank", "two values", "two values, then an empty line"],
)
def test_a_chunk_names_a_line_that_is_not_one_job(edit: Any) -> None:
    """A line that is empty, blank or holds two values is named, though the lines
    around it decode.  (A chunk decoded in one ``decode_lines`` call would pass
    over the empty and blank lines and take two values from one line: with one
    of each, as many jobs as lines, read misaligned.  So a chunk is read a line
    at a time.)"""
    obj = SegmentLines.parse(edit(encode_segment(_jobs(6))), "segments/q/x.jsonl")
    assert obj.jobs(0, 3) == _jobs(6)[:3]
    with pytest.raises(CorruptDocument) as err:
        obj.jobs(0, 6)
    assert err.value.path is not None
    assert err.value.path.startswith("line 5: ")


def test_check_object_names_what_differs_from_the_reference() -> None:
    jobs = _jobs()
    ref, data = build_segment(jobs, "u")
    header, _ = decode_segment(data)
    with pytest.raises(CorruptDocument) as err:
        check_object(msgspec.structs.replace(ref, count=3), header)
    assert err.value.path == "line 1: $.count"


# --------------------------------------------------------------------------- the document


def _deep_doc() -> Document:
    ops = [
        Push(id=f"j{i}", payload=b"p", key=f"k{i}" if i % 2 else None, priority=i % 2)
        for i in range(14)
    ]
    ops.append(Push(id="r1", payload=None, payload_ref="payloads/r1=u", payload_size=7))
    doc = apply(Document.empty(), ops, T0, P)[0]
    objects = {}
    for n, plan in enumerate(plan_spills(doc, P)):
        op, data = plan.build(f"u{n}")
        objects[op.ref.key] = decode_segment(data)[1]
        doc = apply(doc, [op], T0, P)[0]
    first = next(iter(doc.segments))
    doc = apply(doc, [load_op(first, objects[first.key], 1)], T0, P)[0]
    second = list(doc.segments)[1]
    victim = objects[second.key][-1].id
    cancel = cancel_op(second, objects[second.key], victim)
    assert cancel is not None
    return apply(doc, [cancel], T0, P)[0]


def test_references_are_written_and_round_trip_exactly() -> None:
    doc = _deep_doc()
    refs = list(doc.segments)
    assert len(refs) >= 2
    assert any(r.loaded for r in refs)
    assert any(r.cancelled for r in refs)
    assert any(r.keyed for r in refs)
    data = encode(doc)
    assert data.startswith(b'{"format":4,')
    back = decode(data)
    assert back == doc
    assert encode(back) == data
    assert back.segments.barriers == doc.segments.barriers
    assert back.segments.keys == doc.segments.keys
    assert back.segments.payloads == doc.segments.payloads


def test_a_document_without_references_has_no_queues_section() -> None:
    doc = apply(Document.empty(), [Push(id="a", payload=b"p")], T0)[0]
    data = encode(doc)
    assert data.startswith(b'{"format":4,')
    assert b'"queues"' not in data


def _ref_edit(field: str, value: Any, i: int = 0) -> Any:
    def edit(wire: dict[str, Any]) -> None:
        queue = next(iter(wire["queues"].values()))
        queue["segments"][i][field] = value

    return edit


@pytest.mark.parametrize(
    ("edit", "path"),
    [
        (_ref_edit("key", "payloads/x"), ".key"),
        (_ref_edit("key", "segments//x"), ".key"),
        (_ref_edit("queue", "other"), ".queue"),
        (_ref_edit("priority", 2**40), ".priority"),
        (_ref_edit("last_seq", 10**9), ".last_seq"),
        (_ref_edit("count", 0), ".count"),
        (_ref_edit("bytes", -1), ".bytes"),
        (_ref_edit("loaded", 99), ".loaded"),
        (_ref_edit("next_seq", 0), ".next_seq"),
        (_ref_edit("min_id", ""), ".min_id"),
        (_ref_edit("cancelled", ["zz"]), ".cancelled[0]"),
        (_ref_edit("cancelled", ["j2", "j2"]), ".cancelled"),
        (_ref_edit("keyed", {"zz": "k"}), ".keyed['zz']"),
        (_ref_edit("payload_refs", [""]), ".payload_refs[0]"),
        (_ref_edit("next_created_at", "yesterday"), ".next_created_at"),
    ],
)
def test_a_reference_that_does_not_validate_names_its_field(edit: Any, path: str) -> None:
    wire = json.loads(encode(_deep_doc()))
    edit(wire)
    with pytest.raises(CorruptDocument) as err:
        decode(json.dumps(wire).encode())
    assert err.value.path is not None
    # our checks name the queue; msgspec's type errors write it as [...]
    assert err.value.path.startswith(("$.queues['default'].segments[0]", "$.queues[...]"))
    assert err.value.path.endswith(f"segments[0]{path}")


def test_references_must_not_overlap_or_repeat_and_keys_stay_unique() -> None:
    wire = json.loads(encode(_deep_doc()))
    refs = wire["queues"]["default"]["segments"]
    same_stream = [i for i, r in enumerate(refs) if r["priority"] == refs[0]["priority"]]
    twice = json.loads(json.dumps(wire))
    twice["queues"]["default"]["segments"].append(refs[0])
    with pytest.raises(CorruptDocument) as err:
        decode(json.dumps(twice).encode())
    assert err.value.path == f"$.queues['default'].segments[{len(refs)}].key"
    if len(same_stream) > 1:
        swapped = json.loads(json.dumps(wire))
        seg = swapped["queues"]["default"]["segments"]
        a, b = same_stream[:2]
        seg[a], seg[b] = seg[b], seg[a]
        with pytest.raises(CorruptDocument) as err:
            decode(json.dumps(swapped).encode())
        assert err.value.path == f"$.queues['default'].segments[{b}].first_seq"
    keyed = next(r for r in refs if r.get("keyed"))
    job_id, key = next(iter(keyed["keyed"].items()))
    held = json.loads(json.dumps(wire))
    held["jobs"].append(dict(held["jobs"][0], id="live", key=key))
    with pytest.raises(CorruptDocument) as err:
        decode(json.dumps(held).encode())
    assert err.value.path is not None
    assert err.value.path.endswith(f".keyed[{job_id!r}]")


# --------------------------------------------------------------------------- size


def _size_ok(doc: Document) -> None:
    upper = doc.size_upper()
    exact = doc.size_bytes()  # jobs changed since the last encode included
    data = encode(doc)
    assert exact == len(data)
    assert exact <= upper <= exact + HEAD_SLACK_BYTES
    assert doc.size_bytes() == len(data)


history = st.lists(
    st.one_of(
        st.tuples(st.just("push"), st.integers(0, 300), st.integers(0, 3000), st.booleans()),
        st.tuples(st.just("claim"), st.integers(1, 50)),
        st.tuples(st.just("fail"), st.integers(0, 4000)),
        st.tuples(st.just("done")),
        st.tuples(st.just("spill")),
        st.tuples(st.just("cancel"), st.integers(0, 300)),
    ),
    min_size=1,
    max_size=40,
)


@settings(max_examples=120, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(history)
def test_document_bytes_is_the_written_size_for_any_document(steps: list[Any]) -> None:
    """Exact after any commit, before and after it is encoded (the 5% the issue asks
    for is 0% here), and the cap's bound is at most the header's slack above."""
    policy = Policy(segment_jobs=20, head_jobs=5, spill_above_jobs=20)
    doc, now, n = Document.empty(), T0, 0
    for s in steps:
        ops: list[Any] = []
        if s[0] == "push":
            n += 1
            ops = [
                Push(id=f"{n:026d}", payload=b"\x00\xff" * s[2], key=f'k"{s[1]}' if s[3] else None)
                for _ in range(1 + s[1] // 30)
            ]
            ops = [msgspec.structs.replace(op, id=f"{n}-{i}") for i, op in enumerate(ops)]
        elif s[0] == "claim":
            ops = [ClaimOp('w\u00e9"', max_jobs=s[1])]
        elif s[0] == "fail":
            ops = [
                Fail(j.id, j.claim.token, '\u2603\n"' * (s[1] // 3))
                for j in doc.jobs.values()
                if j.claim
            ][:5]  # type: ignore[union-attr]
        elif s[0] == "done":  # complete some, archive what an earlier one completed
            held = [j for j in doc.jobs.values() if j.claim and j.status == "claimed"][:5]
            ops = [Complete(j.id, j.claim.token) for j in held]  # type: ignore[union-attr]
            ops.append(MarkArchived(tuple({j.done_version or 0 for j in doc.jobs.values()})))
        elif s[0] == "cancel":
            ops = [Cancel(job_id) for job_id in list(doc.jobs)[: s[1] % 7]]
        else:
            for plan in plan_spills(doc, policy):
                ops.append(plan.build("u" + str(len(ops)))[0])
        now += 1
        doc = transition(doc, ops, now, policy).doc
        _size_ok(doc)


def test_document_bytes_over_a_range_of_sizes_including_tombstones_and_references() -> None:
    for n in (0, 1, 10, 100, 1000, 5000):
        doc = apply(
            Document.empty(), [Push(id=f"j{i}", payload=b"p" * (i % 50)) for i in range(n)], T0, P
        )[0]
        _size_ok(doc)
        doc = apply(doc, [ClaimOp("w", max_jobs=n // 2 or 1)], T0, P)[0]
        _size_ok(doc)
        doc = apply(doc, [Cancel(f"j{i}") for i in range(0, n, 3)], T0, P)[0]
        _size_ok(doc)
        for i, plan in enumerate(plan_spills(doc, P)):
            doc = apply(doc, [plan.build(f"u{i}")[0]], T0, P)[0]
        _size_ok(doc)


def test_the_cap_means_the_written_size_once_every_queued_job_is_claimed() -> None:
    cap = 20_000
    policy = Policy(max_document_bytes=cap)
    pushes = [Push(id=f"j{i:04d}", payload=b"p" * 40) for i in range(400)]
    doc, res = apply(Document.empty(), pushes, T0, policy)
    assert all(isinstance(r, Pushed | QueueFull) for r in res)
    assert len([r for r in res if isinstance(r, Pushed)]) == len(doc.jobs)
    written = len(encode(doc))
    reserve = CLAIM_RESERVE_BYTES * len(doc.jobs)
    assert written + reserve <= cap
    # refused only when it did not fit
    assert (
        cap - (written + reserve)
        < len(doc.encoded_job("j0000")) + 1 + CLAIM_RESERVE_BYTES + HEAD_SLACK_BYTES
    )
    assert doc.size_bytes() == written  # what stats() reports: the written size
    doc = apply(doc, [ClaimOp("w" * 24, max_jobs=10_000)], T0, policy)[0]
    claimed = [j for j in doc.jobs.values() if j.claim is not None]
    doc = apply(doc, [Complete(j.id, j.claim.token) for j in claimed], T0, policy)[0]  # type: ignore[union-attr]
    assert len(encode(doc)) <= cap


def test_the_claim_reserve_covers_a_claim_and_its_completion() -> None:
    t = to_datetime(T0 + 0.123)
    queued = StoredJob(id="j", queue="q", seq=1, status="queued", created_at=t, payload=b"")
    claimed = msgspec.structs.replace(
        queued,
        status="claimed",
        claim=Claim("w" * 24, 10**12 - 1, t, t),
        attempts=1,
        first_claimed_at=t,
    )
    done = msgspec.structs.replace(
        claimed, status="done", payload=None, done_version=10**12 - 1, done_at=t
    )
    size = len(msgspec.json.encode(queued))
    for grown in (claimed, done):
        assert len(msgspec.json.encode(grown)) - size <= CLAIM_RESERVE_BYTES
