"""What a push records for its payload object (size and SHA-256), pure: no event loop.

The claim-time check against these fields is tested with a broker in
``tests/integration/test_hostile_storage.py``.
"""

from __future__ import annotations

import hashlib

import msgspec
import pytest

from osqueue.errors import CorruptDocument, InvalidInput
from osqueue.state import Document, Push, Pushed, apply, decode, encode

T0 = 1_800_000_000.0
DIGEST = hashlib.sha256(b"x" * 5000).hexdigest()


def ref_push(job_id: str = "r1", **kw: object) -> Push:
    fields: dict[str, object] = {
        "payload": None,
        "payload_ref": f"payloads/{job_id}=u",
        "payload_size": 5000,
        "payload_sha256": DIGEST,
    }
    fields.update(kw)
    return Push(id=job_id, **fields)  # type: ignore[arg-type]


def test_a_payload_object_push_stores_size_and_digest_and_they_survive_the_codec() -> None:
    doc, (res,) = apply(Document.empty(), [ref_push()], T0)
    assert res == Pushed("r1", True)
    job = decode(encode(doc)).jobs["r1"]
    assert (job.payload_ref_bytes, job.payload_ref_sha256) == (5000, DIGEST)
    assert job.payload_size == 5000


def test_an_inline_job_costs_nothing_more() -> None:
    doc, _ = apply(Document.empty(), [Push(id="i1", payload=b"small")], T0)
    data = encode(doc)
    assert b"payload_ref_bytes" not in data
    assert b"payload_ref_sha256" not in data
    assert decode(data).jobs["i1"].payload_ref_bytes is None


def test_a_document_without_the_fields_still_decodes() -> None:
    doc, _ = apply(Document.empty(), [ref_push()], T0)
    raw = msgspec.json.decode(encode(doc))
    for job in raw["jobs"]:
        del job["payload_ref_bytes"], job["payload_ref_sha256"]
    old = decode(msgspec.json.encode(raw)).jobs["r1"]
    assert old.payload_ref == "payloads/r1=u"
    assert (old.payload_ref_bytes, old.payload_ref_sha256) == (None, None)


@pytest.mark.parametrize("digest", ["abc", DIGEST.upper(), DIGEST[:-1] + "g", DIGEST + "0", 7])
def test_a_push_with_a_malformed_digest_is_refused_naming_the_field(digest: object) -> None:
    doc, (res,) = apply(Document.empty(), [ref_push(payload_sha256=digest)], T0)
    assert isinstance(res, InvalidInput)
    assert res.field == "payload_sha256"
    assert "r1" not in doc.jobs


def test_a_digest_without_a_payload_object_is_refused() -> None:
    op = Push(id="i1", payload=b"small", payload_sha256=DIGEST)
    _, (res,) = apply(Document.empty(), [op], T0)
    assert isinstance(res, InvalidInput)
    assert res.field == "payload_sha256"


@pytest.mark.parametrize(
    ("field", "value"), [("payload_ref_sha256", "nothex"), ("payload_ref_bytes", -1)]
)
def test_a_stored_malformed_record_is_a_corrupt_document(field: str, value: object) -> None:
    doc, _ = apply(Document.empty(), [ref_push()], T0)
    raw = msgspec.json.decode(encode(doc))
    raw["jobs"][0][field] = value
    with pytest.raises(CorruptDocument) as info:
        decode(msgspec.json.encode(raw))
    assert info.value.path == f"$.jobs[0].{field}"
