"""The record of finished jobs and results, as pure state: recording, expiry,
eviction, the document's cap, the codec, and ``finished()``."""

from __future__ import annotations

import msgspec
import pytest

from osqueue.errors import CorruptDocument, InvalidInput, LeaseLost
from osqueue.state import (
    Cancel,
    ClaimOp,
    Complete,
    Document,
    Fail,
    FinishedRecord,
    MarkArchived,
    Ok,
    Policy,
    PurgeDead,
    Push,
    Pushed,
    ResultData,
    RetryDead,
    StoredJob,
    apply,
    decode,
    encode,
    finished,
    transition,
)
from osqueue.state.finished_jobs import PRUNE_SLACK_S, FinishedJob
from osqueue.state.model import to_datetime
from osqueue.state.results import answer

T0 = 1_800_000_000.0
P = Policy(result_ttl_s=100.0)


def _claimed(n: int, policy: Policy = P, **push: object) -> tuple[Document, list[StoredJob]]:
    ops = [Push(id=f"j{i}", payload=b"p", **push) for i in range(n)]  # type: ignore[arg-type]
    doc = apply(Document.empty(), ops, T0, policy)[0]
    t = transition(doc, [ClaimOp("w", max_jobs=n)], T0, policy)
    jobs = list(t.results[0].jobs)  # type: ignore[union-attr]
    return t.doc, jobs


def _complete(job: StoredJob, result: ResultData | None = None) -> Complete:
    assert job.claim is not None
    return Complete(job.id, job.claim.token, result)


def inline(value: bytes, kind: str = "bytes") -> ResultData:
    return ResultData(kind, len(value), value=value)  # type: ignore[arg-type]


def test_a_completion_records_its_result_in_the_same_version() -> None:
    doc, (job,) = _claimed(1)
    t = transition(doc, [_complete(job, inline(b'{"a":1}', "json"))], T0 + 1, P)
    assert t.results == [Ok()]
    assert t.finished == ["j0"]
    entry = t.doc.finished.get("j0")
    assert entry is not None
    assert (entry.status, entry.attempts, entry.ttl_s) == ("done", 1, 100.0)
    assert entry.finished_at.timestamp() == pytest.approx(T0 + 1)
    assert entry.result == inline(b'{"a":1}', "json")
    assert finished(t.doc, "j0") == "done"
    found = answer(t.doc, "j0", T0 + 2)
    assert found is not None
    assert (found.result.status, found.result.value) == ("done", {"a": 1})


def test_dead_and_cancelled_jobs_are_recorded_and_purge_keeps_the_record() -> None:
    doc, (job,) = _claimed(1, max_attempts=1)
    assert job.claim is not None
    t = transition(doc, [Fail(job.id, job.claim.token, "boom"), Push(id="c", payload=b"")], T0, P)
    t = transition(t.doc, [Cancel("c")], T0 + 1, P)
    assert t.finished == ["c"]
    assert finished(t.doc, "j0") == "dead"
    assert finished(t.doc, "c") == "cancelled"
    assert t.doc.finished.get("j0").error == "boom"  # type: ignore[union-attr]
    doc = apply(t.doc, [PurgeDead(("j0",))], T0 + 2, P)[0]
    assert "j0" not in doc.jobs
    assert finished(doc, "j0") == "dead"


def test_a_dead_job_retried_is_live_again() -> None:
    doc, (job,) = _claimed(1, max_attempts=1)
    assert job.claim is not None
    doc = apply(doc, [Fail(job.id, job.claim.token, "boom")], T0, P)[0]
    doc = apply(doc, [RetryDead(("j0",))], T0 + 1, P)[0]
    assert finished(doc, "j0") is None
    assert "j0" not in doc.finished


def test_a_reclaimed_job_at_max_attempts_is_recorded_dead() -> None:
    doc, (_job,) = _claimed(1, max_attempts=1)
    t = transition(doc, [], T0 + P.heartbeat_timeout_s + 1, P)
    assert t.reclaimed == ["j0"]
    assert t.finished == ["j0"]
    assert finished(t.doc, "j0") == "dead"
    assert "stopped heartbeating" in (t.doc.finished.get("j0").error or "")  # type: ignore[union-attr]


def test_finished_answers_from_the_document_when_the_record_has_no_entry() -> None:
    doc, (job,) = _claimed(1, result_ttl_s=0.0)
    doc = apply(doc, [_complete(job)], T0, P)[0]
    assert len(doc.finished) == 0  # a TTL of 0 keeps no entry...
    assert finished(doc, "j0") == "done"  # ...but the done job in the document answers
    doc = apply(doc, [MarkArchived((doc.jobs["j0"].done_version or 0,))], T0, P)[0]
    assert finished(doc, "j0") is None
    assert finished(doc, "never") is None


def test_a_retried_completion_keeps_the_first_result() -> None:
    doc, (job,) = _claimed(1)
    doc = apply(doc, [_complete(job, inline(b"first"))], T0, P)[0]
    doc, res = apply(doc, [_complete(job, inline(b"second"))], T0 + 1, P)
    assert res == [Ok()]
    assert doc.finished.get("j0").result == inline(b"first")  # type: ignore[union-attr]


@pytest.mark.parametrize(
    ("result", "field"),
    [
        (ResultData("json", 3, value=b"{x}"), "result.value"),
        (ResultData("text", 2, value=b"\xff\xfe"), "result.value"),
        (ResultData("yaml", 1, value=b"a"), "result.kind"),  # type: ignore[arg-type]
        (ResultData("bytes", 5, value=b"abc"), "result.value"),
        (ResultData("bytes", 2000, value=b"x" * 2000), "result.value"),
        (ResultData("bytes", 3), "result"),
        (ResultData("bytes", 3, value=b"abc", ref="results/j0=u"), "result"),
        (ResultData("bytes", 10, ref="results/other=u"), "result.ref"),
        (ResultData("bytes", 10, ref="payloads/j0=u"), "result.ref"),
        (ResultData("bytes", 10, ref="results/j0=u/../x"), "result.ref"),
        (ResultData("bytes", 2**40, ref="results/j0=u"), "result.size"),
    ],
)
def test_a_bad_result_fails_its_completion_alone_naming_the_field(
    result: ResultData, field: str
) -> None:
    doc, (job,) = _claimed(1)
    doc, res = apply(doc, [_complete(job, result), Push(id="other", payload=b"")], T0, P)
    assert isinstance(res[0], InvalidInput)
    assert res[0].field == field
    assert res[1] == Pushed("other", True)
    assert doc.jobs["j0"].status == "claimed"
    assert "j0" not in doc.finished


def test_a_stale_token_records_nothing() -> None:
    doc, (job,) = _claimed(1)
    assert job.claim is not None
    doc, res = apply(doc, [Complete(job.id, job.claim.token + 99, inline(b"x"))], T0, P)
    assert isinstance(res[0], LeaseLost)
    assert len(doc.finished) == 0


def test_entries_expire_after_their_ttl_pruned_in_one_batch() -> None:
    doc, jobs = _claimed(3)
    doc = apply(doc, [_complete(jobs[0])], T0, Policy(result_ttl_s=10.0))[0]
    doc = apply(doc, [_complete(jobs[1])], T0 + 1, P)[0]
    doc = apply(doc, [_complete(jobs[2])], T0 + 2, Policy(result_ttl_s=1000.0))[0]
    # j0 expires at T0+10 but stays until the soonest has been expired for the slack
    doc = apply(doc, [], T0 + 10 + PRUNE_SLACK_S - 1, P)[0]
    assert len(doc.finished) == 3
    assert answer(doc, "j0", T0 + 11) is not None  # the done job is still in the document
    doc = apply(doc, [], T0 + 10 + PRUNE_SLACK_S, P)[0]
    assert [e.id for e in doc.finished] == ["j1", "j2"]
    doc = apply(doc, [], T0 + 1 + 100 + PRUNE_SLACK_S, P)[0]
    assert [e.id for e in doc.finished] == ["j2"]
    assert doc.stats.finished_evicted == 0


def test_an_expired_entry_is_not_an_answer_even_before_it_is_pruned() -> None:
    doc, (job,) = _claimed(1)
    doc = apply(doc, [_complete(job, inline(b"v"))], T0, P)[0]
    doc = apply(doc, [MarkArchived((doc.jobs["j0"].done_version or 0,))], T0, P)[0]
    assert answer(doc, "j0", T0 + 100) is not None
    assert "j0" in doc.finished
    assert answer(doc, "j0", T0 + 100.01) is None


def test_past_the_count_cap_the_soonest_to_expire_are_evicted_and_counted() -> None:
    policy = Policy(result_ttl_s=100.0, max_finished_jobs=10)
    doc, jobs = _claimed(12, policy)
    # j0 asks for the longest TTL: it outlives the eviction
    doc = apply(doc, [_complete(jobs[0])], T0, Policy(result_ttl_s=5000.0))[0]
    doc = apply(doc, [_complete(j) for j in jobs[1:]], T0 + 1, policy)[0]
    assert len(doc.finished) == 9  # 12 over a cap of 10: down to 90% of it in one batch
    assert doc.stats.finished_evicted == 3
    assert "j0" in doc.finished


def test_the_record_yields_to_jobs_under_max_document_bytes() -> None:
    policy = Policy(max_document_bytes=12_000, result_ttl_s=1000.0)
    doc, jobs = _claimed(30, policy)
    big = b"r" * 900
    doc = apply(doc, [_complete(j, inline(big)) for j in jobs], T0, policy)[0]
    assert len(encode(doc)) <= policy.max_document_bytes
    assert 0 < len(doc.finished) < len(jobs)  # (the cap admits 29 of the 30 pushes)
    assert doc.stats.finished_evicted == len(jobs) - len(doc.finished)
    # pushes do not count the record's bytes: the record makes room again
    pushes = [Push(id=f"n{i}", payload=b"p" * 50) for i in range(40)]
    doc, res = apply(doc, pushes, T0 + 1, policy)
    assert any(isinstance(r, Pushed) for r in res)
    assert len(encode(doc)) <= policy.max_document_bytes
    assert doc.size_bytes() == len(encode(doc))


def test_a_job_pushed_again_after_its_dedupe_window_drops_its_old_entry() -> None:
    doc, (job,) = _claimed(1, dedupe=True)
    doc = apply(doc, [_complete(job, inline(b"old"))], T0, P)[0]
    doc = apply(doc, [MarkArchived((doc.jobs["j0"].done_version or 0,))], T0, P)[0]
    # within the dedupe window: the same push is recognised, the entry stays
    doc, res = apply(doc, [Push(id="j0", payload=b"p")], T0 + 1, P)
    assert res == [Pushed("j0", False)]
    assert finished(doc, "j0") == "done"
    doc = apply(doc, [], T0 + 2 * P.dedupe_window_s, P)[0]  # the tombstone is pruned
    doc, res = apply(doc, [Push(id="j0", payload=b"p")], T0 + 2 * P.dedupe_window_s, P)
    assert res == [Pushed("j0", True)]
    assert finished(doc, "j0") is None


def test_result_ttl_s_is_checked_and_kept_on_the_job() -> None:
    doc, res = apply(
        Document.empty(),
        [Push(id="a", payload=b"", result_ttl_s=5), Push(id="b", payload=b"", result_ttl_s=-1)],
        T0,
        P,
    )
    assert res[0] == Pushed("a", True)
    assert isinstance(res[1], InvalidInput)
    assert res[1].field == "result_ttl_s"
    assert doc.jobs["a"].result_ttl_s == 5.0


def test_the_record_round_trips_through_the_codec_and_sizes_exactly() -> None:
    doc, jobs = _claimed(4, max_attempts=1)
    assert jobs[3].claim is not None
    doc = apply(
        doc,
        [
            _complete(jobs[0], inline(b"\x00\x01", "bytes")),
            _complete(jobs[1], ResultData("json", 1 << 20, ref="results/j1=01JD")),
            _complete(jobs[2]),
            Fail("j3", jobs[3].claim.token, "x" * 5000),
        ],
        T0,
        P,
    )[0]
    data = encode(doc)
    assert doc.size_bytes() == len(data)
    back = decode(data)
    assert back == doc
    assert encode(back) == data
    assert len(back.finished.get("j3").error or "") == 1024  # type: ignore[union-attr]
    assert back.finished.refs() == {"results/j1=01JD"}
    # an empty record writes nothing (older releases' documents stay as they were)
    assert b'"finished"' not in encode(Document.empty())


def _with_entry(**entry: object) -> bytes:
    doc, (job,) = _claimed(1)
    doc = apply(doc, [_complete(job, inline(b"v"))], T0, P)[0]
    raw = msgspec.json.decode(encode(doc))
    raw["finished"][0].update(entry)
    if entry.get("id") == "dup":
        raw["finished"].append(raw["finished"][0])
    return msgspec.json.encode(raw)


@pytest.mark.parametrize(
    ("entry", "path"),
    [
        ({"id": ""}, "$.finished[0].id"),
        ({"id": "dup"}, "$.finished[1].id"),
        ({"ttl_s": -1.0}, "$.finished[0].ttl_s"),
        ({"attempts": -1}, "$.finished[0].attempts"),
        ({"status": "cancelled"}, "$.finished[0].result"),
        ({"result": {"kind": "bytes", "size": 1}}, "$.finished[0].result"),
        ({"result": {"kind": "bytes", "size": 9, "value": "dg=="}}, "$.finished[0].result.size"),
        (
            {"result": {"kind": "bytes", "size": 9, "ref": "results/x=u"}},
            "$.finished[0].result.ref",
        ),
    ],
)
def test_a_bad_entry_is_refused_naming_its_path(entry: dict[str, object], path: str) -> None:
    with pytest.raises(CorruptDocument) as info:
        decode(_with_entry(**entry))
    assert info.value.path == path


def test_an_unknown_status_does_not_decode() -> None:
    with pytest.raises(CorruptDocument) as info:
        decode(_with_entry(status="lost"))
    assert "finished" in (info.value.path or "")


def test_the_record_section_is_appended_and_rebuilt_after_removals() -> None:
    record = FinishedRecord()
    doc, jobs = _claimed(3)
    doc = apply(doc, [_complete(j) for j in jobs], T0, P)[0]
    entries = list(doc.finished)
    for e in entries:
        record.add(e)
    assert bytes(record.section()) == b",".join(msgspec.json.encode(e) for e in entries)
    record.remove("j1")
    assert bytes(record.section()) == b",".join(
        msgspec.json.encode(e) for e in (entries[0], entries[2])
    )
    assert record.size_bytes() == len(record.section())
    record.add(FinishedJob("j9", "cancelled", entries[0].finished_at, 1.0))
    assert record.size_bytes() == len(record.section())
    assert record.copy() == record


def _entry(i: int, at: float, ttl_s: float) -> FinishedJob:
    return FinishedJob(f"e{i:04d}", "done", to_datetime(at), ttl_s)


def test_past_as_many_stale_heap_items_as_entries_the_heap_is_made_again_in_order() -> None:
    # A seal takes the record's oldest entries at once: their heap items go stale.
    # Past as many of them as there are entries the heap is rebuilt from the
    # entries: the soonest to expire still comes first, and none is lost.
    record = FinishedRecord(_entry(i, T0 + i % 7, 100.0 + i) for i in range(300))
    for i in range(0, 300, 3):  # two thirds of the entries leave, and some come back
        record.remove(f"e{i:04d}")
        record.remove(f"e{i + 1:04d}")
    for i in range(0, 30, 3):
        record.add(_entry(i, T0, 1.0 + i))
    assert record._stale > len(record)
    expected = sorted(record, key=lambda e: (e.expires_at, e.id))
    evicted = record.evict(max_jobs=len(record) - 40, max_bytes=1 << 30)
    assert record._stale == 0  # made again once, then only current items were popped
    assert [e.id for e in evicted] == [e.id for e in expected[: len(evicted)]]
    assert sorted(e.id for e in record) == sorted(e.id for e in expected[len(evicted) :])
    pruned = record.prune(T0 + 200 + PRUNE_SLACK_S)
    assert [e.id for e in pruned] == [
        e.id for e in expected[len(evicted) :] if e.expires_at <= T0 + 200 + PRUNE_SLACK_S
    ]


def test_an_entry_expires_by_its_own_finished_at_whatever_was_converted_before() -> None:
    shared = to_datetime(T0 + 5)
    a = FinishedJob("a", "done", shared, 10.0)
    b = FinishedJob("b", "done", shared, 20.0)  # the same finished_at object: remembered
    c = FinishedJob("c", "done", to_datetime(T0 + 5), 30.0)  # an equal one, not the same
    d = FinishedJob("d", "done", to_datetime(T0 + 9.5), 0.5)
    assert [e.expires_at for e in (a, b, c, d, a)] == [
        e.finished_at.timestamp() + e.ttl_s for e in (a, b, c, d, a)
    ]
