"""The pure transitions: one op at a time, no event loop."""

from __future__ import annotations

import pytest

from osqueue.errors import DuplicateKey, InvalidInput, JobNotFound, LeaseLost, QueueFull
from osqueue.state import (
    Cancel,
    Claimed,
    ClaimOp,
    Complete,
    Counted,
    Document,
    Fail,
    Heartbeat,
    MarkArchived,
    Ok,
    Policy,
    PurgeDead,
    Push,
    Pushed,
    Release,
    Removed,
    RestartHeartbeats,
    ResultData,
    RetryDead,
    apply,
    decode,
    encode,
    transition,
)
from osqueue.state.admission import SizeBound
from osqueue.state.document import held_bytes
from osqueue.state.model import StoredSettings

T0 = 1_800_000_000.0


def push(i: int | str, **kw: object) -> Push:
    return Push(id=f"j{i}", payload=b"p", **kw)  # type: ignore[arg-type]


def claim_one(doc: Document, now: float = T0, **kw: object) -> tuple[Document, Claimed]:
    doc, (res,) = apply(doc, [ClaimOp("w", **kw)], now)  # type: ignore[arg-type]
    assert isinstance(res, Claimed)
    return doc, res


def test_version_grows_by_one_per_apply_even_when_every_op_fails() -> None:
    doc = Document.empty()
    doc, res = apply(doc, [Heartbeat("a", 0)], T0)
    assert doc.version == 1
    assert isinstance(res[0], InvalidInput)
    doc, _ = apply(doc, [], T0)
    assert doc.version == 2


def test_apply_does_not_change_its_input() -> None:
    doc, _ = apply(Document.empty(), [push(1)], T0)
    before = encode(doc)
    apply(doc, [ClaimOp("w"), push(2)], T0)
    assert encode(doc) == before


def test_claim_order_is_priority_then_fifo_across_queues() -> None:
    ops = [
        push(1, queue="a", priority=5),
        push(2, queue="b", priority=0),
        push(3, queue="a", priority=0),
        push(4, queue="b", priority=-1),
    ]
    doc, _ = apply(Document.empty(), ops, T0)
    doc, res = claim_one(doc, queues=("a", "b"), max_jobs=10)
    assert [j.id for j in res.jobs] == ["j4", "j2", "j3", "j1"]
    assert len({j.claim.token for j in res.jobs if j.claim}) == 4


def test_delayed_job_is_invisible_until_due() -> None:
    doc, _ = apply(Document.empty(), [push(1, delay_s=10.0)], T0)
    doc, res = claim_one(doc, T0 + 9.9)
    assert res.jobs == ()
    doc, res = claim_one(doc, T0 + 10.0)
    assert [j.id for j in res.jobs] == ["j1"]


def test_stale_token_cannot_complete_or_heartbeat_after_reclaim() -> None:
    policy = Policy(heartbeat_timeout_s=30.0, backoff_base_s=0.0)
    doc, _ = apply(Document.empty(), [push(1)], T0)
    doc, first = claim_one(doc)
    old = first.jobs[0].claim
    assert old is not None
    doc, _ = apply(doc, [], T0 + 31.0, policy)  # the sweep reclaims it
    assert doc.jobs["j1"].status == "queued"
    doc, second = claim_one(doc, T0 + 32.0)
    new = second.jobs[0].claim
    assert new is not None
    assert new.token > old.token
    doc, res = apply(doc, [Complete("j1", old.token), Heartbeat("j1", old.token)], T0 + 33, policy)
    assert all(isinstance(r, LeaseLost) for r in res)
    doc, res = apply(doc, [Complete("j1", new.token)], T0 + 34, policy)
    assert res == [Ok()]
    assert doc.jobs["j1"].status == "done"


def test_heartbeat_keeps_a_claim_alive() -> None:
    policy = Policy(heartbeat_timeout_s=30.0)
    doc, _ = apply(Document.empty(), [push(1)], T0)
    doc, res = claim_one(doc)
    token = res.jobs[0].claim.token  # type: ignore[union-attr]
    for t in (20, 40, 60):
        doc, out = apply(doc, [Heartbeat("j1", token)], T0 + t, policy)
        assert out == [Ok()]
    assert doc.jobs["j1"].status == "claimed"


def test_fail_backs_off_then_dead_letters_at_max_attempts() -> None:
    policy = Policy(backoff_base_s=2.0, backoff_cap_s=5.0)
    doc, _ = apply(Document.empty(), [push(1, max_attempts=3)], T0)
    now = T0
    delays = []
    for _ in range(3):
        doc, res = claim_one(doc, now + 100)
        now += 100
        job = res.jobs[0]
        doc, _ = apply(doc, [Fail(job.id, job.claim.token, "boom")], now, policy)  # type: ignore[union-attr]
        stored = doc.jobs["j1"]
        if stored.run_at is not None:
            delays.append(stored.run_at.timestamp() - now)
    assert delays == [2.0, 4.0]
    assert doc.jobs["j1"].status == "dead"
    assert doc.jobs["j1"].last_error == "boom"
    assert doc.stats.dead == 1


def test_fail_with_retry_after_overrides_backoff() -> None:
    doc, _ = apply(Document.empty(), [push(1)], T0)
    doc, res = claim_one(doc)
    job = res.jobs[0]
    doc, _ = apply(doc, [Fail("j1", job.claim.token, "later", retry_after_s=7.5)], T0)  # type: ignore[union-attr]
    assert doc.jobs["j1"].run_at is not None
    assert doc.jobs["j1"].run_at.timestamp() == T0 + 7.5


def test_release_gives_the_job_back_without_counting_an_attempt() -> None:
    doc, _ = apply(Document.empty(), [push(1)], T0)
    doc, res = claim_one(doc)
    doc, out = apply(doc, [Release("j1", res.jobs[0].claim.token)], T0)  # type: ignore[union-attr]
    assert out == [Ok()]
    assert doc.jobs["j1"].attempts == 0
    assert doc.jobs["j1"].status == "queued"


def test_retried_push_with_same_id_is_applied_once_even_after_the_job_left() -> None:
    doc, res = apply(Document.empty(), [push(1), push(1)], T0)
    assert res == [Pushed("j1", True), Pushed("j1", False)]
    doc, c = claim_one(doc)
    doc, _ = apply(doc, [Complete("j1", c.jobs[0].claim.token)], T0)  # type: ignore[union-attr]
    doc, _ = apply(doc, [MarkArchived((doc.version,))], T0)
    assert "j1" not in doc.jobs
    doc, res = apply(doc, [push(1)], T0 + 5)
    assert res == [Pushed("j1", False)]
    assert "j1" not in doc.jobs


def test_idempotency_key_rejects_a_second_live_job() -> None:
    doc, res = apply(Document.empty(), [push(1, key="k"), push(2, key="k")], T0)
    assert isinstance(res[1], DuplicateKey)
    assert res[1].existing_id == "j1"
    doc, _ = apply(doc, [Cancel("j1")], T0)
    doc, res = apply(doc, [push(3, key="k")], T0)
    assert res == [Pushed("j3", True)]


def test_one_bad_op_fails_alone() -> None:
    ops = [push(1), Fail("j1", 1, retry_after_s=-3.0), push(3), Complete("nope", 1)]
    doc, res = apply(Document.empty(), ops, T0)
    assert isinstance(res[0], Pushed)
    assert isinstance(res[1], InvalidInput)
    assert res[1].field == "retry_after_s"
    assert isinstance(res[2], Pushed)
    assert isinstance(res[3], LeaseLost)
    assert set(doc.jobs) == {"j1", "j3"}


@pytest.mark.parametrize(
    ("op", "field"),
    [
        (Push(id="a", payload=b"x" * 300_000), "payload"),  # (a claim: test_make.py)
        (Fail("a", 1, retry_after_s=-3.0), "retry_after_s"),
        (Heartbeat("a", 0), "token"),
    ],
)
def test_bad_input_names_the_field_and_changes_nothing(op: object, field: str) -> None:
    doc, _ = apply(Document.empty(), [push(1)], T0)
    new, (res,) = apply(doc, [op], T0)  # type: ignore[list-item]
    assert isinstance(res, InvalidInput)
    assert res.field == field
    assert field in str(res)
    assert list(new.jobs.items()) == list(doc.jobs.items())


def test_cancel_and_dead_letter_admin() -> None:
    doc, _ = apply(Document.empty(), [push(1, max_attempts=1), push(2)], T0)
    doc, c = claim_one(doc)
    doc, _ = apply(doc, [Fail("j1", c.jobs[0].claim.token, "x")], T0)  # type: ignore[union-attr]
    assert doc.jobs["j1"].status == "dead"
    doc, res = apply(doc, [RetryDead(("j1",))], T0)
    assert res == [Counted(1)]
    assert doc.jobs["j1"].status == "queued"
    doc, res = apply(doc, [Cancel("j2"), Cancel("missing")], T0)
    assert isinstance(res[0], Removed)
    assert isinstance(res[1], JobNotFound)
    doc, c = claim_one(doc)
    doc, _ = apply(doc, [Fail("j1", c.jobs[0].claim.token, "x")], T0)  # type: ignore[union-attr]
    doc, res = apply(doc, [PurgeDead(None)], T0)
    assert isinstance(res[0], Removed)
    assert len(res[0].jobs) == 1
    assert doc.jobs == {}


def test_restart_heartbeats_gives_claims_a_fresh_timeout_after_takeover() -> None:
    policy = Policy(heartbeat_timeout_s=30.0)
    doc, _ = apply(Document.empty(), [push(1)], T0)
    doc, _ = claim_one(doc)
    doc, _ = apply(doc, [RestartHeartbeats()], T0 + 29, policy)
    doc, _ = apply(doc, [], T0 + 45, policy)
    assert doc.jobs["j1"].status == "claimed"
    doc, _ = apply(doc, [], T0 + 60, policy)
    assert doc.jobs["j1"].status == "queued"


def test_document_size_cap_refuses_pushes_and_keeps_queued_jobs() -> None:
    policy = Policy(max_document_bytes=4000)
    doc, res = apply(Document.empty(), [push(i) for i in range(50)], T0, policy)
    accepted = [r for r in res if isinstance(r, Pushed)]
    refused = [r for r in res if isinstance(r, QueueFull)]
    assert accepted
    assert refused
    assert len(accepted) + len(refused) == 50
    assert set(doc.jobs) == {r.id for r in accepted}
    assert len(encode(doc)) <= 4000


def _mixed_pushes() -> list[Push]:
    """Pushes of every shape the size check meets: payloads of many sizes, keys (one
    a duplicate), a group, parents, an id sent twice."""
    ops = [Push(id=f"j{i}", payload=b"x" * (i * 7 % 90)) for i in range(40)]
    ops[5] = Push(id="j5", payload=b"k", key="k5")
    ops[9] = Push(id="j9", payload=b"k", key="k5")  # refused: the key is held
    ops[12] = Push(id="j12", payload=b"g", group="g1")
    ops[17] = Push(id="j17", payload=b"c", after=("j3", "j4"))
    ops[21] = Push(id="j3", payload=b"again")  # the same id: applied once
    return ops


@pytest.mark.parametrize("cap", range(2500, 18000, 331))
def test_a_run_of_pushes_is_admitted_exactly_as_pushes_measured_one_by_one(cap: int) -> None:
    # A run of pushes keeps the document's size from one to the next; an op
    # between them (a cancel of no job: it fails and changes nothing) makes
    # each push measure the document afresh.  Both must decide alike.
    policy = Policy(max_document_bytes=cap)
    ops = _mixed_pushes()
    run = transition(Document.empty(), ops, T0, policy)
    spaced: list[object] = []
    for op in ops:
        spaced += [op, _MEASURE_AFRESH]
    fresh = transition(Document.empty(), spaced, T0, policy)  # type: ignore[arg-type]
    assert [type(r) for r in run.results] == [type(r) for r in fresh.results[::2]]
    assert list(run.doc.jobs) == list(fresh.doc.jobs)
    refused = sum(isinstance(r, QueueFull) for r in run.results)
    # the caps span refusing most to none (all fit from 16,757 bytes: the jobs, and the
    # header with the queue's counters)
    assert (refused > 0) == (cap < 16_750)
    assert len(encode(run.doc)) <= cap


#: an op that fails and changes nothing, and makes the next push measure the document
_MEASURE_AFRESH = Cancel("nobody")


def _held_and_pushes(doc: Document) -> list[object]:
    """A commit of workers that finish the jobs they hold and push follow-ups, the
    ops on held jobs between the pushes: completions (some with a result, so the
    record of finished jobs starts in this version), failures, a release, a
    heartbeat, claims, and an op of a lost lease."""
    held = [job for job in doc if job.claim is not None]
    ops: list[object] = []
    for n, job in enumerate(held):
        assert job.claim is not None
        token = job.claim.token
        held_op: object = {
            0: Complete(job.id, token, result=ResultData("json", 3, value=b"%03d" % n)),
            1: Complete(job.id, token),
            2: Fail(job.id, token, error="e" * (n * 13 % 200)),
            3: Release(job.id, token) if n % 8 == 3 else Heartbeat(job.id, token),
            4: ClaimOp("w2", ("default",), 2),
            5: Complete(job.id, token + 1),  # lost: changes nothing
        }[n % 6]
        ops += [held_op, Push(id=f"f{n}", payload=b"y" * (n * 11 % 70), queue="follow")]
    return ops


@pytest.mark.parametrize("cap", range(8500, 18500, 293))
def test_pushes_between_ops_on_held_jobs_are_admitted_as_measured_one_by_one(cap: int) -> None:
    # The pushes of a commit that also completes, fails and claims keep their
    # bound across those ops, adding what the jobs' encodings moved; a push that
    # measures the document afresh each time must decide alike.
    policy = Policy(max_document_bytes=cap, result_ttl_s=600)
    start = [Push(id=f"j{i}", payload=b"x" * (i * 5 % 60)) for i in range(24)]
    start.append(Push(id="q0", payload=b"p", queue="follow"))  # (a known queue)
    doc, _ = apply(Document.empty(), start, T0, Policy(result_ttl_s=600))
    doc, _ = apply(doc, [ClaimOp("w", ("default",), 18)], T0, policy)
    ops = _held_and_pushes(doc)
    run = transition(doc.copy(), ops, T0 + 1, policy)  # type: ignore[arg-type]
    spaced: list[object] = []
    for op in ops:
        spaced += [op, _MEASURE_AFRESH]
    fresh = transition(doc.copy(), spaced, T0 + 1, policy)  # type: ignore[arg-type]
    assert [type(r) for r in run.results] == [type(r) for r in fresh.results[::2]]
    assert encode(run.doc) == encode(fresh.doc)
    assert len(encode(run.doc)) <= cap
    refused = sum(isinstance(r, QueueFull) for r in run.results)
    # the caps span refusing most of the 18 pushes to none (all fit from 17,095 bytes)
    assert (refused > 0) == (cap < 17_095), refused
    assert len(run.doc.finished.entries) > 0  # (the record's brackets came with this version)


def test_a_commit_of_completions_and_their_follow_up_pushes_measures_the_document_once(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    doc, _ = apply(Document.empty(), [push(i) for i in range(40)], T0)
    doc, _ = apply(doc, [ClaimOp("w", ("default",), 40)], T0)
    ops: list[object] = []
    for job in doc:
        assert job.claim is not None
        ops += [Complete(job.id, job.claim.token), Push(id=f"n{job.id}", payload=b"q")]
    measured = 0
    size_upper = Document.size_upper

    def counting(self: Document) -> int:
        nonlocal measured
        measured += 1
        return size_upper(self)

    monkeypatch.setattr(Document, "size_upper", counting)
    t = transition(doc, ops, T0 + 1)  # type: ignore[arg-type]
    assert all(not isinstance(r, Exception) for r in t.results)
    assert measured == 1  # (each push after a completion measured it: 40)


def test_a_stale_header_length_makes_the_push_after_a_held_op_measure_again() -> None:
    doc, _ = apply(Document.empty(), [push(i) for i in range(3)], T0)
    size = SizeBound(doc, Policy())
    size.kept = True
    size.admit(100, cache=True)  # measured (the header too)
    assert held_bytes(doc) is not None
    kept = size.bound
    size.held_moved = True
    doc.set_queue_settings("default", StoredSettings(paused=True))  # the header grew
    assert held_bytes(doc) is None  # (its length is stale)
    size.admit(100, cache=True)
    assert kept is not None
    measured = doc.size_upper() - doc.finished.size_bytes()
    assert size.bound == measured + 101  # measured again
    assert measured + 101 > kept  # (the settings counted: the first bound was lower)


def test_completed_job_leaves_only_after_its_version_is_archived() -> None:
    doc, _ = apply(Document.empty(), [push(1)], T0)
    doc, c = claim_one(doc)
    t = transition(doc, [Complete("j1", c.jobs[0].claim.token)], T0)  # type: ignore[union-attr]
    assert [j.id for j in t.completed] == ["j1"]
    done_version = t.doc.version
    assert t.doc.jobs["j1"].done_version == done_version
    doc, _ = apply(t.doc, [MarkArchived((done_version + 99,))], T0)
    assert "j1" in doc.jobs
    doc, _ = apply(doc, [MarkArchived((done_version,))], T0)
    assert "j1" not in doc.jobs
    assert doc.archived_through == done_version


def test_round_trip_is_exact() -> None:
    ops = [push(1, key="k", priority=-3, delay_s=2.5), push(2, queue="email"), push(3)]
    doc, _ = apply(Document.empty(), ops, T0)
    doc, _ = claim_one(doc, queues=("email",))
    data = encode(doc)
    back = decode(data)
    assert back == doc
    assert encode(back) == data


def test_ids_are_ulids_sorted_by_time_and_unique() -> None:
    from osqueue.ids import new_id
    from osqueue.state.validate import ID_RE

    made = [new_id() for _ in range(2000)]
    assert len(set(made)) == 2000
    assert all(len(i) == 26 and ID_RE.match(i) for i in made)
    assert [i[:10] for i in made] == sorted(i[:10] for i in made)


def test_tombstones_are_ids_grouped_by_second_kept_for_the_window_then_pruned() -> None:
    policy = Policy(dedupe_window_s=100.0)
    ids = [f"01JD{i:022d}" for i in range(3)]  # 26 characters, like a ULID
    doc, _ = apply(Document.empty(), [Push(id=ids[0], payload=b"p")], T0 + 0.2, policy)
    doc, _ = apply(doc, [Push(id=ids[1], payload=b"p")], T0 + 0.7, policy)
    doc, _ = apply(doc, [Push(id=ids[2], payload=b"p")], T0 + 1.5, policy)
    # They leave out of creation order: the one created in a later second goes first,
    # and the others join its second (kept a little longer, never shorter).
    doc, _ = apply(doc, [Cancel(ids[2]), Cancel(ids[0]), Cancel(ids[1])], T0 + 2, policy)
    section = b'"tombstones":{"2027-01-15T08:00:01Z":["%s","%s","%s"]}' % (
        ids[2].encode(),
        ids[0].encode(),
        ids[1].encode(),
    )
    assert section in encode(doc)
    assert len(section) - len(b'"tombstones":{"2027-01-15T08:00:01Z":[]}') == 3 * 29 - 1
    assert decode(encode(doc)) == doc

    # A retried push a whole window after the first send is still recognised...
    doc, res = apply(doc, [Push(id=ids[0], payload=b"p")], T0 + 100.2, policy)
    assert res == [Pushed(ids[0], False)]
    # ...and once the tombstones are well past the window they are pruned.
    doc, _ = apply(doc, [], T0 + 127.5, policy)
    assert doc.recent == {}
    assert b'"tombstones":{}' in encode(doc)
    doc, res = apply(doc, [Push(id=ids[0], payload=b"p")], T0 + 128, policy)
    assert res == [Pushed(ids[0], True)]


def test_the_sweep_reclaims_exactly_the_expired_claims_even_when_the_clock_steps_back() -> None:
    policy = Policy(heartbeat_timeout_s=20.0)
    doc, _ = apply(Document.empty(), [push(1), push(2), push(3)], T0, policy)
    doc, _ = apply(doc, [ClaimOp("w", max_jobs=1)], T0, policy)  # j1, heartbeat T0
    doc, _ = apply(doc, [ClaimOp("w", max_jobs=1)], T0 + 5, policy)  # j2, heartbeat T0+5
    doc, _ = apply(doc, [], T0 + 20.5, policy)
    assert [j.status for j in doc.jobs.values()] == ["queued", "claimed", "queued"]
    doc, _ = apply(doc, [], T0 + 24.9, policy)  # nobody expired: j2 has until T0+25
    assert doc.jobs["j2"].status == "claimed"
    doc, _ = apply(doc, [], T0 + 25.5, policy)
    assert doc.jobs["j2"].status == "queued"

    # The clock steps back 10 s: a claim stamped then is older than every other.
    doc, _ = apply(doc, [ClaimOp("w", max_jobs=1)], T0 + 30, policy)  # heartbeat T0+30
    doc, _ = apply(doc, [ClaimOp("w", max_jobs=1)], T0 + 20, policy)  # heartbeat T0+20
    claimed_at = {j.id: j.claim.heartbeat_at.timestamp() for j in doc.jobs.values() if j.claim}
    older = min(claimed_at, key=claimed_at.__getitem__)
    assert claimed_at[older] == T0 + 20
    doc, _ = apply(doc, [], T0 + 40.5, policy)
    assert doc.jobs[older].status == "queued"
    assert [j.id for j in doc.jobs.values() if j.status == "claimed"] != []
