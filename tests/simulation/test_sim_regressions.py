"""Regression tests for violations the simulation found, each named after its seed.

Each replays the found situation exactly on the scripted bench (virtual time,
no real sleeps) and asserts the invariant that broke.
"""

from __future__ import annotations

from dataclasses import replace

from sim import CrashTrigger, Fault, Phase, run_virtual
from sim.bench import Bench

from osqueue.state import Claimed, ClaimOp, Document, Push, claimable, decode, transition


def test_archive_409_is_not_proof_the_object_exists_seed_0() -> None:
    """Seed 0 (and 1, 15, 16): a 409 ConditionalRequestConflict on the create-if-absent
    archive write was taken as "already written"; the done job was pruned from the
    document and never archived (I1: an acknowledged, completed job vanished)."""

    async def scenario() -> tuple[list[str], list[str]]:
        bench = Bench("regression-archive-409")
        try:
            broker = await bench.start("b1")
            q = broker.client()
            await q.push(b"x", id="j1")
            [job] = await q.claim("w1", ["default"])
            bench.storage("b1").inject("archive/", Fault.SPURIOUS_CONFLICT)
            await q.complete(job)
            await bench.settle(2 * broker.config.lease_s)
            doc = await bench.document()
            return await bench.archived_ids(), sorted(doc.jobs)
        finally:
            bench.close()

    archived, still_in_document = run_virtual(scenario())
    assert archived == ["j1"], f"archive holds {archived}, document holds {still_in_document}"
    assert still_in_document == []


def test_storage_error_on_inherited_archive_write_does_not_kill_takeover_seed_40() -> None:
    """Seed 40 (and 44): a broker taking over writes the archive objects of the done jobs
    it inherits; a 503 (or a lost answer) on that write escaped ``start()`` and the new
    broker died instead of retrying with backoff."""

    async def scenario() -> list[str]:
        bench = Bench("regression-acquire-archive")
        try:
            first = await bench.start("b1")
            q = first.client()
            await q.push(b"x", id="j1")
            [job] = await q.claim("w1", ["default"])
            bench.storage("b1").triggers.append(CrashTrigger("archive", 1, Phase.BEFORE))
            await q.complete(job)  # done in the document; b1 dies writing its archive
            await bench.settle(1.0)
            second = bench.node("b2")
            second.storage.inject("archive/", Fault.ERROR_BEFORE)
            second.storage.inject("archive/", Fault.LOST_AFTER)
            await second.broker.start()
            assert second.broker.serving
            await bench.settle(2 * second.broker.config.lease_s)
            return await bench.archived_ids()
        finally:
            bench.close()

    assert run_virtual(scenario()) == ["j1"]


def test_a_late_landing_earlier_attempt_is_the_one_committed_seed_44() -> None:
    """Seed 44 (found as seed 331, whose run has changed since): a commit's write
    timed out while still in flight; the broker re-read (not landed yet), re-applied
    the batch at a later time (so its claim now got a job that had become due), and
    that second write failed.  Meanwhile the first write landed.  The broker saw its
    own version and took the *second* attempt as committed: it answered the claim with
    a job and token the stored document never gave out, then overwrote that version
    (I4: token 15 belonged to two jobs in the document chain).  With that bug planted
    back (``commit-answers-last-attempt`` of :mod:`sim.mutations`), seed 44 shows it
    today: token 3 belongs to p0-3 and to p1-2 in version 11."""

    async def scenario() -> tuple[list[tuple[str, int]], list[tuple[str, int]]]:
        bench = Bench("regression-late-attempt")
        bench.config = replace(bench.config, retry_base_s=0.05)
        try:
            broker = await bench.start("b1")
            q = broker.client()
            await q.push(b"later", id="j1", delay_s=1.0)
            storage = bench.storage("b1")
            storage.rates = replace(storage.rates, timeout_s=1.0)
            storage.inject("queue.json", Fault.DELAYED, lands_after_s=1.08)  # attempt A
            storage.inject("queue.json", Fault.ERROR_BEFORE)  # attempt B, after j1 is due
            base = (await bench.document()).version
            jobs = await q.claim("w1", ["default"])
            answered = [(j.id, j.token) for j in jobs]
            landed = next(
                decode(x.data)
                for x in bench.store.landed
                if b'"version":%d,' % (base + 1) in x.data
            )
            stored = [(j.id, j.claim.token) for j in landed.jobs.values() if j.claim]
            return answered, stored
        finally:
            bench.close()

    answered, stored = run_virtual(scenario())
    assert answered == stored


def test_a_clock_stepping_back_does_not_strand_a_promoted_delayed_job_seed_10049() -> None:
    """Seed 10049 (wild clocks): a delayed job became due and moved to the ready heap;
    the broker's clock then stepped back, so the next claim saw its run_at in the future
    and dropped it from the heap as "stale".  Its delayed entry was already gone: the
    job stayed queued forever (until a takeover rebuilt the index).  Pure transitions."""
    t0 = 1_800_000_000.0
    t = transition(Document.empty(), [Push(id="j", payload=b"x", delay_s=5.0)], t0)
    assert claimable(t.doc, ["default"], t0 + 6)  # due: promoted to the ready heap
    t = transition(t.doc, [ClaimOp("w", ("default",), 1)], t0 + 4)  # the clock stepped back
    assert t.results == [Claimed(())]
    t = transition(t.doc, [ClaimOp("w", ("default",), 1)], t0 + 10)  # due again, by any clock
    [claimed] = t.results
    assert isinstance(claimed, Claimed)
    assert [job.id for job in claimed.jobs] == ["j"]
