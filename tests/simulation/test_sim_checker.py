"""The history checker itself: every rule fires on a history broken its way, and only it.

Each :class:`~sim.history.Rule` has a *broken history* below (``BROKEN``): a
small run written by hand with the real transitions, then broken the way a
buggy broker would break it, so that exactly that rule is violated.  Three tests
hold the checker to it:

* ``test_each_rule_alone_names_its_broken_history``: the checker reports that
  rule and no other;
* ``test_with_its_rule_disabled_the_broken_history_passes``: the mutation test;
  with the rule switched off, the same history passes, so the rule is what
  catches it (no other rule stands in for it);
* ``test_every_rule_has_a_broken_history``: no rule without its case.
"""

from __future__ import annotations

from collections.abc import Callable
from datetime import timedelta

import msgspec
import pytest
from sim.checker import check
from sim.history import ArchiveRecord, History, Kind, Outcome, Rule
from sim.store import DOCUMENT_KEY, PAUSED, Call, Landed

from osqueue.api import EncodedResult
from osqueue.broker.objects.payloads import BadPayload
from osqueue.state import (
    BrokerInfo,
    Cancel,
    ClaimOp,
    Complete,
    Document,
    Fail,
    MarkArchived,
    Op,
    Policy,
    Push,
    PutSchedule,
    Readmit,
    ResultData,
    SegmentRef,
    SetAside,
    SetQueue,
    cold_waiting,
    decode,
    decode_segment,
    encode,
    finished_objects,
    load_op,
    plan_spills,
    to_datetime,
    transition,
)
from osqueue.state.cold_dead import plan_dead_spills, plan_swap, read_dead
from osqueue.state.delayed_plan import delayed_load_op, plan_delayed_spills
from osqueue.state.document import totals
from osqueue.state.model import Claim, Counters, StoredJob
from osqueue.state.ops import LoadWaiting, SwapDead
from osqueue.state.segment_codec import SegmentLines

T0 = 1_800_000_000.0
#: segment thresholds of the stories that spill: j1 stays, the next three spill
SPILLING = Policy(segment_jobs=3, head_jobs=1, load_jobs=2, spill_above_jobs=3)
#: a queue keeps its newest dead job in the document; the others spill
DEAD_KEEPING = Policy(dead_keep_jobs=1, dead_spill_jobs=1)
_replace = msgspec.structs.replace


def _count(doc: Document, stats: Counters, queue: str) -> None:
    """Forged counters, moved in ``queue``'s counters alike (as a commit moves both),
    so that a forged version breaks only the rule its story is about."""
    moved = totals(doc, queue)
    for name in ("pushed", "completed", "failed", "dead"):
        delta = getattr(stats, name) - getattr(doc.stats, name)
        setattr(moved, name, max(0, getattr(moved, name) + delta))
    doc.stats = stats


class Story:
    """A run written by hand: ops applied with the real transitions, every version
    landing in order, answers recorded as the simulator records them."""

    def __init__(self, lease_s: float | None = None) -> None:
        #: with a lease, every version names broker b1 with its lease (commit times)
        self.lease_s = lease_s
        self.history = History()
        self.landed: list[Landed] = []
        self.doc = Document.empty()
        self.t = T0
        self.archive: list[ArchiveRecord] = []
        self.payloads: set[str] = set()
        #: segment objects written: key -> (versions landed before it, bytes)
        self.segments: dict[str, tuple[int, bytes]] = {}
        self.deletes: list[tuple[int, str]] = []
        #: the store's record of calls (slowed ones excuse a late load: NOT_LATE)
        self.calls: list[Call] = []

    def _land(self, doc: Document) -> None:
        self.landed.append(Landed(len(self.landed), encode(doc), f"e{len(self.landed)}", "b1"))
        self.doc = doc

    def apply(self, *ops: Op, at: float | None = None) -> None:
        """One commit: ``ops`` at ``T0 + at`` (default: a second after the last)."""
        self.t = T0 + at if at is not None else self.t + 1.0
        self._land(transition(self.doc, ops, self.t, owner=self._owner()).doc)

    def _owner(self) -> BrokerInfo | None:
        if self.lease_s is None:
            return None
        return BrokerInfo("b1", "b1", 1, to_datetime(self.t + self.lease_s), self.lease_s)

    def idle(self, at: float) -> None:
        """A version that changes nothing but the broker's lease, at ``T0 + at`` (what a
        broker that forgot its schedules would write)."""
        self.t = T0 + at
        doc = self.doc.copy()
        doc.version += 1
        doc.broker = self._owner()
        self._land(doc)

    def forge(self, *jobs: StoredJob, stats: Counters | None = None, skip: int = 0) -> None:
        """A version no correct broker writes: ``jobs`` replaced as given."""
        doc = self.doc.copy()
        for job in jobs:
            doc.put_job(job, self.t)
            # keep it decodable: seqs and tokens stay below the document's counters
            doc.next_seq = max(doc.next_seq, job.seq + 1)
            if job.claim is not None:
                doc.next_token = max(doc.next_token, job.claim.token + 1)
        doc.version += 1 + skip
        if stats is not None:
            _count(doc, stats, jobs[0].queue if jobs else "default")
        self._land(doc)

    def drop(self, job_id: str, stats: Counters | None = None) -> None:
        """A version without ``job_id``, nothing else changed (but ``stats`` if given)."""
        doc = self.doc.copy()
        dropped = doc.drop_job(job_id)
        doc.version += 1
        if stats is not None:
            _count(doc, stats, dropped.queue if dropped is not None else "default")
        self._land(doc)

    def spill(self) -> SegmentRef:
        """Write the segment the planner asks for (stored first), then commit its Spill."""
        (plan,) = plan_spills(self.doc, SPILLING)
        op, data = plan.build(f"u{len(self.segments)}")
        self.segments[op.ref.key] = (len(self.landed), data)
        self.apply(op)
        return op.ref

    def load(self, key: str, n: int) -> None:
        """Commit a Load of the next ``n`` jobs of segment ``key``; a fully loaded
        object is deleted after that commit."""
        ref = self.doc.segments.find(key)
        assert ref is not None
        jobs = decode_segment(self.segments[key][1])[1]
        self.apply(load_op(ref, jobs, n))
        if self.doc.segments.find(key) is None:
            self.deletes.append((len(self.landed), key))

    def lose_segment(self, key: str) -> None:
        """A version without segment ``key``'s reference, nothing else changed."""
        ref = self.doc.segments.find(key)
        assert ref is not None
        doc = self.doc.copy()
        doc.segments.remove(ref)
        doc.version += 1
        self._land(doc)

    def job(self, job_id: str) -> StoredJob:
        return self.doc.jobs[job_id]

    def at_version(self, version: int) -> Document:
        """The version that landed as ``version`` (the stories start at version 1)."""
        return decode(self.landed[version - 1].data)

    def back_to(self, version: int) -> None:
        """Forget what landed after ``version`` (to write it differently)."""
        self.doc = self.at_version(version)
        del self.landed[version:]

    def said(
        self,
        kind: Kind,
        actor: str,
        job: str,
        token: int = 0,
        delay_s: float = 0.0,
        result: EncodedResult | None = None,
        after: tuple[str, ...] = (),
    ) -> None:
        self.history.add(
            self.t - T0, kind, actor, job, token, delay_s=delay_s, result=result, after=after
        )

    def pushed(self, *job_ids: str, acked: bool = True, after: tuple[str, ...] = ()) -> None:
        for job_id in job_ids:
            self.said(Kind.PUSH_SENT, "p", job_id, after=after)
            if acked:
                self.said(Kind.PUSH_ACK, "p", job_id)

    def archive_done(self) -> None:
        """Write the archive line of every done job, then prune them (as a broker does)."""
        done = [j for j in self.doc.jobs.values() if j.status == "done"]
        for job in done:
            assert job.claim is not None
            assert job.done_version is not None
            self.archive.append(ArchiveRecord(job.id, job.done_version, job.claim.token, "w"))
        self.apply(MarkArchived(tuple(sorted({j.done_version for j in done if j.done_version}))))

    def outcome(self) -> Outcome:
        return Outcome(
            self.doc,
            list(self.archive),
            frozenset(self.payloads),
            segment_puts=dict(self.segments),
            segment_deletes=list(self.deletes),
            lease_s=self.lease_s,
            calls=list(self.calls),
        )

    def rules(self, disabled: set[Rule] | None = None) -> set[Rule]:
        found = check(self.history, self.landed, self.outcome(), disabled=disabled or set())
        return {v.rule for v in found if isinstance(v.rule, Rule)}


def clean() -> Story:
    """Push j1, claim it (token 1), complete it, archive it: every step landed."""
    s = Story()
    s.apply(Push(id="j1", payload=b"x"))
    s.pushed("j1")
    s.apply(ClaimOp("w", ("default",), 1))
    s.said(Kind.CLAIMED, "w", "j1", 1)
    s.apply(Complete("j1", 1))
    s.said(Kind.COMPLETE_OK, "w", "j1", 1)
    s.archive_done()
    return s


def reclaimed() -> Story:
    """Push j1; w claims it (token 1) and stops heartbeating; the sweep requeues it; w2
    claims it (token 2).  Nothing is wrong yet."""
    s = Story()
    s.apply(Push(id="j1", payload=b"x"))
    s.pushed("j1")
    s.apply(ClaimOp("w", ("default",), 1))
    s.said(Kind.CLAIMED, "w", "j1", 1)
    s.apply(at=100.0)  # past the heartbeat timeout: requeued with a backoff
    assert s.job("j1").status == "queued"
    s.apply(ClaimOp("w2", ("default",), 1), at=200.0)
    s.said(Kind.CLAIMED, "w2", "j1", 2)
    return s


def spilled() -> Story:
    """Push j1..j6; j2..j4 spill to a segment (written first); w claims j1, the
    segment loads back in two steps (then it is deleted), w claims and completes
    everything in order.  Nothing is wrong."""
    s = Story()
    s.apply(*[Push(id=f"j{i}", payload=b"x") for i in range(1, 7)])
    s.pushed(*[f"j{i}" for i in range(1, 7)])
    ref = s.spill()
    assert "j2" not in s.doc.jobs
    for step, load in enumerate((2, 1, 0, 0, 0)):
        s.apply(ClaimOp("w", ("default",), 1))
        (claimed,) = [j for j in s.doc.jobs.values() if j.status == "claimed"]
        token = step + 1
        assert claimed.id == f"j{token}", claimed.id
        s.said(Kind.CLAIMED, "w", claimed.id, token)
        s.apply(Complete(claimed.id, token))
        s.said(Kind.COMPLETE_OK, "w", claimed.id, token)
        if load:
            s.load(ref.key, load)
    s.apply(ClaimOp("w", ("default",), 1))
    s.said(Kind.CLAIMED, "w", "j6", 6)
    s.apply(Complete("j6", 6))
    s.said(Kind.COMPLETE_OK, "w", "j6", 6)
    s.archive_done()
    return s


def test_the_clean_histories_pass() -> None:
    assert clean().rules() == set()
    assert spilled().rules() == set()
    s = reclaimed()
    s.apply(Complete("j1", 2))
    s.said(Kind.COMPLETE_OK, "w2", "j1", 2)
    s.archive_done()
    assert s.rules() == set()


# --------------------------------------------------------------------------- I1


def no_loss() -> Story:
    s = clean()
    s.pushed("j2")  # acknowledged, and no version that landed ever held it
    return s


def payload_kept() -> Story:
    s = Story()
    s.apply(Push(id="j1", payload=None, payload_ref="payloads/j1=u1", payload_size=9))
    s.pushed("j1", acked=False)  # its object is gone (not in payload_objects)
    return s


def test_a_claim_that_found_a_live_jobs_payload_missing_is_payload_kept() -> None:
    """A claim found j1's object gone and failed j1 (how the broker answers a missing
    object: :mod:`osqueue.broker.inproc.claimed`); j1 is completed on a later claim and its
    object is there at the end, so only the failed read shows the loss."""
    s = Story()
    ref = "payloads/j1=u1"
    s.apply(Push(id="j1", payload=None, payload_ref=ref, payload_size=9))
    s.pushed("j1")
    s.payloads.add(ref)
    s.apply(ClaimOp("w", ("default",), 1))
    gone = BadPayload("j1", ref, "9 bytes", "no object", missing=True)
    s.apply(Fail("j1", 1, str(gone), retry_after_s=0.0))
    s.apply(ClaimOp("w", ("default",), 1))
    s.said(Kind.CLAIMED, "w", "j1", 2)
    s.apply(Complete("j1", 2))
    s.said(Kind.COMPLETE_OK, "w", "j1", 2)
    s.archive_done()
    assert s.rules() == {Rule.PAYLOAD_KEPT}
    assert s.rules(disabled={Rule.PAYLOAD_KEPT}) == set()


# --------------------------------------------------------------------------- I2


def pushed_first() -> Story:
    s = clean()
    s.history.events = [e for e in s.history.events if e.kind is not Kind.PUSH_SENT]
    return s


def not_recreated() -> Story:
    s = Story()
    s.apply(Push(id="j1", payload=b"x"))
    s.pushed("j1", acked=False)
    job = s.job("j1")  # a second push of j1 made a new job in its place
    s.forge(_replace(job, created_at=job.created_at + timedelta(seconds=5)))
    return s


def not_revived() -> Story:
    s = clean()  # version 3: j1 done; version 4 pruned it after its archive line
    s.forge(s.at_version(3).jobs["j1"])
    return s


def done_is_final() -> Story:
    s = clean()
    s.back_to(3)  # j1 done and archived, not pruned yet
    s.forge(_replace(s.job("j1"), status="queued", claim=None))
    return s


def archived_once() -> Story:
    s = clean()
    s.archive = s.archive * 2
    return s


# --------------------------------------------------------------------------- I3


def one_completion() -> Story:
    s = clean()
    s.back_to(3)  # j1 done under token 1
    job = s.job("j1")
    assert job.claim is not None
    s.forge(_replace(job, claim=_replace(job.claim, token=2)))  # done again, under token 2
    s.said(Kind.COMPLETE_OK, "w2", "j1", 2)
    s.archive = []
    s.archive_done()
    s.archive = [ArchiveRecord("j1", 3, 1, "w")]
    return s


def durable_completion() -> Story:
    s = Story()
    s.apply(Push(id="j1", payload=b"x"))
    s.pushed("j1")
    s.apply(ClaimOp("w", ("default",), 1))
    s.said(Kind.CLAIMED, "w", "j1", 1)
    s.said(Kind.COMPLETE_OK, "w", "j1", 1)  # answered; no version that landed holds it
    s.said(Kind.CANCEL_SENT, "p", "j1")
    s.apply(Cancel("j1"))
    s.said(Kind.CANCEL_OK, "p", "j1")
    return s


def archive_version() -> Story:
    s = clean()
    s.archive = [ArchiveRecord("j1", 2, 1, "w")]  # version 2 claimed it; 3 completed it
    return s


def archive_token() -> Story:
    s = clean()
    s.history.events = [e for e in s.history.events if e.kind is not Kind.COMPLETE_OK]
    s.archive = [ArchiveRecord("j1", 3, 5, "w")]  # version 3 completed it under token 1
    return s


def cancel_durable() -> Story:
    s = clean()
    s.said(Kind.CANCEL_SENT, "p", "j1")
    s.said(Kind.CANCEL_OK, "p", "j1")  # accepted, yet j1 completed and is archived
    return s


def counters() -> Story:
    s = clean()
    stats = s.doc.stats
    s.forge(stats=_replace(stats, completed=stats.completed + 1))
    return s


# --------------------------------------------------------------------------- I4


def token_one_holder() -> Story:
    s = clean()
    s.said(Kind.CLAIMED, "w2", "j1", 1)  # token 1 again, to someone else
    return s


def stale_token() -> Story:
    s = reclaimed()
    s.said(Kind.HEARTBEAT_OK, "w", "j1", 1)  # token 1 after token 2 was handed to w2
    s.apply(Complete("j1", 2))
    s.said(Kind.COMPLETE_OK, "w2", "j1", 2)
    s.archive_done()
    return s


def durable_claim() -> Story:
    s = clean()
    s.said(Kind.CLAIMED, "w2", "j1", 9)  # no version that landed ever gave token 9
    return s


def chain_token_owner() -> Story:
    s = Story()
    s.apply(Push(id="j1", payload=b"x"), Push(id="j2", payload=b"y"))
    s.pushed("j1")
    s.pushed("j2", acked=False)
    s.apply(ClaimOp("w", ("default",), 2))
    j1, j2 = s.job("j1"), s.job("j2")
    assert j2.claim is not None
    s.back_to(1)
    s.forge(j1, _replace(j2, claim=_replace(j2.claim, token=1)))  # token 1 for both
    s.said(Kind.CLAIMED, "w", "j1", 1)  # the answer with j2 was lost
    s.apply(Complete("j1", 1))
    s.said(Kind.COMPLETE_OK, "w", "j1", 1)
    s.archive_done()
    return s


def chain_token_forward() -> Story:
    s = reclaimed()
    s.history.events = [e for e in s.history.events if e.kind is not Kind.PUSH_ACK]
    old = s.at_version(2).jobs["j1"]
    s.forge(_replace(s.job("j1"), claim=old.claim))  # token 1 is current again
    return s


# --------------------------------------------------------------------------- I5


def version_decodes() -> Story:
    s = clean()
    s.landed.append(Landed(9, b'{"format":1,', "e9", "b1"))
    return s


def version_order() -> Story:
    s = clean()
    s.forge(skip=1)  # version 6 after version 4
    return s


# --------------------------------------------------------------------------- I6 to I9


def key_unique() -> Story:
    s = Story()
    s.apply(Push(id="j1", payload=b"x", key="k"), Push(id="j2", payload=b"y", key="k2"))
    s.pushed("j1", "j2", acked=False)
    s.forge(_replace(s.job("j2"), key="k"))  # two live jobs hold key k
    return s


def dead_at_max_attempts() -> Story:
    s = Story()
    s.apply(Push(id="j1", payload=b"x", max_attempts=3))
    s.pushed("j1")
    s.apply(ClaimOp("w", ("default",), 1))
    s.said(Kind.CLAIMED, "w", "j1", 1)
    stats = s.doc.stats
    # dead after its first attempt of three (and counted as dead, as a broker would)
    s.forge(
        _replace(s.job("j1"), status="dead", claim=None),
        stats=_replace(stats, dead=stats.dead + 1),
    )
    return s


def not_early() -> Story:
    s = Story()
    s.apply(Push(id="j1", payload=b"x", delay_s=10.0))  # due at T0 + 11
    s.pushed("j1")
    s.apply(ClaimOp("w", ("default",), 1), at=20.0)
    s.said(Kind.CLAIMED, "w", "j1", 1)
    job = s.job("j1")
    assert job.claim is not None
    early = job.claim.claimed_at - timedelta(seconds=15)  # T0 + 5: six seconds early
    s.back_to(1)
    s.forge(_replace(job, claim=_replace(job.claim, claimed_at=early, heartbeat_at=early)))
    s.apply(Complete("j1", 1))
    s.said(Kind.COMPLETE_OK, "w", "j1", 1)
    s.archive_done()
    return s


def result_kept() -> Story:
    """j1 is completed with a result; a later version drops its entry long before its
    TTL, counting no eviction."""
    s = Story()
    s.apply(Push(id="j1", payload=b"x"))
    s.pushed("j1")
    s.apply(ClaimOp("w", ("default",), 1))
    s.said(Kind.CLAIMED, "w", "j1", 1)
    s.apply(Complete("j1", 1, ResultData("text", 2, value=b"ok")))
    s.said(Kind.COMPLETE_OK, "w", "j1", 1, result=EncodedResult("text", b"ok"))
    s.archive_done()
    doc = s.doc.copy()
    doc.finished.remove("j1")
    doc.version += 1
    s._land(doc)
    return s


def delay_kept() -> Story:
    """A load that forgot its job's run_at: the job is claimed early, and the version
    before the claim agrees (so NOT_EARLY alone cannot see it)."""
    s = Story()
    s.apply(Push(id="j1", payload=b"x", delay_s=10.0))  # due at T0 + 11
    s.pushed("j1")
    s.forge(_replace(s.job("j1"), run_at=None))
    s.apply(ClaimOp("w", ("default",), 1))
    s.said(Kind.CLAIMED, "w", "j1", 1)
    s.apply(Complete("j1", 1))
    s.said(Kind.COMPLETE_OK, "w", "j1", 1)
    s.archive_done()
    return s


#: delayed jobs spill at once (every one due beyond a second)
DELAY_SPILLING = Policy(delay_spill_above_jobs=0, delay_horizon_s=1.0, delay_load_jobs=1)


def _delayed(load_at: float, *, calls: tuple[Call, ...] = ()) -> Story:
    """j1 is pushed at +1 due at +11 and spills to a delayed object at +2 (written
    first); idle versions land every second (lease 10: every one is the serving
    broker's), the object loads at ``+load_at``, and w claims and completes j1.
    ``calls``: the store's record of slowed calls."""
    s = Story(lease_s=10.0)
    s.apply(Push(id="j1", payload=b"x", delay_s=10.0))  # due at T0 + 11
    s.pushed("j1")
    (plan,) = plan_delayed_spills(s.doc, DELAY_SPILLING, s.t + 1.0)
    op, data = plan.build("u0")
    s.segments[op.ref.key] = (len(s.landed), data)
    s.apply(op)
    assert "j1" not in s.doc.jobs
    while s.t - T0 + 1.0 < load_at:
        s.idle(s.t - T0 + 1.0)
    ref = s.doc.delayed.find(op.ref.key)
    assert ref is not None
    s.apply(delayed_load_op(ref, SegmentLines.parse(data, ref.key, delayed=True), 1))
    s.deletes.append((len(s.landed), ref.key))
    s.apply(ClaimOp("w", ("default",), 1))
    s.said(Kind.CLAIMED, "w", "j1", 1)
    s.apply(Complete("j1", 1))
    s.said(Kind.COMPLETE_OK, "w", "j1", 1)
    s.archive_done()
    s.calls = list(calls)
    return s


def not_late() -> Story:
    """The delayed object loads at +14, three seconds after j1 was due (+11), while
    its broker served and committed every second, and the store slowed nothing."""
    return _delayed(14.0)


def test_a_delayed_object_loaded_in_time_passes_and_a_stall_excuses_a_late_one() -> None:
    """Loaded at +10 (a lead before j1 is due at +11), or at +12 (within the second):
    fine.  Loaded at +14: late, unless the store slowed the broker's read of the
    object, or a write of the document, or the broker was paused, until +13.5."""
    assert _delayed(10.0).rules() == set()
    assert _delayed(12.0).rules() == set()
    key = next(iter(_delayed(14.0).segments))
    for stall in (key, DOCUMENT_KEY, PAUSED):
        slowed = Call("b1", stall, 9.0, 12.5, stall != key)  # (ends at +13.5, step 1)
        assert _delayed(14.0, calls=(slowed,)).rules() == set(), stall
    other = Call("b2", key, 9.0, 12.5, True)  # another node's slow read excuses nothing
    assert _delayed(14.0, calls=(other,)).rules() == {Rule.NOT_LATE}


def priority_order() -> Story:
    s = Story()
    s.apply(Push(id="j1", payload=b"x", priority=0), Push(id="j2", payload=b"y", priority=1))
    s.pushed("j1", "j2", acked=False)
    s.apply(ClaimOp("w", ("default",), 1))
    claimed = s.job("j1")  # the real claim took j1 (priority 0) ...
    assert claimed.claim is not None
    s.back_to(1)
    j2 = s.job("j2")
    s.forge(_replace(j2, status="claimed", claim=claimed.claim, attempts=1))  # ... not j2
    s.said(Kind.CLAIMED, "w", "j2", 1)
    return s


# --------------------------------------------------------------------------- I10 to I12


def _claimed(job: StoredJob, token: int, at: float) -> StoredJob:
    """``job`` as a claim under ``token`` at ``T0 + at`` would leave it."""
    when = to_datetime(T0 + at)
    return _replace(
        job,
        status="claimed",
        claim=Claim("w", token, when, when),
        attempts=1,
        first_claimed_at=when,
    )


def ticking(lease_s: float | None = 10.0) -> Story:
    """A schedule every 10 s, made at T0 + 1; commits at +5 and +11 (the tick of +10)."""
    s = Story(lease_s=lease_s)
    s.apply(PutSchedule("beat", "default", every_s=10.0), at=1.0)
    s.apply(at=5.0)
    s.apply(at=11.0)
    assert len(s.doc.jobs) == 1
    return s


def test_a_schedule_that_ticks_passes() -> None:
    s = ticking()
    (job_id,) = s.doc.jobs
    s.apply(ClaimOp("w", ("default",), 1), at=12.0)
    s.said(Kind.CLAIMED, "w", job_id, 1)
    s.apply(Complete(job_id, 1), at=13.0)
    s.said(Kind.COMPLETE_OK, "w", job_id, 1)
    s.archive_done()
    s.apply(at=21.5)  # the next tick, fired
    assert s.rules() == set()


def tick_once() -> Story:
    s = ticking(lease_s=None)  # commit times unknown: TICK_KEPT has nothing to judge
    sched = s.doc.schedules.get("beat")
    assert sched is not None
    assert sched.last_at is not None
    doc = s.doc.copy()  # the next version records an older tick than the last one
    doc.version += 1
    doc.schedules.put(_replace(sched, last_at=sched.last_at - timedelta(seconds=10)))
    s._land(doc)
    return s


def tick_kept() -> Story:
    s = ticking()
    s.idle(at=22.0)  # the tick of +20 was due, and this version did not record it
    return s


def limit_paused() -> Story:
    s = Story()
    s.apply(Push(id="j1", payload=b"x"), SetQueue("default", paused=True))
    s.pushed("j1", acked=False)
    s.forge(_claimed(s.job("j1"), 1, 2.0))
    s.said(Kind.CLAIMED, "w", "j1", 1)
    return s


def limit_claimed() -> Story:
    s = Story()
    s.apply(
        Push(id="j1", payload=b"x"), Push(id="j2", payload=b"y"), SetQueue("default", max_claimed=1)
    )
    s.pushed("j1", "j2", acked=False)
    s.apply(ClaimOp("w", ("default",), 2))
    s.said(Kind.CLAIMED, "w", "j1", 1)
    s.forge(_claimed(s.job("j2"), 2, 3.0))  # a second claimed job: over max_claimed
    s.said(Kind.CLAIMED, "w", "j2", 2)
    return s


def limit_rate() -> Story:
    s = Story()
    s.apply(
        Push(id="j1", payload=b"x"),
        Push(id="j2", payload=b"y"),
        SetQueue("default", rate_per_s=1.0, burst=1),
    )
    s.pushed("j1", "j2", acked=False)
    s.apply(ClaimOp("w", ("default",), 2))  # one token: j1 only
    s.said(Kind.CLAIMED, "w", "j1", 1)
    s.forge(_claimed(s.job("j2"), 2, 2.0))  # a second claim with no time for a token
    s.said(Kind.CLAIMED, "w", "j2", 2)
    return s


def parents_first() -> Story:
    s = Story()
    s.apply(Push(id="p", payload=b"x"), Push(id="c", payload=b"y", priority=-1, after=("p",)))
    s.pushed("p", acked=False)
    s.pushed("c", acked=False, after=("p",))
    assert s.job("c").status == "waiting"
    s.forge(_replace(_claimed(s.job("c"), 1, 2.0), after=()))  # claimed while p is queued
    s.said(Kind.CLAIMED, "w", "c", 1)
    return s


def test_a_parent_cancelled_in_the_commit_that_pushed_it_has_ended() -> None:
    """p is pushed and cancelled in one commit (it never enters the document's jobs,
    only the record of finished jobs); its on_parent_failure="run" child c is
    claimed after: fine.  The same claim while p still waits is PARENTS_FIRST."""
    s = Story()
    s.said(Kind.CANCEL_SENT, "p", "p")
    s.apply(
        Push(id="p", payload=b"x"),
        Push(id="c", payload=b"y", after=("p",), on_parent_failure="run"),
        Cancel("p"),
    )
    s.pushed("p", acked=False)
    s.history.add(s.t - T0, Kind.PUSH_SENT, "p", "c", after=("p",), on_parent_failure="run")
    assert "p" not in s.doc.jobs
    assert s.job("c").status == "queued"
    s.apply(ClaimOp("w", ("default",), 1))
    s.said(Kind.CLAIMED, "w", "c", 1)
    assert s.rules() == set()
    s = Story()
    s.apply(Push(id="p", payload=b"x"), Push(id="c", payload=b"y", priority=-1, after=("p",)))
    s.pushed("p", acked=False)
    s.history.add(s.t - T0, Kind.PUSH_SENT, "p", "c", after=("p",), on_parent_failure="run")
    s.forge(_replace(_claimed(s.job("c"), 1, 2.0), after=()))  # claimed while p is queued
    s.said(Kind.CLAIMED, "w", "c", 1)
    assert s.rules() == {Rule.PARENTS_FIRST}


def parent_failure() -> Story:
    s = Story()
    s.apply(Push(id="p", payload=b"x"), Push(id="c", payload=b"y", after=("p",)))
    s.pushed("p")
    s.pushed("c", acked=False, after=("p",))
    s.said(Kind.CANCEL_SENT, "p", "p")
    stats = s.doc.stats
    s.drop("p", stats=_replace(stats, cancelled=stats.cancelled + 1))  # c should go with it
    s.said(Kind.CANCEL_OK, "p", "p")
    return s


def test_a_child_cancelled_with_its_parent_passes() -> None:
    s = Story()
    s.apply(Push(id="p", payload=b"x"), Push(id="c", payload=b"y", after=("p",)))
    s.pushed("p")
    s.pushed("c", after=("p",))  # acknowledged, and cancelled by its parent: not lost
    s.said(Kind.CANCEL_SENT, "p", "p")
    s.apply(Cancel("p"))
    s.said(Kind.CANCEL_OK, "p", "p")
    assert "c" not in s.doc.jobs
    assert s.rules() == set()


# --------------------------------------------------------------------------- I13


def _spilled_half() -> Story:
    """Push j1..j6 and spill j2..j4: the segment is referenced, nothing loaded yet."""
    s = Story()
    s.apply(*[Push(id=f"j{i}", payload=b"x") for i in range(1, 7)])
    s.pushed(*[f"j{i}" for i in range(1, 7)], acked=False)
    s.spill()
    return s


def segment_written() -> Story:
    s = _spilled_half()
    (key,) = s.segments
    s.segments[key] = (len(s.landed), s.segments[key][1])  # it reached the store too late
    return s


def segment_deleted_unreferenced() -> Story:
    s = _spilled_half()
    (key,) = s.segments
    s.deletes.append((len(s.landed), key))  # deleted while the last version names it
    return s


def one_place() -> Story:
    s = _spilled_half()
    (key,) = s.segments
    jobs = decode_segment(s.segments[key][1])[1]
    s.forge(jobs[0])  # back in the document without a load: in both places
    return s


def test_a_set_aside_segment_keeps_its_jobs_present_and_out_of_claim_order() -> None:
    """j2..j4 spill and are set aside: j5 and j6 are claimed past them (not out of
    order), they are not lost; readmitted, they load and complete once.  The
    sim's store never damages an object, so the set-aside itself is a finding."""
    s = Story()
    s.apply(*[Push(id=f"j{i}", payload=b"x") for i in range(1, 7)])
    s.pushed(*[f"j{i}" for i in range(1, 7)])
    ref = s.spill()
    s.apply(SetAside(ref.key, "the object is missing"))
    assert ref.key in s.doc.segments.aside
    order = ("j1", "j5", "j6", "j2", "j3", "j4")
    for token, job_id in enumerate(order, start=1):
        if job_id == "j2":
            # (not over: NO_LOSS waits for every job to end; nothing else is wrong)
            assert s.rules() == {Rule.SEGMENT_WRITTEN, Rule.NO_LOSS}
            s.apply(Readmit(ref.key))
            s.load(ref.key, 3)
        s.apply(ClaimOp("w", ("default",), 1))
        (claimed,) = [j for j in s.doc.jobs.values() if j.status == "claimed"]
        assert claimed.id == job_id
        s.said(Kind.CLAIMED, "w", job_id, token)
        s.apply(Complete(job_id, token))
        s.said(Kind.COMPLETE_OK, "w", job_id, token)
    s.archive_done()
    assert s.rules() == {Rule.SEGMENT_WRITTEN}
    assert s.rules(disabled={Rule.SEGMENT_WRITTEN}) == set()


def _dead_retried() -> tuple[Story, SwapDead]:
    """Push j1..j4 (one attempt each); each is claimed and fails, dead; the three
    oldest deaths spill to a dead segment (written first), and a retry of all
    swaps it for a ready segment of them (written first, fresh seqs).  Nothing
    is wrong yet."""
    s = Story()
    s.apply(*[Push(id=f"j{i}", payload=b"x", max_attempts=1) for i in range(1, 5)])
    s.pushed(*[f"j{i}" for i in range(1, 5)])
    for token in range(1, 5):
        s.apply(ClaimOp("w", ("default",), 1))
        s.said(Kind.CLAIMED, "w", f"j{token}", token)
        s.apply(Fail(f"j{token}", token, "boom"))
        s.said(Kind.FAIL_OK, "w", f"j{token}", token)
    (plan,) = plan_dead_spills(s.doc, DEAD_KEEPING)
    spill, data = plan.build("d1")
    s.segments[spill.ref.key] = (len(s.landed), data)
    s.apply(spill)
    s.said(Kind.DEAD_RETRY_SENT, "o", "retry-0")
    swap = plan_swap(
        spill.ref,
        read_dead(spill.ref, data),
        None,
        retry=True,
        first_seq=s.doc.next_seq,
        unique=lambda: f"r{len(s.segments)}",
    )
    assert swap is not None
    for key, obj in swap.objects:
        s.segments[key] = (len(s.landed), obj)
    return s, swap.op


def test_a_dead_segment_retried_once_passes() -> None:
    s, op = _dead_retried()
    s.apply(op)
    s.deletes.append((len(s.landed), op.old.key))
    (ready,) = op.ready
    s.load(ready.key, 3)
    for token, job_id in enumerate(("j1", "j2", "j3"), start=5):
        s.apply(ClaimOp("w", ("default",), 1))
        s.said(Kind.CLAIMED, "w", job_id, token)
        s.apply(Complete(job_id, token))
        s.said(Kind.COMPLETE_OK, "w", job_id, token)
    s.archive_done()
    assert s.rules() == set()


def dead_retried_once() -> Story:
    s, op = _dead_retried()
    s.apply(op)
    doc = s.doc.copy()  # the retried jobs' dead segment is still referenced too
    doc.dead.append(op.old)
    doc.version += 1
    s._land(doc)
    return s


# --------------------------------------------------------------------------- I14


def _cold_children() -> tuple[Story, str]:
    """Push p and c1..c3 after it; the children move to one object (written, then
    referenced).  Returns the story and the object's key."""
    s = Story()
    s.apply(
        Push(id="p", payload=b"x"),
        *[Push(id=f"c{i}", payload=b"y", after=("p",)) for i in (1, 2, 3)],
    )
    s.pushed("p", acked=False)
    s.pushed("c1", "c2", "c3", acked=False, after=("p",))
    (run,) = cold_waiting.plan_spills(s.doc, Policy(waiting_spill_above_jobs=3))
    op, data = cold_waiting.build(run, "u0")
    s.segments[op.ref.key] = (len(s.landed), data)
    s.apply(op)
    assert s.doc.waiting_cold.holds(op.ref.key)
    return s, op.ref.key


def _parent_done_then_loaded(s: Story, key: str) -> None:
    """The parent is claimed and completed, then the children's object ``key`` loads."""
    s.apply(ClaimOp("w", ("default",), 1))
    s.said(Kind.CLAIMED, "w", "p", 1)
    s.apply(Complete("p", 1))
    s.said(Kind.COMPLETE_OK, "w", "p", 1)
    ref = s.doc.waiting_cold.refs[key]
    s.apply(LoadWaiting(key, tuple(cold_waiting.read(ref, s.segments[key][1]))))


def test_cold_children_loaded_after_their_parent_pass() -> None:
    s, key = _cold_children()
    _parent_done_then_loaded(s, key)
    assert [j.status for j in s.doc.jobs.values() if j.id != "p"] == ["queued"] * 3
    s.deletes.append((len(s.landed), key))
    assert s.rules() == set()


def _cold_children_aside() -> tuple[Story, str]:
    """The children's object is found missing and set aside, restored and readmitted,
    then loaded once their parent completed."""
    s, key = _cold_children()
    s.apply(SetAside(key, "the object is missing"))
    assert key in s.doc.waiting_cold.aside
    s.apply(Readmit(key))
    return s, key


def test_cold_children_set_aside_and_readmitted_pass() -> None:
    s, key = _cold_children_aside()
    _parent_done_then_loaded(s, key)
    assert {"c1", "c2", "c3"} <= set(s.doc.jobs)
    assert s.rules() == set()


def aside_kept() -> Story:
    """A readmit that lists the children's object again as holding two jobs, not the
    three it held when it was set aside (one child would never load)."""
    s, key = _cold_children()
    s.apply(SetAside(key, "the object is missing"))
    ref = s.doc.waiting_cold.aside[key].ref
    doc = transition(s.doc, [Readmit(key)], s.t + 1.0).doc
    doc.waiting_cold.refs[key] = _replace(ref, count=2)
    doc.waiting_cold._frags[key] = msgspec.json.encode(doc.waiting_cold.refs[key])
    doc.waiting_cold._section = None
    s._land(doc)
    assert decode(s.landed[-1].data).waiting_cold.refs[key].count == 2
    return s


def test_a_set_aside_reference_dropped_without_a_readmit_is_aside_kept() -> None:
    s, key = _cold_children()
    s.apply(SetAside(key, "the object is missing"))
    doc = s.doc.copy()
    del doc.waiting_cold.aside[key]  # gone, children and all
    doc.waiting_cold._section = None
    doc.version += 1
    s._land(doc)
    assert Rule.ASIDE_KEPT in s.rules()  # (with the rules of the children it took)


def waiting_one_place() -> Story:
    s, key = _cold_children()
    ref = s.doc.waiting_cold.refs[key]
    jobs = cold_waiting.read(ref, s.segments[key][1])
    s.forge(jobs[0])  # back in the document while the object still holds it
    return s


def sealed_kept() -> Story:
    s = Story()
    s.apply(Push(id="j1", payload=b"x"), Push(id="j2", payload=b"x"))
    s.pushed("j1", "j2", acked=False)
    s.apply(ClaimOp("w", ("default",), 2))
    for token, job_id in enumerate(("j1", "j2"), start=1):
        s.said(Kind.CLAIMED, "w", job_id, token)
        s.apply(Complete(job_id, token, result=ResultData("text", 2, value=b"ok")))
        s.said(Kind.COMPLETE_OK, "w", job_id, token)
    entries = list(s.doc.finished)
    op, _ = finished_objects.build(entries, "u0")
    # the object written holds another entry for j2 than the document did
    _, wrong = finished_objects.build([entries[0], _replace(entries[1], attempts=7)], "u0")
    s.segments[op.ref.key] = (len(s.landed), wrong)
    s.apply(op)
    assert not s.doc.finished
    s.archive_done()
    return s


BROKEN: dict[Rule, Callable[[], Story]] = {
    Rule.NO_LOSS: no_loss,
    Rule.PAYLOAD_KEPT: payload_kept,
    Rule.PUSHED_FIRST: pushed_first,
    Rule.NOT_RECREATED: not_recreated,
    Rule.NOT_REVIVED: not_revived,
    Rule.DONE_IS_FINAL: done_is_final,
    Rule.ARCHIVED_ONCE: archived_once,
    Rule.ONE_COMPLETION: one_completion,
    Rule.DURABLE_COMPLETION: durable_completion,
    Rule.ARCHIVE_VERSION: archive_version,
    Rule.ARCHIVE_TOKEN: archive_token,
    Rule.CANCEL_DURABLE: cancel_durable,
    Rule.COUNTERS: counters,
    Rule.RESULT_KEPT: result_kept,
    Rule.TOKEN_ONE_HOLDER: token_one_holder,
    Rule.STALE_TOKEN: stale_token,
    Rule.DURABLE_CLAIM: durable_claim,
    Rule.CHAIN_TOKEN_OWNER: chain_token_owner,
    Rule.CHAIN_TOKEN_FORWARD: chain_token_forward,
    Rule.VERSION_DECODES: version_decodes,
    Rule.VERSION_ORDER: version_order,
    Rule.KEY_UNIQUE: key_unique,
    Rule.DEAD_AT_MAX_ATTEMPTS: dead_at_max_attempts,
    Rule.NOT_EARLY: not_early,
    Rule.DELAY_KEPT: delay_kept,
    Rule.NOT_LATE: not_late,
    Rule.PRIORITY_ORDER: priority_order,
    Rule.TICK_ONCE: tick_once,
    Rule.TICK_KEPT: tick_kept,
    Rule.LIMIT_PAUSED: limit_paused,
    Rule.LIMIT_CLAIMED: limit_claimed,
    Rule.LIMIT_RATE: limit_rate,
    Rule.PARENTS_FIRST: parents_first,
    Rule.PARENT_FAILURE: parent_failure,
    Rule.SEGMENT_WRITTEN: segment_written,
    Rule.SEGMENT_DELETED_UNREFERENCED: segment_deleted_unreferenced,
    Rule.ONE_PLACE: one_place,
    Rule.ASIDE_KEPT: aside_kept,
    Rule.DEAD_RETRIED_ONCE: dead_retried_once,
    Rule.WAITING_ONE_PLACE: waiting_one_place,
    Rule.SEALED_KEPT: sealed_kept,
}


def test_every_rule_has_a_broken_history() -> None:
    assert set(BROKEN) == set(Rule)


@pytest.mark.parametrize("rule", list(Rule), ids=[r.value for r in Rule])
def test_each_rule_alone_names_its_broken_history(rule: Rule) -> None:
    assert BROKEN[rule]().rules() == {rule}


@pytest.mark.parametrize("rule", list(Rule), ids=[r.value for r in Rule])
def test_with_its_rule_disabled_the_broken_history_passes(rule: Rule) -> None:
    story = BROKEN[rule]()
    assert story.rules(disabled={rule}) == set()
    assert story.rules(disabled=set(Rule) - {rule}) == {rule}


# --------------------------------------------------------------------------- by invariant


def _invariants(history: History, landed: list[Landed], outcome: Outcome) -> list[str]:
    return sorted({v.invariant for v in check(history, landed, outcome)})


def _clean() -> tuple[History, list[Landed], Outcome]:
    s = clean()
    return s.history, s.landed, s.outcome()


def test_a_clean_history_passes() -> None:
    assert _invariants(*_clean()) == []


def test_an_acknowledged_job_that_vanished_is_i1() -> None:
    history, landed, outcome = _clean()
    assert _invariants(history, landed, Outcome(outcome.final, [])) == ["I1", "I3"]


def test_a_job_nobody_pushed_and_a_double_archive_are_i2() -> None:
    history, landed, outcome = _clean()
    twice = Outcome(outcome.final, outcome.archive * 2)
    assert "I2" in _invariants(history, landed, twice)
    stranger = [msgspec.structs.replace(outcome.archive[0], id="ghost")]
    assert "I2" in _invariants(history, landed, Outcome(outcome.final, outcome.archive + stranger))


def test_completions_under_two_tokens_are_i3() -> None:
    history, landed, outcome = _clean()
    history.add(5, Kind.COMPLETE_OK, "w2", "j1", 7)
    assert "I3" in _invariants(history, landed, outcome)


def test_a_token_handed_out_twice_and_a_stale_heartbeat_are_i4() -> None:
    history, landed, outcome = _clean()
    history.add(5, Kind.CLAIMED, "w2", "j1", 1)  # token 1 again, to someone else
    assert "I4" in _invariants(history, landed, outcome)
    history, landed, outcome = _clean()
    history.add(5, Kind.CLAIMED, "w2", "j1", 9)
    history.add(6, Kind.HEARTBEAT_OK, "w", "j1", 1)  # token 1 after token 9 was handed out
    assert "I4" in _invariants(history, landed, outcome)


def test_a_version_going_back_or_not_decoding_is_i5() -> None:
    history, landed, outcome = _clean()
    back = [*landed, landed[1]]
    assert "I5" in _invariants(history, back, outcome)
    broken = [*landed, Landed(9, b'{"format":1,', "e9", "b1")]
    assert "I5" in _invariants(history, broken, outcome)


# --------------------------------------------------------------------------- the loopholes


def test_a_stale_heartbeat_is_caught_by_the_stale_token_rule_itself() -> None:
    """The heartbeat's stale token is the only thing wrong: both claims landed."""
    story = stale_token()
    [violation] = check(story.history, story.landed, story.outcome())
    assert violation.rule is Rule.STALE_TOKEN
    assert "stale token 1 accepted (heartbeat-ok from w) after token 2" in violation.message


def test_a_completion_after_a_newer_token_is_stale() -> None:
    s = reclaimed()
    s.said(Kind.COMPLETE_OK, "w", "j1", 1)  # w's completion after w2 got token 2
    assert Rule.STALE_TOKEN in s.rules()


def test_counters_hold_with_cancels_and_a_cancel_that_did_not_count_is_caught() -> None:
    s = clean()
    s.apply(Push(id="j2", payload=b"y"))
    s.pushed("j2")
    s.said(Kind.CANCEL_SENT, "p", "j2")
    s.apply(Cancel("j2"))
    s.said(Kind.CANCEL_OK, "p", "j2")
    assert s.doc.stats.cancelled == 1
    assert s.rules() == set()
    s.back_to(len(s.landed) - 1)
    s.drop("j2")  # the cancel again, its counter not moved
    assert s.rules() == {Rule.COUNTERS}


@pytest.mark.parametrize("wrong", ["completed in another queue", "pushed alone"])
def test_a_queue_counter_that_moves_apart_from_the_jobs_is_caught(wrong: str) -> None:
    s = Story()
    s.apply(Push(id="j1", payload=b"x"), Push(id="j2", payload=b"y", queue="other"))
    s.pushed("j1")
    s.pushed("j2", acked=False)  # (it stays queued: no answer, so no loss)
    s.apply(ClaimOp("w", ("default",), 1))
    s.said(Kind.CLAIMED, "w", "j1", 1)
    s.apply(Complete("j1", 1))
    s.said(Kind.COMPLETE_OK, "w", "j1", 1)
    forged = s.doc.copy()  # the completion's version, its queue counters rewritten
    s.back_to(len(s.landed) - 1)
    if wrong == "pushed alone":
        totals(forged, "default").pushed += 1
    else:
        totals(forged, "default").completed -= 1
        totals(forged, "other").completed += 1
    s._land(forged)
    s.archive_done()
    assert s.rules() == {Rule.COUNTERS}


def test_a_cancel_sent_is_no_excuse_for_a_job_that_never_left() -> None:
    s = clean()
    s.apply(Push(id="j2", payload=b"y"))
    s.pushed("j2")
    s.said(Kind.CANCEL_SENT, "p", "j2")  # sent; it never landed, the job stays queued
    assert s.rules() == {Rule.NO_LOSS}
    s.drop("j2", stats=_replace(s.doc.stats, cancelled=1))  # now a version removed it
    assert s.rules() == set()
    s.history.events = [e for e in s.history.events if e.kind is not Kind.CANCEL_SENT]
    assert s.rules() == {Rule.NO_LOSS}, "a job that left undone with no cancel sent is lost"


def test_a_cancelled_jobs_claims_are_checked_too() -> None:
    """A claim and a cancel of one job in one batch: the landed version allocated the
    token and removed the job, so no version holds the claim, and that is fine.  A
    claim of a cancelled job that no version allocated is still caught."""
    s = Story()
    s.apply(Push(id="j1", payload=b"x"))
    s.pushed("j1")
    s.said(Kind.CANCEL_SENT, "p", "j1")
    s.apply(ClaimOp("w", ("default",), 1), Cancel("j1"))
    s.said(Kind.CLAIMED, "w", "j1", 1)
    s.said(Kind.CANCEL_OK, "p", "j1")
    assert s.rules() == set()
    s.said(Kind.CLAIMED, "w2", "j1", 2)  # token 2 was never allocated by that version
    assert s.rules() == {Rule.DURABLE_CLAIM}


def test_a_delayed_push_claimed_in_the_version_that_pushed_it_is_early() -> None:
    s = Story()
    s.apply()  # version 1: empty
    elsewhere = transition(Document.empty(), [Push(id="j1", payload=b"x")], s.t).doc
    claimed = transition(elsewhere, [ClaimOp("w", ("default",), 1)], s.t + 1).doc.jobs["j1"]
    s.said(Kind.PUSH_SENT, "p", "j1", delay_s=30.0)
    s.forge(claimed, stats=Counters(pushed=1))  # pushed with a delay, claimed at once
    assert s.rules() == {Rule.NOT_EARLY}


def test_priority_order_compares_seq_within_a_priority_and_nothing_across_queues() -> None:
    s = Story()
    s.apply(
        Push(id="j1", payload=b"x"),
        Push(id="j2", payload=b"y"),
        Push(id="j3", payload=b"z", queue="other"),
    )
    s.pushed("j1", "j2", "j3", acked=False)
    s.apply(ClaimOp("w", ("other",), 1))  # j3 claimed while j1 waits in another queue: fine
    assert s.rules() == set()
    s.apply(ClaimOp("w", ("default",), 1))
    j1 = s.job("j1")
    assert j1.claim is not None
    s.back_to(2)
    s.forge(_replace(s.job("j2"), status="claimed", claim=j1.claim, attempts=1))
    assert s.rules() == {Rule.PRIORITY_ORDER}  # j2 (seq 2) claimed while j1 (seq 1) waited


def test_a_claim_beyond_max_attempts_is_caught() -> None:
    s = Story()
    s.apply(Push(id="j1", payload=b"x", max_attempts=1))
    s.pushed("j1", acked=False)
    s.apply(ClaimOp("w", ("default",), 1))
    s.forge(_replace(s.job("j1"), attempts=2))
    assert s.rules() == {Rule.DEAD_AT_MAX_ATTEMPTS}


def test_an_unknown_rule_cannot_be_disabled() -> None:
    with pytest.raises(TypeError, match="Rule"):
        check(History(), [], Outcome(None, []), disabled={"no-loss"})  # type: ignore[arg-type]


# --------------------------------------------------------------------------- deep backlogs


def test_a_job_a_load_drops_is_lost_and_a_claim_past_a_spilled_job_is_out_of_order() -> None:
    s = _spilled_half()
    (key,) = s.segments
    s.lose_segment(key)  # a version whose segment is gone, its jobs with it
    s.history.events = [e for e in s.history.events if e.kind is not Kind.PUSH_ACK]
    s.pushed("j2", acked=True)
    assert s.rules() == {Rule.NO_LOSS, Rule.COUNTERS}

    s = _spilled_half()  # j1 is the head; j2..j4 wait in the segment, j5, j6 after it
    s.apply(ClaimOp("w", ("default",), 1))
    j1 = s.job("j1")
    assert j1.claim is not None
    s.back_to(len(s.landed) - 1)
    s.forge(_replace(s.job("j5"), status="claimed", claim=j1.claim, attempts=1))
    assert s.rules() == {Rule.PRIORITY_ORDER}  # j5 claimed while j1..j4 waited


def test_the_segment_rules_read_what_the_reference_says() -> None:
    s = _spilled_half()
    (key,) = s.segments
    at, data = s.segments[key]
    s.segments[key] = (at, data.replace(b'"j3"', b'"j9"'))  # another job than the ref says
    assert Rule.SEGMENT_WRITTEN in s.rules()
    s = _spilled_half()
    del s.segments[key]  # never written at all
    assert Rule.SEGMENT_WRITTEN in s.rules()
