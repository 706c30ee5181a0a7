"""Dependencies in the pure transitions: waiting jobs, their parents' ends, the record."""

from __future__ import annotations

import pytest

from osqueue.api import NewJob
from osqueue.errors import CorruptDocument, DuplicateKey, InvalidInput, JobNotFound
from osqueue.state import (
    Cancel,
    Claimed,
    ClaimOp,
    Complete,
    Document,
    Fail,
    MarkArchived,
    Policy,
    Push,
    Pushed,
    apply,
    decode,
    encode,
    finished,
    make,
    stats_of,
)

T0 = 1_800_000_000.0


def push(doc: Document, job_id: str, *after: str, now: float = T0, **kw: object) -> Document:
    doc, (res,) = apply(doc, [Push(id=job_id, payload=b"p", after=after, **kw)], now)  # type: ignore[arg-type]
    assert isinstance(res, Pushed), res
    return doc


def status(doc: Document, job_id: str) -> str | None:
    job = doc.jobs.get(job_id)
    return None if job is None else job.status


def run(doc: Document, job_id: str, *, ok: bool = True, now: float = T0) -> Document:
    """Claim everything claimable, then complete (or fail for good) ``job_id``."""
    doc, (res,) = apply(doc, [ClaimOp("w", ("default",), 100)], now)
    assert isinstance(res, Claimed)
    job = doc.jobs[job_id]
    assert job.status == "claimed"
    assert job.claim is not None
    op = Complete(job_id, job.claim.token) if ok else Fail(job_id, job.claim.token, "boom")
    doc, (res,) = apply(doc, [op], now)
    assert not isinstance(res, Exception), res
    return doc


def test_a_child_waits_until_its_parent_completed() -> None:
    doc = push(push(Document.empty(), "p"), "c", "p")
    assert status(doc, "c") == "waiting"
    assert stats_of(doc, T0).queues["default"].waiting == 1
    assert stats_of(doc, T0).queues["default"].depth == 1  # the parent only
    doc, (res,) = apply(doc, [ClaimOp("w", ("default",), 10)], T0)
    assert isinstance(res, Claimed)
    assert [j.id for j in res.jobs] == ["p"]  # never the child
    job = doc.jobs["p"]
    assert job.claim is not None
    doc, _ = apply(doc, [Complete("p", job.claim.token)], T0)
    assert status(doc, "c") == "queued"
    assert doc.jobs["c"].after == ()


def test_fan_in_waits_for_every_parent_and_fan_out_releases_every_child() -> None:
    doc = push(push(Document.empty(), "a"), "b")
    doc = push(doc, "join", "a", "b")
    doc = push(push(doc, "x", "a"), "y", "a")
    doc = run(doc, "a")
    assert (status(doc, "x"), status(doc, "y"), status(doc, "join")) == (
        "queued",
        "queued",
        "waiting",
    )
    assert doc.jobs["join"].after == ("b",)
    doc = run(doc, "b")
    assert status(doc, "join") == "queued"


def test_a_chain_runs_one_link_at_a_time() -> None:
    doc = push(Document.empty(), "s1")
    for i in range(2, 5):
        doc = push(doc, f"s{i}", f"s{i - 1}")
    for i in range(1, 5):
        doc, (res,) = apply(doc, [ClaimOp("w", ("default",), 10)], T0)
        assert isinstance(res, Claimed)
        assert [j.id for j in res.jobs] == [f"s{i}"]
        token = res.jobs[0].claim.token  # type: ignore[union-attr]
        doc, _ = apply(doc, [Complete(f"s{i}", token)], T0)


def test_a_dead_parent_cancels_its_children_down_the_line_unless_they_run_anyway() -> None:
    doc = push(Document.empty(), "p", max_attempts=1)
    doc = push(doc, "c", "p")
    doc = push(doc, "g", "c")  # a grandchild: cancelled with its parent
    doc = push(doc, "r", "p", on_parent_failure="run")
    doc = push(doc, "rg", "r")
    cancelled_before = doc.stats.cancelled
    doc = run(doc, "p", ok=False)
    assert status(doc, "p") == "dead"
    assert (status(doc, "c"), status(doc, "g")) == (None, None)
    assert doc.stats.cancelled == cancelled_before + 2
    assert finished(doc, "c") == "cancelled"
    assert status(doc, "r") == "queued"
    assert status(doc, "rg") == "waiting"


def test_a_cancelled_parent_cancels_its_children() -> None:
    doc = push(push(Document.empty(), "p"), "c", "p")
    doc, (_res,) = apply(doc, [Cancel("p")], T0)
    assert status(doc, "c") is None
    assert finished(doc, "p") == "cancelled"


def test_parents_that_left_the_document_are_known_by_the_record() -> None:
    doc = push(Document.empty(), "first")  # a parent record starts with the first child
    doc = push(doc, "later", "first")
    doc = run(doc, "first")
    done = doc.jobs["first"]
    assert done.done_version is not None
    doc, _ = apply(doc, [MarkArchived((done.done_version,))], T0 + 1)
    assert "first" not in doc.jobs
    assert finished(doc, "first") == "done"
    doc = push(doc, "after-archive", "first", now=T0 + 2)
    assert status(doc, "after-archive") == "queued"
    # a parent that died and was purged: the child is cancelled at once
    doc = push(doc, "doomed", max_attempts=1)
    doc = run(doc, "doomed", ok=False)
    doc = push(doc, "child-of-dead", "doomed")
    assert status(doc, "child-of-dead") is None
    assert finished(doc, "child-of-dead") == "cancelled"
    # ... and a retried push of it is the same push, applied once
    doc, (res,) = apply(doc, [Push(id="child-of-dead", payload=b"p", after=("doomed",))], T0)
    assert res == Pushed("child-of-dead", False)


def test_the_record_forgets_after_its_window_and_an_unknown_parent_is_refused() -> None:
    policy = Policy(dependency_window_s=60.0)
    doc = push(Document.empty(), "p")
    doc = push(doc, "c", "p")
    doc, (res,) = apply(doc, [ClaimOp("w", ("default",), 1)], T0, policy)
    assert isinstance(res, Claimed)
    doc, _ = apply(doc, [Complete("p", res.jobs[0].claim.token)], T0, policy)  # type: ignore[union-attr]
    v = doc.jobs["p"].done_version
    assert v is not None
    doc, _ = apply(doc, [MarkArchived((v,))], T0, policy)
    assert doc.finished.get("p").ttl_s == 60.0  # type: ignore[union-attr]
    doc, _ = apply(doc, [], T0 + 200, policy)
    doc, (res,) = apply(doc, [Push(id="late", payload=b"p", after=("p",))], T0 + 200, policy)
    assert isinstance(res, JobNotFound)
    assert "after[0]" in str(res)
    doc, (res,) = apply(doc, [Push(id="bogus", payload=b"p", after=("nobody",))], T0)
    assert isinstance(res, JobNotFound)


def test_the_record_keeps_at_most_max_finished_jobs() -> None:
    doc = push(Document.empty(), "seed")
    doc = push(doc, "kid", "seed")
    ids = [f"k{i}" for i in range(40)]
    doc, _ = apply(doc, [Push(id=i, payload=b"p") for i in ids], T0)
    doc, _ = apply(doc, [Cancel(i) for i in ids], T0)
    evicted = doc.stats.finished_evicted
    doc, _ = apply(doc, [], T0 + 1, Policy(max_finished_jobs=10))
    # past the cap, one batch takes it down to 90% of it (the soonest to expire first)
    assert len(doc.finished) == 9
    assert doc.stats.finished_evicted == evicted + 31
    assert finished(doc, "k39") == "cancelled"
    assert finished(doc, "k0") is None


def test_parent_and_child_in_one_batch_in_that_order() -> None:
    doc, res = apply(
        Document.empty(),
        [Push(id="p", payload=b"p"), Push(id="c", payload=b"p", after=("p",))],
        T0,
    )
    assert res == [Pushed("p", True), Pushed("c", True)]
    assert status(doc, "c") == "waiting"


def test_a_waiting_job_holds_its_key() -> None:
    doc = push(push(Document.empty(), "p"), "c", "p", key="only-one")
    doc, (res,) = apply(doc, [Push(id="d", payload=b"p", key="only-one")], T0)
    assert isinstance(res, DuplicateKey)
    assert res.existing_id == "c"


def test_a_waiting_job_keeps_its_delay_from_its_push() -> None:
    doc = push(push(Document.empty(), "p"), "c", "p", delay_s=100.0)
    doc = run(doc, "p", now=T0 + 10)
    assert status(doc, "c") == "queued"
    doc, (res,) = apply(doc, [ClaimOp("w", ("default",), 10)], T0 + 50)
    assert isinstance(res, Claimed)
    assert res.jobs == ()
    doc, (res,) = apply(doc, [ClaimOp("w", ("default",), 10)], T0 + 101)
    assert isinstance(res, Claimed)
    assert [j.id for j in res.jobs] == ["c"]


@pytest.mark.parametrize(
    ("after", "policy", "field"),
    [
        (("c",), "cancel", "after[0]"),  # itself
        (("bad id",), "cancel", "after[0]"),
        (("p",), "ignore", "on_parent_failure"),
        (tuple(f"p{i}" for i in range(257)), "cancel", "after"),
    ],
)
def test_bad_parents_are_refused_naming_the_field(
    after: tuple[str, ...], policy: str, field: str
) -> None:
    # checked where the push is made, by every client and the server
    job = NewJob(b"p", id="c", after=after, on_parent_failure=policy)  # type: ignore[arg-type]
    with pytest.raises(InvalidInput) as info:
        make.push(job, 1024)
    assert info.value.field == field


def test_waiting_jobs_round_trip_and_a_waiting_job_names_its_parents() -> None:
    doc = push(push(Document.empty(), "p"), "c", "p", group="g")
    data = encode(doc)
    assert len(data) == doc.size_bytes()
    back = decode(data)
    assert back == doc
    assert back.index.children == {"p": {"c": None}}
    with pytest.raises(CorruptDocument) as err:
        decode(data.replace(b',"after":["p"]', b""))
    assert err.value.path == "$.jobs[1].after"
