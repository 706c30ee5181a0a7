"""Results in the simulation: what workers complete with, and the ``result-kept`` rule.

Workers complete every job with :func:`sim_result` of its id and claim token:
text, JSON, or bytes large enough to go to a result object, chosen by a hash
of the id (no draw from the run's random stream, so seeds replay as before).
Some jobs are pushed with a short ``result_ttl_s`` (:func:`sim_ttl`) so
entries expire and are pruned within a run.

The rule (:attr:`Rule.RESULT_KEPT <sim.history.Rule.RESULT_KEPT>`, I3,
``result-kept``): for every completion the broker accepted, with
the result it carried (the ``COMPLETE_OK`` event's ``result``),

* every landed version from the first where the job is done under that token
  holds the job's entry with exactly that result (inline, or a reference to a
  result object of the job), until the entry is gone for a reason the
  document shows: it expired (its expiry is not after the version's
  ``lease_until``, which is at least the pruning broker's clock), or that
  version counts an eviction (``stats.finished_evicted`` grew), or the job is
  live again (another rule judges that);
* an entry of the last version that references a result object finds that
  object at the end of the run, holding exactly the completion's bytes.

So a completed job's result is readable until its TTL, across failovers, and
equals what its one accepted completion carried.
"""

from __future__ import annotations

import zlib
from collections.abc import Iterable, Mapping

from osqueue.api import EncodedResult
from osqueue.state import Document, FinishedJob
from sim.findings import Chain, Findings
from sim.history import Event, History, Kind, Outcome, Rule
from sim.waiting_rules import sealed_entry

#: results of 1/4 of the jobs are larger than the broker's inline limit (1 KiB)
LARGE_BYTES = 1500
#: 1/3 of the jobs keep their results only this long
SHORT_TTL_S = 6.0


def _bucket(job_id: str, n: int) -> int:
    return zlib.crc32(job_id.encode()) % n


def sim_result(job_id: str, token: int) -> EncodedResult:
    """The result a worker completes ``job_id`` with under ``token``."""
    mark = f"{job_id}@{token}"
    kind = _bucket(job_id, 4)
    if kind == 0:
        return EncodedResult("text", mark.encode())
    if kind == 1:
        return EncodedResult("json", b'{"job":"%s","n":%d}' % (mark.encode(), token))
    if kind == 2:
        return EncodedResult("bytes", (mark.encode() + b"|") * (LARGE_BYTES // len(mark) + 1))
    return EncodedResult("bytes", b"\x00" + mark.encode())


def sim_ttl(job_id: str) -> float | None:
    """The ``result_ttl_s`` ``job_id`` is pushed with (None: the broker's default)."""
    return SHORT_TTL_S if _bucket(job_id[::-1], 3) == 0 else None


def _matches(entry: FinishedJob, result: EncodedResult) -> bool:
    data = entry.result
    if data is None or data.kind != result.kind or data.size != len(result.data):
        return False
    if data.value is not None:
        return data.value == result.data
    return data.ref is not None and data.ref.startswith(f"results/{entry.id}=")


def check_results(
    history: History,
    chain: Chain,
    outcome: Outcome,
    f: Findings,
    sealed: Mapping[str, Mapping[str, FinishedJob]] | None = None,
) -> None:
    """The ``result-kept`` rule over the versions that landed, in landing order
    (``sealed``: the sealed objects written, by key, their entries by id: an entry
    in an object a version references is in that version)."""
    accepted = [e for e in history.of(Kind.COMPLETE_OK) if e.result is not None]
    f.checked["results"] += len(accepted)
    for event in accepted:
        _check_kept(event, chain.docs, f, sealed or {})
    if chain.docs:
        _check_objects(chain.docs[-1], {e.job: e for e in accepted}, outcome.result_objects, f)


def _check_kept(
    event: Event,
    docs: Iterable[Document],
    f: Findings,
    sealed: Mapping[str, Mapping[str, FinishedJob]],
) -> None:
    assert event.result is not None
    job_id = event.job
    previous: Document | None = None  # the version before ``doc``
    entry: FinishedJob | None = None  # the job's entry as ``previous`` held it
    started = False
    for doc in docs:
        if not started:
            job = doc.jobs.get(job_id)
            claim = job.claim if job is not None and job.status == "done" else None
            started = claim is not None and claim.token == event.token
        if started:
            current = doc.finished.get(job_id)
            if current is None and doc.finished.sealed:
                current = sealed_entry(doc, job_id, sealed)
            if current is None:
                if not _gone_for_a_reason(job_id, entry, previous, doc):
                    f.add(Rule.RESULT_KEPT, _lost(event, doc, entry))
                return
            if not _matches(current, event.result):
                f.add(
                    Rule.RESULT_KEPT,
                    f"job {job_id}'s entry in version {doc.version} holds {current.result!r}, "
                    f"not the {event.result.kind} result its accepted completion (token "
                    f"{event.token}) carried",
                )
                return
            entry = current
        previous = doc


def _gone_for_a_reason(
    job_id: str, entry: FinishedJob | None, previous: Document | None, doc: Document
) -> bool:
    """No entry in ``doc`` for a reason it shows: an eviction counted in it, the
    entry's expiry (not after ``doc``'s lease time, at least its broker's clock),
    or the job living again."""
    if previous is not None and doc.stats.finished_evicted > previous.stats.finished_evicted:
        return True
    if entry is None:  # done in this version without an entry
        return False
    if doc.broker is not None and entry.expires_at <= doc.broker.lease_until.timestamp():
        return True
    job = doc.jobs.get(job_id)
    return job is not None and job.status in ("queued", "claimed")


def _lost(event: Event, doc: Document, entry: FinishedJob | None) -> str:
    if entry is None:
        return (
            f"job {event.job} is done in version {doc.version} under token {event.token} "
            "but the record of finished jobs has no entry for it"
        )
    return (
        f"job {event.job}'s result left the record in version {doc.version}, before its "
        f"TTL ran out (expires {entry.expires_at:.3f}) and with no eviction counted"
    )


def _check_objects(
    final: Document,
    accepted: Mapping[str, Event],
    result_objects: Mapping[str, bytes],
    f: Findings,
) -> None:
    for entry in final.finished:
        ref = entry.result.ref if entry.result is not None else None
        if ref is None:
            continue
        data = result_objects.get(ref)
        event = accepted.get(entry.id)
        if data is None:
            f.add(Rule.RESULT_KEPT, f"job {entry.id}'s result object {ref} is gone")
        elif event is not None and event.result is not None and data != event.result.data:
            f.add(
                Rule.RESULT_KEPT,
                f"job {entry.id}'s result object {ref} does not hold what its accepted "
                "completion carried",
            )
