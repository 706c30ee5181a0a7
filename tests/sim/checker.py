"""The history checker: judges a run by every :class:`~sim.history.Rule`.

``check(history, landed, outcome)`` returns one :class:`~sim.history.Violation`
per finding, each naming its rule.  The rules read two kinds of evidence:

* the **answers** the clients got (``history``): what was acknowledged,
  delivered and accepted, in the order the broker produced it;
* the **chain** of document versions that landed (``landed``), and the
  archive and payload objects at the end (``outcome``).

``check(..., disabled={Rule.X})`` drops one rule's findings: the mutation test
(``tests/simulation/test_sim_checker.py``) turns each rule off in turn and
shows that the history broken for that rule then passes, so no rule is dead
weight hidden behind another.  The rules of claims and counters (I3's
counters, I6 to I9) are in :mod:`sim.claims`, those of segment objects (I13)
in :mod:`sim.segment_rules`; a job spilled to a segment counts as in its
version for every rule.
"""

from __future__ import annotations

import re
from collections import Counter, defaultdict
from collections.abc import Collection, Iterable

from osqueue.errors import CorruptDocument
from osqueue.state import Document, StoredJob, decode
from sim.aside_rules import check_asides
from sim.claims import check_attempts, check_claim_order, check_counters, check_keys
from sim.dead_rules import check_dead, retried_from_dead
from sim.delayed_rules import check_delays_kept, check_not_late
from sim.findings import Chain, Findings, build_chain, dead_spilled, live_spilled
from sim.history import Event, History, Kind, Outcome, Rule, Violation
from sim.results import check_results
from sim.scheduling_rules import check_limits, check_parents, check_ticks, ticked_ids
from sim.segment_rules import check_segments, decode_objects
from sim.store import Landed
from sim.waiting_rules import check_waiting, count_sealed_parents, decode_sealed, decode_waiting

#: the answers a holder gets for presenting its token
_HOLDER_KINDS = (Kind.HEARTBEAT_OK, Kind.COMPLETE_OK, Kind.FAIL_OK, Kind.RELEASE_OK)


def check(
    history: History,
    landed: list[Landed],
    outcome: Outcome,
    *,
    disabled: Collection[Rule] = (),
) -> list[Violation]:
    """Every finding of every rule not in ``disabled``."""
    return judge(history, landed, outcome, disabled=disabled).violations


def judge(
    history: History,
    landed: list[Landed],
    outcome: Outcome,
    *,
    disabled: Collection[Rule] = (),
) -> Findings:
    """:func:`check`, with the counts of what the rules looked at."""
    f = Findings(disabled)
    docs, indices = _decode_versions(landed, f)
    objects = decode_objects(outcome, f)
    waiting = decode_waiting(outcome, f)  # waiting children and the sealed record (I14)
    sealed = decode_sealed(outcome, f)
    chain = build_chain(docs, {**objects, **waiting})
    f.checked["versions"] += len(chain.docs)
    # a schedule's jobs are pushed by the commit that records their tick (I10)
    sent = history.ids(Kind.PUSH_SENT) | ticked_ids(chain)
    _check_lifecycles(sent, chain, f)
    _check_archive(sent, chain, outcome, f)
    _check_completions(history, chain, outcome, f)
    _check_cancels(history, chain, outcome, f)
    check_counters(chain, outcome, f)
    _check_delivered_tokens(history, f)
    _check_durable_claims(history, chain, f)
    _check_token_chain(chain.docs, f)
    orphaned = check_parents(history, chain, outcome, f)
    _check_no_loss(history, chain, outcome, f, orphaned)
    _check_payloads(outcome, f)
    _check_payload_reads(chain, f)
    check_keys(chain, f)
    check_attempts(chain, f)
    check_claim_order(history, chain, f)
    check_delays_kept(chain, f)
    check_not_late(chain, [landed[i] for i in indices], outcome, f)
    check_results(history, chain, outcome, f, sealed)
    check_ticks(chain, outcome, f)
    check_limits(chain, f)
    check_segments(chain, indices, objects, outcome, f)
    check_dead(history, chain, objects, f)
    check_waiting(chain, waiting, sealed, f)
    check_asides(chain, f)
    count_sealed_parents(history, chain, sealed, f)
    return f


# --------------------------------------------------------------------------- I5


def _decode_versions(landed: list[Landed], f: Findings) -> tuple[list[Document], list[int]]:
    """VERSION_DECODES and VERSION_ORDER; the versions that decode, in landing order,
    and where each is among the writes that landed."""
    docs: list[Document] = []
    indices: list[int] = []
    for i, item in enumerate(landed):
        try:
            doc = decode(item.data)
        except CorruptDocument as exc:
            f.add(Rule.VERSION_DECODES, f"write #{i} by {item.writer} does not decode: {exc}")
            continue
        if docs and doc.version != docs[-1].version + 1:
            f.add(
                Rule.VERSION_ORDER,
                f"write #{i} by {item.writer} at t={item.at:.3f} has version {doc.version}"
                f" after version {docs[-1].version}",
            )
        docs.append(doc)
        indices.append(i)
    return docs, indices


# --------------------------------------------------------------------------- I2


def _check_lifecycles(sent: set[str], chain: Chain, f: Findings) -> None:
    """PUSHED_FIRST, NOT_RECREATED, NOT_REVIVED and DONE_IS_FINAL over the chain."""
    ident: dict[str, tuple[int, float]] = {}
    gone: set[str] = set()
    done_in: dict[str, int] = {}
    told: set[tuple[Rule, str]] = set()  # one finding per rule and job

    def once(rule: Rule, job_id: str, message: str) -> None:
        if (rule, job_id) not in told:
            told.add((rule, job_id))
            f.add(rule, message)

    present: set[str] = set()
    refs: set[str] = set()
    last: dict[str, str] = {}  # job id -> its status in the last version that held it
    for doc in chain.docs:
        spilled = chain.spilled_in(doc)
        now = set(doc.jobs) | set(spilled)
        gone |= present - now
        for job_id, job in [*doc.jobs.items(), *spilled.items()]:
            if job.payload_ref is not None:
                refs.add(job.payload_ref)
            where = f"job {job_id} in version {doc.version}"
            if job_id not in sent:
                once(Rule.PUSHED_FIRST, job_id, f"{where} was never pushed")
            mine = (job.seq, job.created_at.timestamp())
            known = ident.setdefault(job_id, mine)
            if known != mine and retried_from_dead(last.get(job_id), job, known):
                ident[job_id] = known = mine  # fresh seqs of a dead segment's retry
            last[job_id] = job.status
            if known != mine:
                f.add(
                    Rule.NOT_RECREATED,
                    f"{where} was created again: (seq, created_at) {known} -> {mine}",
                )
                ident[job_id] = mine
                done_in.pop(job_id, None)
            elif job_id in gone:
                f.add(Rule.NOT_REVIVED, f"{where} is back ({job.status}) after it left")
            gone.discard(job_id)
            if job_id in done_in and job.status != "done":
                once(
                    Rule.DONE_IS_FINAL,
                    job_id,
                    f"{where} is {job.status} after it was done in {done_in[job_id]}",
                )
            if job.status == "done":
                done_in.setdefault(job_id, doc.version)
        present = now
    f.checked["payload objects"] += len(refs)


def _check_archive(sent: set[str], chain: Chain, outcome: Outcome, f: Findings) -> None:
    """ARCHIVED_ONCE, PUSHED_FIRST, ARCHIVE_VERSION and ARCHIVE_TOKEN over the archive."""
    counts = Counter(rec.id for rec in outcome.archive)
    for job_id, n in sorted(counts.items()):
        if n > 1:
            f.add(Rule.ARCHIVED_ONCE, f"job {job_id} is archived {n} times")
    by_version = {doc.version: doc for doc in chain.docs}
    for rec in outcome.archive:
        if rec.id not in sent:
            f.add(Rule.PUSHED_FIRST, f"archived job {rec.id} was never pushed")
        doc = by_version.get(rec.version)
        job = doc.jobs.get(rec.id) if doc is not None else None
        if job is None or job.status != "done" or job.done_version != rec.version:
            f.add(
                Rule.ARCHIVE_VERSION,
                f"archived job {rec.id} (version {rec.version}) is not done in a version "
                f"{rec.version} that landed",
            )
            continue
        landed_token = job.claim.token if job.claim else None
        if landed_token != rec.token:
            f.add(
                Rule.ARCHIVE_TOKEN,
                f"archived job {rec.id}: token {rec.token} but version {rec.version} "
                f"completed it under token {landed_token}",
            )


# --------------------------------------------------------------------------- I3


def _check_completions(history: History, chain: Chain, outcome: Outcome, f: Findings) -> None:
    """ONE_COMPLETION and DURABLE_COMPLETION."""
    tokens: dict[str, set[int]] = defaultdict(set)
    told: set[tuple[str, int]] = set()
    for e in history.of(Kind.COMPLETE_OK):
        tokens[e.job].add(e.token)
        if (e.job, e.token) not in chain.done_under and (e.job, e.token) not in told:
            told.add((e.job, e.token))
            f.add(
                Rule.DURABLE_COMPLETION,
                f"{e.actor}'s completion of {e.job} under token {e.token} was accepted, but "
                "no version that landed has the job done under that token",
            )
    for rec in outcome.archive:
        if rec.token is not None:
            tokens[rec.id].add(rec.token)
    for job_id, held in sorted(tokens.items()):
        if len(held) > 1:
            f.add(
                Rule.ONE_COMPLETION,
                f"job {job_id}: completed under tokens {sorted(held)} (accepted answers "
                "and archive lines)",
            )


def _check_cancels(history: History, chain: Chain, outcome: Outcome, f: Findings) -> None:
    """CANCEL_DURABLE: an accepted cancel removed the job from a version that landed."""
    archived = {rec.id for rec in outcome.archive}
    f.checked["cancels"] += len(history.ids(Kind.CANCEL_OK))
    for job_id in sorted(history.ids(Kind.CANCEL_OK)):
        if job_id in archived:
            f.add(Rule.CANCEL_DURABLE, f"job {job_id} was cancelled and is archived as completed")
        elif job_id not in chain.left_undone:
            f.add(
                Rule.CANCEL_DURABLE,
                f"the cancel of {job_id} was accepted, but no version that landed removed it "
                "before it was done",
            )


# --------------------------------------------------------------------------- I4


def _check_delivered_tokens(history: History, f: Findings) -> None:
    """TOKEN_ONE_HOLDER and STALE_TOKEN, from the answers alone."""
    holders: dict[int, tuple[str, str]] = {}
    delivered: dict[str, list[Event]] = defaultdict(list)
    for e in history.of(Kind.CLAIMED):
        other = holders.setdefault(e.token, (e.job, e.actor))
        if other != (e.job, e.actor):
            f.add(
                Rule.TOKEN_ONE_HOLDER,
                f"token {e.token} handed out twice: {other[0]} to {other[1]} and "
                f"{e.job} to {e.actor}",
            )
        delivered[e.job].append(e)
    for e in history.events:
        if e.kind not in _HOLDER_KINDS:
            continue
        newer = [c for c in delivered.get(e.job, ()) if c.token > e.token and c.seq < e.seq]
        if newer:
            first = min(newer, key=lambda c: c.seq)
            f.add(
                Rule.STALE_TOKEN,
                f"job {e.job}: stale token {e.token} accepted ({e.kind.value} from {e.actor}) "
                f"after token {first.token} was handed to {first.actor}",
            )


def _check_durable_claims(history: History, chain: Chain, f: Findings) -> None:
    """DURABLE_CLAIM: no claim is answered from a write that did not land.

    One exception, exact: a claim and a cancel of the same job in one batch.  The
    version that landed allocated the token and removed the job in one step, so
    no version holds the claim; the cancel must have been sent.
    """
    cancelled = history.ids(Kind.CANCEL_SENT)
    for e in history.of(Kind.CLAIMED):
        if (e.job, e.token) in chain.held:
            continue
        if e.job in cancelled and any(
            before <= e.token < after for _, before, after in chain.left_undone.get(e.job, ())
        ):
            continue
        f.add(
            Rule.DURABLE_CLAIM,
            f"{e.actor} was handed {e.job} under token {e.token}, which no version "
            "that landed ever held (answered from a write that did not land)",
        )


def _check_token_chain(docs: Iterable[Document], f: Findings) -> None:
    """CHAIN_TOKEN_OWNER and CHAIN_TOKEN_FORWARD over the landed versions."""
    owner: dict[int, str] = {}
    current: dict[str, int] = {}
    retired: dict[str, set[int]] = defaultdict(set)
    told: set[tuple[int, str]] = set()
    for doc in docs:
        for job_id, job in doc.jobs.items():
            if job.claim is None:
                if job_id in current and job.status == "queued":
                    retired[job_id].add(current.pop(job_id))
                continue
            token = job.claim.token
            if owner.setdefault(token, job_id) != job_id and (token, job_id) not in told:
                told.add((token, job_id))
                f.add(
                    Rule.CHAIN_TOKEN_OWNER,
                    f"token {token} belongs to {owner[token]} and to {job_id} "
                    f"(version {doc.version})",
                )
            held = current.get(job_id)
            if token in retired[job_id] or (held is not None and token < held):
                f.add(
                    Rule.CHAIN_TOKEN_FORWARD,
                    f"job {job_id}: stale token {token} is current again in version {doc.version}",
                )
            if held is not None and held != token:
                retired[job_id].add(held)
            current[job_id] = token


# --------------------------------------------------------------------------- I1


def _check_no_loss(
    history: History,
    chain: Chain,
    outcome: Outcome,
    f: Findings,
    orphaned: Collection[str] = (),
) -> None:
    """NO_LOSS: every acknowledged push ends archived, dead, or cancelled (by a cancel
    sent, or by a parent that failed: ``orphaned``, judged by PARENT_FAILURE)."""
    archived = {rec.id for rec in outcome.archive}
    final = outcome.final
    dead = {j.id for j in final.jobs.values() if j.status == "dead"} if final else set()
    if final is not None and final.dead:  # in dead segments
        dead |= set(dead_spilled(final, _objects_of(outcome)))
    cancelled = history.ids(Kind.CANCEL_SENT) & set(chain.left_undone)
    for job_id in sorted(history.ids(Kind.PUSH_ACK)):
        if job_id in archived or job_id in dead or job_id in cancelled or job_id in orphaned:
            continue
        state = "absent from the last version"
        if final is not None and job_id in final.jobs:
            job = final.jobs[job_id]
            state = f"{job.status} (attempts {job.attempts}) in version {final.version}"
        elif final is not None and job_id in chain.spilled_in(final):
            state = f"still in a segment in version {final.version}"
        elif job_id not in chain.first_seen:
            state = "never in any version that landed"
        elif job_id in chain.left_undone:
            state = "it left the document undone, and nobody cancelled it"
        f.add(Rule.NO_LOSS, f"acknowledged job {job_id} is lost: {state}")


def _check_payloads(outcome: Outcome, f: Findings) -> None:
    """PAYLOAD_KEPT: a job in the last version can still be delivered."""
    final = outcome.final
    if final is None:
        return
    cold = final.segments or final.delayed
    spilled = live_spilled(final, _objects_of(outcome)) if cold else {}
    for job_id, job in sorted([*final.jobs.items(), *spilled.items()]):
        ref = job.payload_ref
        if ref is not None and ref not in outcome.payload_objects:
            f.add(Rule.PAYLOAD_KEPT, f"job {job_id} ({job.status}) lost its payload object {ref}")


#: the error a claim fails a job with when its payload object is gone
#: (:class:`osqueue.broker.objects.payloads.BadPayload`, ``missing``)
_MISSING_PAYLOAD = re.compile(r"payload object (\S+) of job \S+ is missing")


def _check_payload_reads(chain: Chain, f: Findings) -> None:
    """PAYLOAD_KEPT, on the way: no claim found a job's payload object missing.

    A claim that finds its job's object gone fails the job (with an error naming
    the object) unless the job left meanwhile (it was cancelled, and its object
    deleted with it).  So a landed version holding a job failed that way means the
    object went while the job lived: no fault the simulator injects deletes an
    object (it loses answers and delays writes, never data), so nothing but a bug
    of the broker (a sweep, a delete after a commit) explains it."""
    told: set[str] = set()
    for doc in chain.docs:
        for job_id, job in doc.jobs.items():
            error = job.last_error
            if error is None or job_id in told or not error.startswith("payload object "):
                continue
            missing = _MISSING_PAYLOAD.match(error)
            if missing is not None:
                told.add(job_id)
                f.add(
                    Rule.PAYLOAD_KEPT,
                    f"job {job_id} ({job.status}, version {doc.version}) was failed by a claim "
                    f"that found its payload object {missing[1]} missing",
                )


def _objects_of(outcome: Outcome) -> dict[str, list[StoredJob]]:
    """The segment objects written, decoded (quietly: the segment rules report those
    that do not decode)."""
    return decode_objects(outcome, Findings(set(Rule)))
