"""What a run did, and the checker that judges it against invariants I1 to I5.

The history has two halves:

* the clients' side, as :class:`Event` values: every push sent and
  acknowledged, every claim delivered (job and token), every heartbeat,
  completion and failure the broker accepted.  Each event carries the order in
  which the broker's answer was produced (``seq``), not when the client got it;
* the storage's side: every document version that landed, in the order it
  landed, and every archive object at the end.

:func:`check` returns one :class:`Violation` per broken rule:

* I1: every acknowledged push ends completed (archived) or dead, and a job
  that is still in the document still has its payload object;
* I2: no job appears that was never pushed; a job exists once (never
  re-created, never revived after it left the document, archived at most once);
* I3: at most one completion is accepted per job, and what the archive holds
  was completed in a version that really landed, under that token; a
  completed job's result is kept until its TTL, exactly as its accepted
  completion carried it (``result-kept``, :mod:`sim.results`);
* I4: a claim token is handed out once; a job's token only moves forward; a
  stale token never completes, heartbeats or fails a job;
* I5: every version that landed decodes and ``version`` strictly increases.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from enum import Enum

import msgspec

from osqueue.api import EncodedResult
from osqueue.errors import CorruptDocument
from osqueue.state import Document, decode
from sim.store import Landed


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


@dataclass(frozen=True, slots=True)
class Event:
    seq: int
    at: float
    kind: Kind
    actor: str
    job: str
    token: int = 0
    #: COMPLETE_OK: the result the completion carried
    result: EncodedResult | None = None


@dataclass(frozen=True, slots=True)
class Violation:
    invariant: str
    message: str

    def __str__(self) -> str:
        return f"{self.invariant}: {self.message}"


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
        result: EncodedResult | None = None,
    ) -> None:
        self.events.append(Event(seq or self.stamp(), at, kind, actor, job, token, result))

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


_line_decoder = msgspec.json.Decoder(ArchiveRecord)


def parse_archive(objects: Mapping[str, bytes]) -> list[ArchiveRecord]:
    out: list[ArchiveRecord] = []
    for key in sorted(objects):
        for line in objects[key].splitlines():
            if line:
                out.append(_line_decoder.decode(line))
    return out


# --------------------------------------------------------------------------- the checker


def check(history: History, landed: list[Landed], outcome: Outcome) -> list[Violation]:
    out: list[Violation] = []
    docs = _check_versions(landed, out)
    _check_origin(history, docs, outcome, out)
    _check_completions(history, docs, outcome, out)
    _check_tokens(history, docs, out)
    _check_durable_answers(history, docs, out)
    _check_counters(history, outcome, out)
    _check_no_loss(history, docs, outcome, out)
    _check_payloads(outcome, out)
    from sim.results import check_results  # the rule's module names this one's types

    out += check_results(history, docs, outcome.result_objects)
    return out


def _check_payloads(outcome: Outcome, out: list[Violation]) -> None:
    """I1: a job in the last version can still be delivered: its payload object exists."""
    final = outcome.final
    if final is None:
        return
    for job_id, job in sorted(final.jobs.items()):
        ref = job.payload_ref
        if ref is not None and ref not in outcome.payload_objects:
            out.append(
                Violation("I1", f"job {job_id} ({job.status}) lost its payload object {ref}")
            )


def _check_durable_answers(history: History, docs: list[Document], out: list[Violation]) -> None:
    """No answer before its write is durable: every delivered claim is in a landed version
    (or was cancelled later in the same batch: the token was still allocated by it)."""
    claims = {
        (job_id, job.claim.token)
        for doc in docs
        for job_id, job in doc.jobs.items()
        if job.claim is not None
    }
    allocated = max((doc.next_token for doc in docs), default=0)
    cancelled = history.ids(Kind.CANCEL_SENT)
    for e in history.of(Kind.CLAIMED):
        if (e.job, e.token) in claims or (e.job in cancelled and e.token < allocated):
            continue
        out.append(
            Violation(
                "I4",
                f"{e.actor} was handed {e.job} under token {e.token}, which no version "
                "that landed ever held (answered from a write that did not land)",
            )
        )


def _check_counters(history: History, outcome: Outcome, out: list[Violation]) -> None:
    """The document's counters agree with the archive (nothing is purged in a run)."""
    final = outcome.final
    if final is None or history.ids(Kind.CANCEL_SENT):
        return
    if final.stats.completed != len(outcome.archive):
        out.append(
            Violation(
                "I3",
                f"stats.completed is {final.stats.completed} but the archive holds "
                f"{len(outcome.archive)} completions",
            )
        )


def _check_versions(landed: list[Landed], out: list[Violation]) -> list[Document]:
    """I5: every landed version decodes; versions strictly increase."""
    docs: list[Document] = []
    previous = -1
    for i, item in enumerate(landed):
        try:
            doc = decode(item.data)
        except CorruptDocument as exc:
            out.append(Violation("I5", f"write #{i} by {item.writer} does not decode: {exc}"))
            continue
        if doc.version <= previous:
            out.append(
                Violation(
                    "I5",
                    f"write #{i} by {item.writer} at t={item.at:.3f} has version {doc.version}"
                    f" after version {previous}",
                )
            )
        previous = max(previous, doc.version)
        docs.append(doc)
    return docs


def _check_origin(
    history: History, docs: list[Document], outcome: Outcome, out: list[Violation]
) -> None:
    """I2: jobs come from pushes, exist once, and never come back after leaving."""
    sent = history.ids(Kind.PUSH_SENT)
    _check_lifecycles(sent, docs, out)
    counts: dict[str, int] = defaultdict(int)
    for rec in outcome.archive:
        counts[rec.id] += 1
        if rec.id not in sent:
            out.append(Violation("I2", f"archived job {rec.id} was never pushed"))
    for job_id, n in sorted(counts.items()):
        if n > 1:
            out.append(Violation("I2", f"job {job_id} is archived {n} times"))


def _check_lifecycles(sent: set[str], docs: list[Document], out: list[Violation]) -> None:
    first_seen: dict[str, tuple[int, float]] = {}
    left: dict[str, int] = {}
    done_in: dict[str, int] = {}
    present: set[str] = set()
    for doc in docs:
        now = set(doc.jobs)
        for job_id in present - now:
            left[job_id] = doc.version
        for job_id, job in doc.jobs.items():
            where = f"job {job_id} in version {doc.version}"
            if job_id not in sent:
                out.append(Violation("I2", f"{where} was never pushed"))
            if left.pop(job_id, None) is not None:
                out.append(Violation("I2", f"{where} is back ({job.status}) after it left"))
            ident = (job.seq, job.created_at.timestamp())
            if first_seen.setdefault(job_id, ident) != ident:
                out.append(Violation("I2", f"{where} was created again (seq {job.seq})"))
                first_seen[job_id] = ident
            if job_id in done_in and job.status != "done":
                out.append(
                    Violation(
                        "I2", f"{where} is {job.status} after it was done in {done_in[job_id]}"
                    )
                )
            if job.status == "done":
                done_in.setdefault(job_id, doc.version)
        present = now


def _check_completions(
    history: History, docs: list[Document], outcome: Outcome, out: list[Violation]
) -> None:
    """I3: one accepted completion per job, and the archive holds exactly what landed."""
    accepted: dict[str, set[int]] = defaultdict(set)
    for e in history.of(Kind.COMPLETE_OK):
        accepted[e.job].add(e.token)
    for job_id, tokens in sorted(accepted.items()):
        if len(tokens) > 1:
            out.append(
                Violation("I3", f"job {job_id}: completions accepted under tokens {sorted(tokens)}")
            )
    by_version = {doc.version: doc for doc in docs}
    for rec in outcome.archive:
        doc = by_version.get(rec.version)
        job = doc.jobs.get(rec.id) if doc is not None else None
        if job is None or job.status != "done" or job.done_version != rec.version:
            out.append(
                Violation(
                    "I3",
                    f"archived job {rec.id} (version {rec.version}) is not done in a version "
                    f"{rec.version} that landed",
                )
            )
            continue
        landed_token = job.claim.token if job.claim else None
        if landed_token != rec.token:
            out.append(
                Violation(
                    "I3",
                    f"archived job {rec.id}: token {rec.token} but version {rec.version} "
                    f"completed it under token {landed_token}",
                )
            )
        completed = accepted.get(rec.id)
        if completed and rec.token not in completed:
            out.append(
                Violation(
                    "I3",
                    f"job {rec.id}: archived under token {rec.token}, completion accepted "
                    f"under {sorted(completed)}",
                )
            )


def _check_tokens(history: History, docs: list[Document], out: list[Violation]) -> None:
    """I4: one holder per token; tokens move forward; stale tokens are refused."""
    holders: dict[int, tuple[str, str]] = {}
    delivered: dict[str, list[Event]] = defaultdict(list)
    for e in history.of(Kind.CLAIMED):
        other = holders.setdefault(e.token, (e.job, e.actor))
        if other != (e.job, e.actor):
            out.append(
                Violation(
                    "I4",
                    f"token {e.token} handed out twice: {other[0]} to {other[1]} and "
                    f"{e.job} to {e.actor}",
                )
            )
        delivered[e.job].append(e)
    for e in history.events:
        if e.kind not in (Kind.HEARTBEAT_OK, Kind.COMPLETE_OK, Kind.FAIL_OK, Kind.RELEASE_OK):
            continue
        newer = [c for c in delivered.get(e.job, ()) if c.token > e.token]
        if e.kind is Kind.COMPLETE_OK and newer:
            out.append(
                Violation(
                    "I4",
                    f"job {e.job}: completion under token {e.token} accepted, yet token "
                    f"{newer[0].token} was handed to {newer[0].actor}",
                )
            )
        elif any(c.seq < e.seq for c in newer):
            first = min(newer, key=lambda c: c.seq)
            out.append(
                Violation(
                    "I4",
                    f"job {e.job}: stale token {e.token} accepted ({e.kind.value}) after token "
                    f"{first.token} was handed to {first.actor}",
                )
            )
    _check_token_chain(docs, out)


def _check_token_chain(docs: Iterable[Document], out: list[Violation]) -> None:
    owner: dict[int, str] = {}
    current: dict[str, int] = {}
    retired: dict[str, set[int]] = defaultdict(set)
    for doc in docs:
        for job_id, job in doc.jobs.items():
            if job.claim is None:
                if job_id in current and job.status == "queued":
                    retired[job_id].add(current.pop(job_id))
                continue
            token = job.claim.token
            if owner.setdefault(token, job_id) != job_id:
                out.append(
                    Violation(
                        "I4",
                        f"token {token} belongs to {owner[token]} and to {job_id} "
                        f"(version {doc.version})",
                    )
                )
            held = current.get(job_id)
            if token in retired[job_id] or (held is not None and token < held):
                out.append(
                    Violation(
                        "I4",
                        f"job {job_id}: stale token {token} is current again in version "
                        f"{doc.version}",
                    )
                )
            if held is not None and held != token:
                retired[job_id].add(held)
            current[job_id] = token


def _check_no_loss(
    history: History, docs: list[Document], outcome: Outcome, out: list[Violation]
) -> None:
    """I1: every acknowledged push ends archived or dead (or cancelled, if it was)."""
    archived = {rec.id for rec in outcome.archive}
    final = outcome.final
    dead = {j.id for j in final.jobs.values() if j.status == "dead"} if final else set()
    cancelled = history.ids(Kind.CANCEL_SENT)
    for job_id in sorted(history.ids(Kind.CANCEL_OK) & archived):
        out.append(Violation("I3", f"job {job_id} was cancelled and is archived as completed"))
    for job_id in sorted(history.ids(Kind.PUSH_ACK)):
        if job_id in archived or job_id in dead or job_id in cancelled:
            continue
        state = "absent from the last version"
        if final is not None and job_id in final.jobs:
            job = final.jobs[job_id]
            state = f"{job.status} (attempts {job.attempts}) in version {final.version}"
        elif not any(job_id in d.jobs for d in docs):
            state = "never in any version that landed"
        out.append(Violation("I1", f"acknowledged job {job_id} is lost: {state}"))
