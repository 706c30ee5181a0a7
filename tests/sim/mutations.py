"""Bugs planted in the real code, one at a time: the seeds must catch each.

The checker's own tests (``tests/simulation/test_sim_checker.py``) show that
every rule fires on a history broken its way.  That does not show the
simulator drives the real code into the situations the rules guard.  So each
:class:`Mutation` here is a small text patch of ``src/osqueue`` that models
a bug someone could write (the family of invariants it breaks, and what it
models, in words); ``python -m sim.mutate`` (``make mutate``) applies each to
a copy of the package, runs the 600 default seeds against it, and counts the
seeds whose run the checker failed.  Every mutation must be killed by at
least :data:`MIN_KILLS` seeds: one that is not is a gap in the simulator's
fault mix or in the checker, to be closed, not a mutation to drop.

A mutation's ``original`` must occur exactly once in its file, or the run
fails loudly (the list cannot rot silently as the code moves: re-point the
snippet, keeping what it models).  Keep snippets small.
"""

from __future__ import annotations

from dataclasses import dataclass

#: a mutation caught by fewer of the default seeds is a gap to close
MIN_KILLS = 10


@dataclass(frozen=True, slots=True)
class Mutation:
    #: a short stable name (the table's row, ``--only``)
    name: str
    #: the file it patches, relative to ``src/osqueue``
    file: str
    #: the exact text replaced (must occur once in ``file``)
    original: str
    replacement: str
    #: the invariant family it breaks (docs/reliability.md)
    family: str
    #: the bug it models, in words (what to re-point it to when the code moves)
    models: str


MUTATIONS: tuple[Mutation, ...] = (
    # ------------------------------------------------------------ fencing (I4)
    Mutation(
        name="stale-token-complete",
        file="state/transitions.py",
        original=(
            "            finishing.check_result(op.result, op.job_id, self.policy)\n"
            "        job = self._held(op.job_id, op.token)\n"
        ),
        replacement=(
            "            finishing.check_result(op.result, op.job_id, self.policy)\n"
            "        held = self.doc.jobs.get(op.job_id)\n"
            "        job = self._held(op.job_id, held.claim.token if held and held.claim"
            " else op.token)\n"
        ),
        family="fencing tokens",
        models="complete accepts any token of a claimed job (a stale holder completes it)",
    ),
    # ------------------------------------------------------------ archive (I1, I2)
    Mutation(
        name="archive-key-per-write",
        file="broker/archive/objects.py",
        original="    return archive_key(first.done_version, first.done_at, queue_id), body\n",
        replacement=(
            "    unique = __import__('os').urandom(8).hex()\n"
            "    key = archive_key(first.done_version, first.done_at, queue_id)\n"
            "    return key.replace('.jsonl', f'-{unique}.jsonl'), body\n"
        ),
        family="archive exactly once",
        models="the archive key is unique per write, so a repeated write is not deduplicated",
    ),
    Mutation(
        name="archive-409-as-exists",
        file="broker/archive/objects.py",
        original=(
            "        try:\n            held = await storage.get(key)\n        except NotFound:\n"
        ),
        replacement="        try:\n            return True\n        except NotFound:\n",
        family="archive exactly once",
        models="a 409 on the create-if-absent archive write is taken as 'the object exists'",
    ),
    # ------------------------------------------------------------ dedupe (I2)
    Mutation(
        name="finished-record-ignored-on-push",
        file="state/transitions.py",
        original="        if op.id in doc.jobs or op.id in doc.recent:\n",
        replacement="        if op.id in doc.jobs:\n",
        family="pushes applied once",
        models="a retried push of a job that already finished is not found in the "
        "recently-finished tombstones, and runs again",
    ),
    # ------------------------------------------------------------ limits (I11)
    Mutation(
        name="paused-ignored-at-claim",
        file="state/limits.py",
        original="    if s.paused:\n        return 0.0\n",
        replacement="    if s.paused and False:\n        return 0.0\n",
        family="queue limits",
        models="a paused queue still gives jobs to claims",
    ),
    Mutation(
        name="rate-budget-off-by-one",
        file="state/limits.py",
        original="        budget = float(math.floor(tokens_at(s, now) + 1e-9))\n",
        replacement="        budget = float(math.floor(tokens_at(s, now) + 1e-9) + 1)\n",
        family="queue limits",
        models="a claim may take one job more than the rate bucket holds",
    ),
    Mutation(
        name="max-claimed-off-by-one",
        file="state/limits.py",
        original="        room = float(max(0, s.max_claimed - claimed))\n",
        replacement="        room = float(max(0, s.max_claimed + 1 - claimed))\n",
        family="queue limits",
        models="max_claimed lets one job more be claimed at once",
    ),
    # ------------------------------------------------------------ dependencies (I12)
    Mutation(
        name="child-released-after-first-parent",
        file="state/deps.py",
        original="            if rest:\n",
        replacement="            if rest and False:\n",
        family="dependencies",
        models="a waiting child is released when its first parent finishes, not its last",
    ),
    Mutation(
        name="failed-parent-releases-child",
        file="state/deps.py",
        original='            if outcome != "done" and child.on_parent_failure == "cancel":\n',
        replacement='            if outcome != "done" and child.on_parent_failure == "never":\n',
        family="dependencies",
        models="a dead or cancelled parent releases its on_parent_failure=cancel child",
    ),
    # ------------------------------------------------------------ group commit (I3, I4)
    Mutation(
        name="commit-answers-last-attempt",
        file="broker/core/commit.py",
        original=(
            "            landed = next((tx for data, tx in sent if data == verdict.data), None)\n"
        ),
        replacement=(
            "            landed = sent[-1][1] if any(d == verdict.data for d, _ in sent)"
            " else None\n"
        ),
        family="group commit: unknown outcomes",
        models="after a failed write, the answers come from the last attempt instead of "
        "the one that landed (seed 331's bug)",
    ),
    Mutation(
        name="commit-takes-other-version-as-own",
        file="broker/lease/hold.py",
        original="        if mine and stored.version == new_version:\n",
        replacement="        if stored.version == new_version:\n",
        family="group commit: unknown outcomes",
        models="reading back after a failed write, another broker's version of the same "
        "number is taken for our own write that landed",
    ),
    # ------------------------------------------------------------ leases and takeover
    Mutation(
        name="takeover-skips-inherited-archive",
        file="broker/lease/hold.py",
        original=(
            "                await archiver.write_inherited(inherited, archived, incarnation)\n"
        ),
        replacement="                pass\n",
        family="leases and takeover",
        models="a broker taking over prunes the done jobs it inherits without writing "
        "their archive objects",
    ),
    # ------------------------------------------------------------ payloads and sweeps (I1)
    Mutation(
        name="payload-sweep-ignores-spilled",
        file="broker/objects/payloads.py",
        original="        return key not in doc.segments.payloads\n",
        replacement="        return True\n",
        family="payload objects and sweeps",
        models="the payload sweep takes the objects of jobs spilled to segments for orphans",
    ),
    # ------------------------------------------------------------ segments (I13)
    Mutation(
        name="claim-crosses-segment-barrier",
        file="state/order.py",
        original="    return entry is None or entry > barrier\n",
        replacement="    return entry is None\n",
        family="segments: order",
        models="a claim takes a job behind a segment not loaded yet (spilled jobs are passed over)",
    ),
    Mutation(
        name="load-ignores-spilled-cancels",
        file="state/spill.py",
        original=(
            "        if job.id in cancelled:  # it leaves: its tombstone "
            "(its filter answered so far)\n"
        ),
        replacement="        if job.id in cancelled and False:\n",
        family="segments: load",
        models="a cancel of a spilled job is forgotten when its segment is loaded",
    ),
    Mutation(
        name="compaction-drops-a-line",
        file="state/segment_codec.py",
        original="    return _join(header, [line for obj in objects for line in obj.lines])\n",
        replacement=(
            "    return _join(header, [line for i, obj in enumerate(objects)"
            " for line in (obj.lines[:-1] if i == 0 else obj.lines)])\n"
        ),
        family="segments: compaction",
        models="a merge of adjacent segments writes its object without the last job of its "
        "first part (the reference still counts it)",
    ),
    # ------------------------------------------------------------ dead segments (I15)
    Mutation(
        name="dead-retry-keeps-its-segment",
        file="state/cold_dead.py",
        original="    doc.dead.swap(old, keep)\n",
        replacement="    doc.dead.swap(old, keep if keep is not None else old)\n",
        family="dead segments",
        models="a retry of a whole dead segment references the retried jobs and keeps the "
        "dead reference too (each job then in two places, retried again by the next retry)",
    ),
    Mutation(
        name="dead-aside-forgotten",
        file="state/cold_dead.py",
        original="    dead.set_aside(DeadAside(ref, op.reason[:1000], to_datetime(now)))\n",
        replacement="    dead.swap(ref, None)\n",
        family="set-asides (I13)",
        models="a dead segment whose object is missing or broken is dropped from the document "
        "instead of set aside (its jobs forgotten: nothing to readmit once the object is back)",
    ),
    # ------------------------------------------------------------ delayed jobs in objects (I8)
    Mutation(
        name="delayed-load-forgets-run-at",
        file="state/delayed_ops.py",
        original="                doc.put_encoded(job, lines[i], now)\n",
        replacement="                doc.put_job(_replace(job, run_at=None), now)\n",
        family="delayed jobs in objects",
        models="a load of a delayed object puts its jobs back without their run_at "
        "(claimable at once, before they are due)",
    ),
    Mutation(
        name="delayed-loads-wait-for-the-last",
        file="state/cold_delayed.py",
        original=(
            "            self._next = min(ref.next_run_at for ref in self.refs.values())"
            ".timestamp()\n"
        ),
        replacement=(
            "            self._next = max(ref.next_run_at for ref in self.refs.values())"
            ".timestamp()\n"
        ),
        family="delayed jobs in objects",
        models="the delayed section's next load time is its latest object's next job, not "
        "its earliest: every object waits for the last one (loaded late)",
    ),
    # ------------------------------------------------------------ waiting children (I14)
    Mutation(
        name="cold-children-released-by-any-parent",
        file="state/cold_waiting.py",
        original="            after = tuple(p for p in ref.after if p != parent)\n",
        replacement="            after = ()\n",
        family="waiting children in objects",
        models="an object of waiting children is released when any one of its parents ends",
    ),
    Mutation(
        name="waiting-load-keeps-its-object",
        file="state/cold_waiting.py",
        original="    doc.waiting_cold.remove(key)\n    host.dropped_segments.append(key)\n",
        replacement="    host.dropped_segments.append(key)\n",
        family="waiting children in objects",
        models="a load of waiting children takes them into the document and keeps the "
        "object's reference (each child in two places)",
    ),
    Mutation(
        name="cold-dedupe-confirm-misses",
        file="broker/cold/dedupe.py",
        original=(
            "        if any(job.id == job_id and job.created_at.timestamp() >= since"
            " for job in jobs):\n"
        ),
        replacement="        if False:\n",
        family="pushes applied once",
        models="the broker reads the object of waiting children (or dead segment) whose "
        "filter may hold a retried push's id, misses the job there, and applies the push "
        "again (a second job)",
    ),
    Mutation(
        name="seal-writes-entries-without-results",
        file="state/finished_objects.py",
        original="    encoded = lines if lines is not None else [_encode(e) for e in entries]\n",
        replacement=(
            "    encoded = [_encode(msgspec.structs.replace(e, result=None)) for e in entries]\n"
        ),
        family="results: the sealed record",
        models="a seal writes the record's entries to its object without their results",
    ),
    Mutation(
        name="sealed-parent-taken-for-pending",
        file="state/deps.py",
        original="                standing = _standing(ended)\n",
        replacement='                standing = "pending"\n',
        family="waiting children in objects",
        models="a push naming a parent the broker read as done in a sealed object of the "
        "record makes the child wait for it (forever)",
    ),
    # ------------------------------------------------------------ results (I3)
    Mutation(
        name="finished-record-drops-result",
        file="state/results.py",
        original="            error=error,\n            result=result,\n",
        replacement="            error=error,\n            result=None,\n",
        family="results",
        models="the record of finished jobs keeps a completed job's entry without its result",
    ),
    # ------------------------------------------------------------ schedules (I10)
    Mutation(
        name="skip-schedule-ignores-grace",
        file="state/schedules.py",
        original='        elif s.catch_up == "skip" and now - tick > grace_s:\n',
        replacement='        elif s.catch_up == "skip" and now - tick > 0:\n',
        family="schedules",
        models="a catch_up=skip schedule skips every late tick, even one within its grace",
    ),
)
