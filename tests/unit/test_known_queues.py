"""Known queues in the pure transitions: a queue is listed from its first push or
setting until ``SetQueue(remove=True)``, with its counters kept per queue."""

from __future__ import annotations

import pytest

from osqueue.errors import CorruptDocument, InvalidInput
from osqueue.state import (
    Claimed,
    ClaimOp,
    Complete,
    Document,
    Fail,
    Policy,
    Push,
    PutSchedule,
    QueueSet,
    RemoveSchedule,
    Result,
    SetQueue,
    apply,
    decode,
    encode,
    stats_of,
)

T0 = 1_800_000_000.0


def ok(doc: Document, *ops: object) -> tuple[Document, list[Result]]:
    doc, results = apply(doc, list(ops), T0)  # type: ignore[arg-type]
    assert not any(isinstance(r, Exception) for r in results), results
    return doc, results


def through(doc: Document, queue: str, n: int, *, fail_last: bool = False) -> Document:
    """``n`` jobs of ``queue`` pushed, claimed and completed (the last one failed for
    good when ``fail_last``): the queue holds no live job afterwards but a dead one."""
    doc, _ = ok(
        doc, *(Push(id=f"{queue}{i}", payload=b"p", queue=queue, max_attempts=1) for i in range(n))
    )
    doc, (claimed,) = ok(doc, ClaimOp("w", (queue,), n))
    assert isinstance(claimed, Claimed)
    jobs = list(claimed.jobs)
    last = jobs.pop() if fail_last else None
    assert all(j.claim for j in jobs)
    doc, _ = ok(doc, *(Complete(j.id, j.claim.token) for j in jobs if j.claim))
    if last is not None and last.claim is not None:
        doc, _ = ok(doc, Fail(last.id, last.claim.token, "boom"))
    return doc


def test_a_queue_with_no_job_left_stays_listed_with_its_counters() -> None:
    doc = through(Document.empty(), "emails", 3)
    assert not doc.jobs or all(j.status == "done" for j in doc.jobs.values())
    stats = stats_of(doc, T0)
    q = stats.queues["emails"]
    assert (q.depth, q.claimed, q.dead) == (0, 0, 0)
    assert (q.pushed_total, q.completed_total, q.failed_total, q.dead_total) == (3, 3, 0, 0)
    doc = through(doc, "images", 2, fail_last=True)
    q = stats_of(doc, T0).queues["images"]
    assert (q.pushed_total, q.completed_total, q.failed_total, q.dead_total) == (2, 1, 1, 1)
    assert stats_of(doc, T0).queues["emails"].pushed_total == 3  # untouched by images


def test_the_known_queues_and_their_counters_survive_encoding() -> None:
    doc = through(Document.empty(), "emails", 2, fail_last=True)
    doc, _ = ok(doc, SetQueue("idle", paused=True))
    again = decode(encode(doc))
    assert again == doc
    assert set(again.queue_totals) == {"emails", "idle"}
    assert len(encode(doc)) == doc.size_bytes()
    assert set(stats_of(again, T0).queues) == {"emails", "idle"}
    assert stats_of(again, T0).queues["idle"].paused


def test_a_pure_apply_leaves_the_old_documents_counters_alone() -> None:
    doc = through(Document.empty(), "emails", 1)
    new, _ = ok(doc, Push(id="more", payload=b"p", queue="emails"))
    assert doc.queue_totals["emails"].pushed == 1
    assert new.queue_totals["emails"].pushed == 2


def test_a_setting_makes_a_queue_known_and_a_remove_forgets_it() -> None:
    doc, _ = ok(Document.empty(), SetQueue("idle", max_claimed=3))
    assert "idle" in stats_of(doc, T0).queues
    doc, (res,) = ok(doc, SetQueue("idle", remove=True))
    assert isinstance(res, QueueSet)
    assert "idle" not in stats_of(doc, T0).queues
    assert "idle" not in doc.queue_settings
    assert "queue_totals" not in encode(doc).decode()


def test_a_drained_queue_is_removed_and_comes_back_with_its_next_push() -> None:
    doc = through(Document.empty(), "emails", 2)
    doc, _ = ok(doc, SetQueue("emails", remove=True))
    assert "emails" not in doc.queue_totals
    doc, _ = ok(doc, Push(id="again", payload=b"p", queue="emails"))
    assert stats_of(doc, T0).queues["emails"].pushed_total == 1


@pytest.mark.parametrize(
    ("setup", "message"),
    [
        ("queued", "queue 'q' still holds 1 live job"),
        ("dead", "queue 'q' still holds 1 live job"),
        ("schedule", "queue 'q' still holds schedule nightly"),
    ],
)
def test_a_queue_that_holds_jobs_or_schedules_is_not_removed(setup: str, message: str) -> None:
    doc = Document.empty()
    if setup == "queued":
        doc, _ = ok(doc, Push(id="j", payload=b"p", queue="q"))
    elif setup == "dead":
        doc = through(doc, "q", 1, fail_last=True)
    else:
        doc, _ = ok(doc, PutSchedule("nightly", "q", cron="0 3 * * *"), SetQueue("q"))
    before = encode(doc)
    after, (res,) = apply(doc, [SetQueue("q", remove=True)], T0)
    assert isinstance(res, InvalidInput)
    assert res.field == "queue"
    assert str(res).startswith(message), str(res)
    assert "q" in stats_of(after, T0).queues
    assert encode(doc) == before
    if setup == "schedule":  # once the schedule is gone, the queue goes
        after, _ = ok(after, RemoveSchedule("nightly"), SetQueue("q", remove=True))
        assert "q" not in stats_of(after, T0).queues


def test_removing_an_unknown_queue_or_with_a_setting_is_refused() -> None:
    doc, (res,) = apply(Document.empty(), [SetQueue("nothere", remove=True)], T0)
    assert isinstance(res, InvalidInput)
    assert "no queue 'nothere' is known" in str(res)
    doc, _ = ok(doc, SetQueue("q", max_claimed=1))
    _, (res,) = apply(doc, [SetQueue("q", paused=True, remove=True)], T0)
    assert isinstance(res, InvalidInput)
    assert res.field == "remove"
    _, (res,) = apply(doc, [SetQueue("q", result_ttl_s=60.0, remove=True)], T0)
    assert isinstance(res, InvalidInput)
    assert res.field == "remove"


def test_a_stored_known_queue_with_a_bad_name_is_refused() -> None:
    raw = encode(through(Document.empty(), "emails", 1)).replace(
        b'"queue_totals":{"emails"', b'"queue_totals":{"bad name!"'
    )
    with pytest.raises(CorruptDocument, match=r"\$\.queue_totals"):
        decode(raw)


def test_pushes_to_new_queues_never_take_the_document_past_its_cap() -> None:
    """A new queue grows the header by its counters: a push admits them too, so the
    document stays under ``max_document_bytes`` once every job is claimed and done."""
    limit = 30_000
    policy = Policy(max_document_bytes=limit)
    names = [f"{i:03d}" + "q" * 125 for i in range(200)]
    pushes = [Push(id=f"j{i:03d}", payload=b"p", queue=name) for i, name in enumerate(names)]
    # this minute's history sample first (a sample's depths are not what this checks)
    doc, results = apply(apply(Document.empty(), [], T0)[0], pushes, T0, policy)
    taken = [n for n, r in zip(names, results, strict=True) if not isinstance(r, Exception)]
    assert 0 < len(taken) < len(names)  # the cap stopped the batch part way
    worker = "w" * 24  # the longest name the claim reserve is sized for
    doc, claims = apply(doc, [ClaimOp(worker, (n,), 1) for n in taken], T0 + 1, policy)
    done = [j for c in claims if isinstance(c, Claimed) for j in c.jobs]
    assert len(done) == len(taken)
    doc, _ = apply(doc, [Complete(j.id, j.claim.token) for j in done if j.claim], T0 + 2, policy)
    assert doc.stats.completed == len(taken)
    assert len(encode(doc)) <= limit
