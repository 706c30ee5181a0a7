"""The transition's scheduling steps: the ops on schedules and queue settings,
firing due ticks, and where a pushed job with a group or parents goes.

These are the handlers :func:`osqueue.state.transition` dispatches to for
:class:`~osqueue.state.ops.SetQueue`, :class:`~osqueue.state.ops.PutSchedule`
and :class:`~osqueue.state.ops.RemoveSchedule`, plus the two hooks it calls:
:func:`fire` before a commit's ops, and :func:`place_push` inside a push.
The rules themselves live in :mod:`.schedules`, :mod:`.limits` and :mod:`.deps`.
"""

from __future__ import annotations

from datetime import datetime
from typing import Protocol

import msgspec

from osqueue.api import FinishedStatus
from osqueue.errors import InvalidInput, QueueFull
from osqueue.state import deps, limits, schedules, validate
from osqueue.state import results as finishing
from osqueue.state.document import Document, forget_queue, totals
from osqueue.state.model import Schedule, StoredJob, StoredSettings, to_datetime
from osqueue.state.ops import (
    Counted,
    OpResult,
    Policy,
    Push,
    PutSchedule,
    QueueSet,
    RemoveSchedule,
    Scheduled,
    SetQueue,
)

MAX_GROUP_CHARS = 128


class Tx(Protocol):
    """What these steps need of the transition building the new version."""

    doc: Document
    now: float
    now_dt: datetime
    policy: Policy
    stats: dict[str, int]
    ended: list[tuple[str, FinishedStatus]]

    def push(self, op: Push) -> OpResult: ...


# --------------------------------------------------------------------------- queue settings


def set_queue(tx: Tx, op: SetQueue) -> OpResult:
    if op.remove:
        return _remove_queue(tx.doc, op)
    fields = {
        "rate_per_s": op.rate_per_s,
        "burst": op.burst,
        "max_claimed": op.max_claimed,
        "max_claimed_per_group": op.max_claimed_per_group,
        "paused": op.paused,
        "result_ttl_s": op.result_ttl_s,
    }
    limits.check_settings(op.queue, **fields)  # type: ignore[arg-type]
    doc = tx.doc
    new = limits.updated(doc.queue_settings.get(op.queue), now=tx.now, **fields)  # type: ignore[arg-type]
    doc.set_queue_settings(op.queue, None if limits.is_default(new) else new)
    totals(doc, op.queue)  # a queue with a setting is known from now on
    return QueueSet(op.queue, new)


def _remove_queue(doc: Document, op: SetQueue) -> OpResult:
    """Forget a queue (no longer listed), refused while anything still uses it."""
    validate.queue_name(op.queue)
    changes = (op.rate_per_s, op.burst, op.max_claimed, op.max_claimed_per_group, op.paused)
    if any(v is not None for v in (*changes, op.result_ttl_s)):
        raise InvalidInput("remove changes no setting: give it alone", field="remove")
    queue, index = op.queue, doc.index
    jobs = sum(index.count(queue, status) for status in _LIVE) + (
        doc.segments.spilled(queue) + doc.segments.set_aside_jobs(queue) if doc.segments else 0
    )  # (jobs in segments set aside are live too: readmit brings them back)
    jobs += doc.delayed.spilled(queue) + doc.delayed.set_aside_jobs(queue) if doc.delayed else 0
    named = sorted(s.name for s in doc.schedules if s.queue == queue)
    if jobs or named:
        held = [f"{jobs} live job{'s' if jobs != 1 else ''}"] if jobs else []
        if named:
            held.append(f"schedule{'s' if len(named) != 1 else ''} {', '.join(named)}")
        raise InvalidInput(
            f"queue {queue!r} still holds {' and '.join(held)}: cancel or purge its jobs "
            "and remove its schedules first",
            field="queue",
        )
    if queue not in doc.queue_totals and queue not in doc.queue_settings:
        raise InvalidInput(f"no queue {queue!r} is known", field="queue")
    forget_queue(doc, queue)
    return QueueSet(queue, StoredSettings())


#: the statuses of jobs that keep a queue from being removed (done jobs only wait
#: for their archive object)
_LIVE = ("waiting", "queued", "claimed", "dead")


# --------------------------------------------------------------------------- schedules


def put_schedule(tx: Tx, op: PutSchedule) -> OpResult:
    policy, doc = tx.policy, tx.doc
    cron, every_s = schedules.check_spec(
        name=op.name,
        queue=op.queue,
        cron=op.cron,
        tz=op.tz,
        every_s=op.every_s,
        payload=op.payload,
        priority=op.priority,
        max_attempts=op.max_attempts,
        catch_up=op.catch_up,
        max_payload_bytes=policy.max_inline_payload_bytes,
    )
    schedules.check_paused(op.paused)
    old = doc.schedules.get(op.name)
    if old is None and len(doc.schedules) >= policy.max_schedules:
        raise QueueFull(f"the document holds max_schedules={policy.max_schedules} schedules")
    draft = Schedule(
        name=op.name,
        queue=op.queue,
        next_at=tx.now_dt,
        created_at=old.created_at if old is not None else tx.now_dt,
        cron=cron,
        tz=op.tz if cron is not None else None,
        every_s=every_s,
        payload=op.payload,
        priority=op.priority,
        max_attempts=op.max_attempts,
        catch_up=op.catch_up,
        last_at=old.last_at if old is not None else None,
        last_job=old.last_job if old is not None else None,
        paused=op.paused,
    )
    schedule = msgspec.structs.replace(
        draft, next_at=to_datetime(schedules.first_next_at(draft, tx.now))
    )
    if doc.size_upper() + len(msgspec.json.encode(schedule)) > policy.max_document_bytes:
        raise QueueFull(
            f"the queue document would exceed max_document_bytes={policy.max_document_bytes}"
        )
    doc.schedules.put(schedule)
    return Scheduled(schedule)


def remove_schedule(tx: Tx, op: RemoveSchedule) -> OpResult:
    schedules.check_name(op.name)
    return Counted(0 if tx.doc.schedules.remove(op.name) is None else 1)


def fire(tx: Tx) -> None:
    """Push the job of every tick that has come, recording the tick (same version)."""

    def push(job_id: str, s: Schedule) -> None:
        tx.push(
            Push(
                id=job_id,
                payload=s.payload,
                queue=s.queue,
                priority=s.priority,
                max_attempts=s.max_attempts,
            )
        )

    schedules.fire_due(tx.doc.schedules, tx.now, tx.policy.schedule_grace_s, push)


# --------------------------------------------------------------------------- a push's place


def check_group(group: str | None, field: str = "group") -> str | None:
    if group is None:
        return None
    if not isinstance(group, str) or not 0 < len(group) <= MAX_GROUP_CHARS:
        raise InvalidInput(f"must be 1-{MAX_GROUP_CHARS} characters", field=field)
    if not group.isprintable():
        raise InvalidInput("must be printable text", field=field)
    return group


def place_push(tx: Tx, op: Push, job: StoredJob) -> StoredJob | None:
    """``job`` (a push's new job) with its group and parents: ``waiting`` while a
    parent is pending; None when a failed parent cancelled it at once (it is
    then counted as pushed and cancelled, and recorded)."""
    # the group and parents were checked where the push was made (osqueue.state.make)
    job = msgspec.structs.replace(job, group=op.group)
    if not op.after:
        return job
    doc = tx.doc
    job = msgspec.structs.replace(job, after=op.after, on_parent_failure=op.on_parent_failure)
    placed = deps.place(doc, job, tx.policy.dependency_window_s, tx.now, op.sealed_parents)
    # children may name the jobs that finish from now on: record them for a while
    doc.note_dependencies(tx.now_dt)
    if placed is None:
        tx.stats["pushed"] += 1
        totals(doc, job.queue).pushed += 1
        tx.stats["cancelled"] += 1
        finishing.record(tx, job, "cancelled")
        if job.dedupe:
            doc.add_tombstone(op.id, tx.now_dt)
    return placed
