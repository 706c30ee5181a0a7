"""What a run did, and the names of the rules the checker judges it by.

The history has two halves:

* the clients' side, as :class:`Event` values: every push sent and
  acknowledged, every claim delivered (job and token), every heartbeat,
  completion, failure, release and cancel the broker accepted.  Each event
  carries the order in which the broker's answer was produced (``seq``), not
  when the client got it;
* the storage's side: every document version that landed, in the order it
  landed (:class:`sim.store.Landed`), the archive and payload objects at the
  end, and every segment object written and deleted (:class:`Outcome`).

:func:`sim.checker.check` judges both halves by the rules of :class:`Rule`;
each :class:`Violation` names the rule it broke.  Each rule has a test that
feeds it a history broken that way alone (``tests/simulation/test_sim_checker.py``).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from enum import Enum

import msgspec

from osqueue.api import EncodedResult
from osqueue.state import Document
from sim.store import Call


class Kind(Enum):
    PUSH_SENT = "push-sent"
    PUSH_ACK = "push-ack"
    PUSH_REFUSED = "push-refused"
    CANCEL_SENT = "cancel-sent"
    CANCEL_OK = "cancel-ok"
    RELEASE_OK = "release-ok"
    CLAIMED = "claimed"
    HEARTBEAT_OK = "heartbeat-ok"
    COMPLETE_OK = "complete-ok"
    FAIL_OK = "fail-ok"
    LEASE_LOST = "lease-lost"
    #: the operator sends a retry of every dead job (each send counts: a lost answer
    #: is sent again)
    DEAD_RETRY_SENT = "dead-retry-sent"


@dataclass(frozen=True, slots=True)
class Event:
    seq: int
    at: float
    kind: Kind
    actor: str
    job: str
    token: int = 0
    #: PUSH_SENT: the delay the job was pushed with
    delay_s: float = 0.0
    #: COMPLETE_OK: the result the completion carried
    result: EncodedResult | None = None
    #: PUSH_SENT: the job's parents and what a failed one does to it
    after: tuple[str, ...] = ()
    on_parent_failure: str = "cancel"


class Rule(Enum):
    """A rule of the checker.  The value is its stable name (used in reports and docs)."""

    # I1: nothing acknowledged is lost
    NO_LOSS = "no-loss"
    PAYLOAD_KEPT = "payload-kept"
    # I2: jobs come from pushes and exist once
    PUSHED_FIRST = "pushed-first"
    NOT_RECREATED = "not-recreated"
    NOT_REVIVED = "not-revived"
    DONE_IS_FINAL = "done-is-final"
    ARCHIVED_ONCE = "archived-once"
    # I3: completion at most once, and the archive and counters agree with what landed
    ONE_COMPLETION = "one-completion"
    DURABLE_COMPLETION = "durable-completion"
    ARCHIVE_VERSION = "archive-version"
    ARCHIVE_TOKEN = "archive-token"
    CANCEL_DURABLE = "cancel-durable"
    COUNTERS = "counters"
    RESULT_KEPT = "result-kept"
    # I4: fencing tokens
    TOKEN_ONE_HOLDER = "token-one-holder"
    STALE_TOKEN = "stale-token"
    DURABLE_CLAIM = "durable-claim"
    CHAIN_TOKEN_OWNER = "chain-token-owner"
    CHAIN_TOKEN_FORWARD = "chain-token-forward"
    # I5: the document chain
    VERSION_DECODES = "version-decodes"
    VERSION_ORDER = "version-order"
    # I6 to I9: what claims and failures may do
    KEY_UNIQUE = "key-unique"
    DEAD_AT_MAX_ATTEMPTS = "dead-at-max-attempts"
    NOT_EARLY = "not-early"
    DELAY_KEPT = "delay-kept"
    NOT_LATE = "not-late"
    PRIORITY_ORDER = "priority-order"
    # I10 to I12: schedules, queue limits, dependencies (docs/scheduling.md)
    TICK_ONCE = "tick-once"
    TICK_KEPT = "tick-kept"
    LIMIT_PAUSED = "limit-paused"
    LIMIT_CLAIMED = "limit-claimed"
    LIMIT_RATE = "limit-rate"
    PARENTS_FIRST = "parents-first"
    PARENT_FAILURE = "parent-failure"
    # I13: deep backlogs (segment objects)
    SEGMENT_WRITTEN = "segment-written"
    SEGMENT_DELETED_UNREFERENCED = "segment-deleted-unreferenced"
    ONE_PLACE = "one-place"
    ASIDE_KEPT = "aside-kept"
    # I15: dead letters in dead segments (sim.dead_rules)
    DEAD_RETRIED_ONCE = "dead-retried-once"
    # I14: waiting children in objects and the sealed record (sim.waiting_rules)
    WAITING_ONE_PLACE = "waiting-one-place"
    SEALED_KEPT = "sealed-kept"

    @property
    def invariant(self) -> str:
        return RULE_DOCS[self][0]

    @property
    def text(self) -> str:
        """What the rule checks, in one sentence."""
        return RULE_DOCS[self][1]


RULE_DOCS: dict[Rule, tuple[str, str]] = {
    Rule.NO_LOSS: (
        "I1",
        "every acknowledged push ends archived, dead, or cancelled (it left the "
        "document before it was done, after a cancel was sent)",
    ),
    Rule.PAYLOAD_KEPT: (
        "I1",
        "every job in the last version still has its payload object, and no claim found "
        "a live job's object missing",
    ),
    Rule.PUSHED_FIRST: ("I2", "every job in a version or in the archive was pushed"),
    Rule.NOT_RECREATED: (
        "I2",
        "a job id is created once: its seq and creation time never change, "
        "and no new job takes the id of one that left",
    ),
    Rule.NOT_REVIVED: ("I2", "a job that left the document never comes back"),
    Rule.DONE_IS_FINAL: ("I2", "a done job stays done until it leaves the document"),
    Rule.ARCHIVED_ONCE: ("I2", "a job is archived at most once"),
    Rule.ONE_COMPLETION: (
        "I3",
        "the accepted completions and the archive lines of a job name one token",
    ),
    Rule.DURABLE_COMPLETION: (
        "I3",
        "an accepted completion is in a version that landed (the job done under that token)",
    ),
    Rule.ARCHIVE_VERSION: (
        "I3",
        "an archive line names a landed version in which its job became done",
    ),
    Rule.ARCHIVE_TOKEN: (
        "I3",
        "an archive line's token is the token its version completed the job under",
    ),
    Rule.CANCEL_DURABLE: (
        "I3",
        "an accepted cancel is in a version that landed (the job left undone) and "
        "the job is never archived",
    ),
    Rule.COUNTERS: (
        "I3",
        "the document's counters move with its jobs from version to version, cancels "
        "included, and stats.completed equals the jobs archived or done",
    ),
    Rule.RESULT_KEPT: (
        "I3",
        "an accepted completion's result is in every version from the one that finished "
        "the job until its entry expires or is counted evicted, exactly as the completion "
        "carried it (inline, or in a result object that holds those bytes)",
    ),
    Rule.TOKEN_ONE_HOLDER: ("I4", "a claim token is delivered to one job and one worker"),
    Rule.STALE_TOKEN: (
        "I4",
        "no heartbeat, completion, failure or release is accepted under a token "
        "after a newer token for the job was delivered",
    ),
    Rule.DURABLE_CLAIM: (
        "I4",
        "every delivered claim is held in a version that landed (or its job was "
        "cancelled in the very version that claimed it)",
    ),
    Rule.CHAIN_TOKEN_OWNER: ("I4", "in the landed versions, a token belongs to one job"),
    Rule.CHAIN_TOKEN_FORWARD: (
        "I4",
        "in the landed versions, a job's token only moves forward; a retired token "
        "never comes back",
    ),
    Rule.VERSION_DECODES: ("I5", "every version that landed decodes"),
    Rule.VERSION_ORDER: (
        "I5",
        "each version that lands is the one before it plus one",
    ),
    Rule.KEY_UNIQUE: (
        "I6",
        "in every landed version, an idempotency key is held by at most one live "
        "(queued or claimed) job",
    ),
    Rule.DEAD_AT_MAX_ATTEMPTS: (
        "I7",
        "a job is dead only after max_attempts attempts, and never claimed for more",
    ),
    Rule.NOT_EARLY: (
        "I8",
        "a delayed job is never claimed before its run_at, by the claiming broker's "
        "clock (claimed_at in the version that claimed it)",
    ),
    Rule.DELAY_KEPT: (
        "I8",
        "a queued job keeps its run_at from version to version until it is claimed "
        "(through a spill to a delayed object and a load back too), so a delayed job "
        "is never claimable before it",
    ),
    Rule.NOT_LATE: (
        "I8",
        "a job in a delayed object is back in the document (claimable when due) at most "
        "a second after its run_at, by the clock of the broker serving then, counted from "
        "when that broker was up (its first version, or its first after a stall) and the "
        "end of its last read of the object or of the document, or write of the document, "
        "that the store slowed or failed",
    ),
    Rule.PRIORITY_ORDER: (
        "I9",
        "a claim never takes a job while a due job of the same queue with a lower "
        "(priority, seq) stays queued in that version (in the document or in a segment; "
        "one of a group at its cap aside)",
    ),
    Rule.TICK_ONCE: (
        "I10",
        "a schedule's job is born only in the version that records its tick, one job "
        "per tick, and a recorded tick never goes back",
    ),
    Rule.TICK_KEPT: (
        "I10",
        "a version committed when a tick was due records the latest due tick, with its "
        "job (catch_up=once, or skip within the grace) or without (skip, late)",
    ),
    Rule.LIMIT_PAUSED: ("I11", "a paused queue gives no claim"),
    Rule.LIMIT_CLAIMED: (
        "I11",
        "a claim never leaves a queue above max_claimed, nor a group above max_claimed_per_group",
    ),
    Rule.LIMIT_RATE: (
        "I11",
        "over any window of the bucket's clock a rate-limited queue gives at most "
        "burst + rate x window claims",
    ),
    Rule.PARENTS_FIRST: (
        "I12",
        "a job with parents is claimed only after every parent completed (or, with "
        "on_parent_failure=run, ended)",
    ),
    Rule.PARENT_FAILURE: (
        "I12",
        "a child of a parent that ended dead or cancelled leaves with it (cancel) or "
        "stays (run); nothing else takes a child out",
    ),
    Rule.SEGMENT_WRITTEN: (
        "I13",
        "every segment a version references reached the store, whole and never "
        "changed, before that version landed, and holds exactly what the reference "
        "says (stream, seqs, count, size, ids, what is loaded, cancelled and keyed)",
    ),
    Rule.SEGMENT_DELETED_UNREFERENCED: (
        "I13",
        "a segment object is deleted only when neither the last version that landed "
        "before the delete nor any later one references it (orphans only ever "
        "unreferenced)",
    ),
    Rule.ONE_PLACE: (
        "I13",
        "in every version a job is in one place: the document, or the part of one "
        "segment not loaded yet (never both, never two segments)",
    ),
    Rule.ASIDE_KEPT: (
        "I13",
        "a cold object's reference set aside (its object missing or broken) keeps its "
        "jobs until a readmit lists it again: it never leaves the set-aside list "
        "otherwise (a key listed and set aside at once does not decode)",
    ),
    Rule.DEAD_RETRIED_ONCE: (
        "I15",
        "every dead job is retried at most once per retry sent, and no job is in two "
        "places (the document, a segment, a dead segment)",
    ),
    Rule.WAITING_ONE_PLACE: (
        "I14",
        "in every version a waiting child is in the document or in one referenced "
        "object of waiting children, never both, never two",
    ),
    Rule.SEALED_KEPT: (
        "I14",
        "an entry of the record of finished jobs that leaves the document into a sealed "
        "object is in it exactly as the document held it",
    ),
}


class Problem(Enum):
    """What a run itself reports, beside the checker's rules."""

    NOT_SETTLED = "not-settled"
    STUCK = "stuck"
    UNEXPECTED = "unexpected"
    BROKER_FAILED = "broker-failed"

    @property
    def invariant(self) -> str:
        return {
            Problem.NOT_SETTLED: "I1",
            Problem.STUCK: "liveness",
            Problem.UNEXPECTED: "error",
            Problem.BROKER_FAILED: "broker",
        }[self]


@dataclass(frozen=True, slots=True)
class Violation:
    rule: Rule | Problem
    message: str

    @property
    def invariant(self) -> str:
        return self.rule.invariant

    def __str__(self) -> str:
        return f"{self.rule.invariant} {self.rule.value}: {self.message}"


class ArchiveRecord(msgspec.Struct, frozen=True):
    """The fields of an archive line the checker needs."""

    id: str
    version: int
    token: int | None = None
    worker: str | None = None


@dataclass
class History:
    events: list[Event] = field(default_factory=list)
    _seq: int = 0

    def stamp(self) -> int:
        """The next position in the order answers were produced."""
        self._seq += 1
        return self._seq

    def add(
        self,
        at: float,
        kind: Kind,
        actor: str,
        job: str,
        token: int = 0,
        seq: int = 0,
        *,
        delay_s: float = 0.0,
        result: EncodedResult | None = None,
        after: tuple[str, ...] = (),
        on_parent_failure: str = "cancel",
    ) -> None:
        self.events.append(
            Event(
                seq or self.stamp(),
                at,
                kind,
                actor,
                job,
                token,
                delay_s,
                result=result,
                after=after,
                on_parent_failure=on_parent_failure,
            )
        )

    def of(self, kind: Kind) -> list[Event]:
        return [e for e in self.events if e.kind is kind]

    def ids(self, kind: Kind) -> set[str]:
        return {e.job for e in self.events if e.kind is kind}


@dataclass
class Outcome:
    """The store at the end of a run: the last document and the archive."""

    final: Document | None
    archive: list[ArchiveRecord]
    #: the keys under payloads/ at the end
    payload_objects: frozenset[str] = frozenset()
    #: the objects under results/ at the end, by key
    result_objects: dict[str, bytes] = field(default_factory=dict)
    #: the brokers' lease (a version's commit time is ``lease_until - lease_s``)
    lease_s: float | None = None
    #: the brokers' schedule_grace_s
    schedule_grace_s: float = 60.0
    #: every segment object that reached the store: key -> (versions landed before
    #: it, its bytes), as :attr:`sim.store.SharedStore.segment_puts`
    segment_puts: Mapping[str, tuple[int, bytes]] = field(default_factory=dict)
    #: keys of segment objects put again with other bytes
    segment_rewrites: list[str] = field(default_factory=list)
    #: (versions landed before it, key) of every delete of a segment object
    segment_deletes: list[tuple[int, str]] = field(default_factory=list)
    #: the reads of delayed objects and of the document, and the document's writes, as
    #: :attr:`sim.store.SharedStore.calls`
    calls: list[Call] = field(default_factory=list)


_line_decoder = msgspec.json.Decoder(ArchiveRecord)


def parse_archive(objects: Mapping[str, bytes]) -> list[ArchiveRecord]:
    out: list[ArchiveRecord] = []
    for key in sorted(objects):
        for line in objects[key].splitlines():
            if line:
                out.append(_line_decoder.decode(line))
    return out
