"""The checker's rules of waiting children in objects and the sealed record of
finished jobs, and the cold jobs and entries every other rule counts as present.

The objects come from the store's record of every put (``waiting/`` and
``finished/`` keys are recorded with the segments':
:attr:`sim.history.Outcome.segment_puts`).

* A waiting child in a referenced ``waiting/`` object (not cancelled there) is
  in its version (``live_waiting``): a spill is no departure, and a child that
  goes cold and never comes back is lost (NO_LOSS); ``PARENTS_FIRST`` judges
  its claims as any other's.
* ``WAITING_ONE_PLACE``: no version holds a live job both in its document and in
  a referenced object, or in two referenced objects.
* ``SEALED_KEPT``: an entry of the record that leaves the document into a sealed
  object is in that object exactly as the document held it (the result read
  back is the one given); ``RESULT_KEPT`` counts it as kept from then on.
* A push naming a parent whose entry had left the document into a sealed object
  (the broker read the object to place the child) is counted ("children of
  sealed parents": :func:`count_sealed_parents`); ``PARENTS_FIRST`` judges
  those children's claims as any other's.
* Deletes of ``waiting/`` and ``finished/`` objects fall under
  ``SEGMENT_DELETED_UNREFERENCED`` (:func:`sim.findings.cold_keys`).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping

import msgspec

from osqueue.broker import BrokerConfig
from osqueue.errors import CorruptDocument
from osqueue.state import Document, FinishedJob, StoredJob
from osqueue.state.finished_refs import FINISHED_PREFIX
from osqueue.state.segment_codec import SegmentLines
from osqueue.state.waiting_refs import WAITING_PREFIX
from sim.config import SimConfig
from sim.findings import Chain, Findings
from sim.history import History, Kind, Outcome, Rule

_entry = msgspec.json.Decoder(FinishedJob)


def broker_knobs(c: SimConfig) -> dict[str, object]:
    """The ``BrokerConfig`` fields a run's waiting and sealing thresholds set."""
    knobs: dict[str, object] = {}
    if c.waiting_spill_above_jobs is not None:
        knobs.update(
            waiting_spill_above_jobs=c.waiting_spill_above_jobs,
            waiting_object_jobs=c.waiting_object_jobs,
            waiting_load_below_queued=c.waiting_load_below_queued,
        )
    if c.finished_seal_above_entries is not None:
        knobs.update(
            finished_seal_above_entries=c.finished_seal_above_entries,
            finished_object_entries=c.finished_object_entries,
        )
    return knobs


def with_knobs(config: BrokerConfig, c: SimConfig) -> BrokerConfig:
    knobs = broker_knobs(c)
    return dataclasses.replace(config, **knobs) if knobs else config  # type: ignore[arg-type]


def decode_waiting(outcome: Outcome, f: Findings) -> dict[str, list[StoredJob]]:
    """Every ``waiting/`` object written, decoded (one that does not is a finding)."""
    out: dict[str, list[StoredJob]] = {}
    for key, (_, data) in sorted(outcome.segment_puts.items()):
        if not key.startswith(WAITING_PREFIX):
            continue
        try:
            lines = SegmentLines.parse(data, key)
            out[key] = lines.jobs(0, len(lines))
        except CorruptDocument as exc:
            f.add(Rule.SEGMENT_WRITTEN, f"object {key} does not decode: {exc}")
    f.checked["waiting objects"] += len(out)
    return out


def decode_sealed(outcome: Outcome, f: Findings) -> dict[str, dict[str, FinishedJob]]:
    """Every ``finished/`` object written, decoded by entry id."""
    out: dict[str, dict[str, FinishedJob]] = {}
    for key, (_, data) in sorted(outcome.segment_puts.items()):
        if not key.startswith(FINISHED_PREFIX):
            continue
        try:
            out[key] = {e.id: e for e in map(_entry.decode, data.splitlines())}
        except msgspec.MsgspecError as exc:
            f.add(Rule.SEGMENT_WRITTEN, f"object {key} does not decode: {exc}")
    f.checked["sealed objects"] += len(out)
    return out


def live_waiting(doc: Document, objects: Mapping[str, list[StoredJob]]) -> dict[str, StoredJob]:
    """The jobs ``doc``'s objects of waiting children hold (not cancelled), by id."""
    out: dict[str, StoredJob] = {}
    for ref in doc.waiting_cold:
        cancelled = set(ref.cancelled)
        for job in objects.get(ref.key, ()):
            if job.id not in cancelled:
                out.setdefault(job.id, job)
    return out


def sealed_entry(
    doc: Document, job_id: str, sealed: Mapping[str, Mapping[str, FinishedJob]]
) -> FinishedJob | None:
    """``job_id``'s entry in an object ``doc`` references, if one holds it."""
    for ref in doc.finished.sealed:
        entry = sealed.get(ref.key, {}).get(job_id)
        if entry is not None:
            return entry
    return None


def check_waiting(
    chain: Chain,
    objects: Mapping[str, list[StoredJob]],
    sealed: Mapping[str, Mapping[str, FinishedJob]],
    f: Findings,
) -> None:
    """WAITING_ONE_PLACE and SEALED_KEPT over the chain."""
    told: set[str] = set()
    for doc in chain.docs:
        where: dict[str, str] = {}
        for ref in doc.waiting_cold:
            f.checked["waiting references"] += 1
            cancelled = set(ref.cancelled)
            for job in objects.get(ref.key, ()):
                if job.id in cancelled or job.id in told:
                    continue
                place = where.setdefault(job.id, ref.key)
                if job.id in doc.jobs or place != ref.key:
                    told.add(job.id)
                    other = "the document" if job.id in doc.jobs else place
                    f.add(
                        Rule.WAITING_ONE_PLACE,
                        f"version {doc.version}: job {job.id} is in {ref.key} and in {other}",
                    )
    for before, after in chain.steps:
        new = [r for r in after.finished.sealed if not before.finished.sealed.holds(r.key)]
        for sealed_ref in new:
            entries = sealed.get(sealed_ref.key, {})
            f.checked["sealed entries"] += len(entries)
            for job_id, entry in entries.items():
                held = before.finished.get(job_id)
                if held != entry or job_id in after.finished:
                    f.add(
                        Rule.SEALED_KEPT,
                        f"version {after.version} sealed {sealed_ref.key} with job {job_id}'s "
                        f"entry {entry!r}, but version {before.version} held {held!r}"
                        + (" and it stayed in the document" if job_id in after.finished else ""),
                    )


def count_sealed_parents(
    history: History, chain: Chain, sealed: Mapping[str, Mapping[str, FinishedJob]], f: Findings
) -> None:
    """Count the children placed by a version whose previous version held one of
    their parents only in a sealed object (neither a job nor an entry of its own)."""
    parents = {e.job: e.after for e in history.of(Kind.PUSH_SENT) if e.after}
    if not parents:
        return
    for before, after in chain.steps:
        if not before.finished.sealed:
            continue
        for job_id in after.jobs.keys() - before.jobs.keys():
            for parent in parents.get(job_id, ()):
                known = parent in before.jobs or parent in before.finished
                if not known and sealed_entry(before, parent, sealed) is not None:
                    f.checked["children of sealed parents"] += 1
                    break
