"""Between the API's values (``NewJob``, ``Job``, ``Stats``) and their wire messages.

The remote client converts with the ``*_to_pb`` functions and the server with
the ``*_from_pb`` ones (and the other way round for answers); neither imports
the other.
"""

from __future__ import annotations

from osqueue.api import DEFAULT_MAX_ATTEMPTS, Job, NewJob, QueueStats, Stats
from osqueue.wire._pb import queue_pb2 as pb


def new_job_to_pb(job: NewJob, job_id: str, payload: bytes, delay_s: float) -> pb.NewJob:
    """The message for a push of ``job`` under ``job_id`` (chosen before the first send)."""
    msg = pb.NewJob(
        id=job_id,
        queue=job.queue,
        priority=job.priority,
        delay_s=delay_s,
        max_attempts=job.max_attempts,
        payload=payload,
    )
    if job.key is not None:
        msg.key = job.key
    return msg


def new_job_from_pb(msg: pb.NewJob) -> NewJob:
    """The job a push message carries (an unset ``max_attempts`` is the default)."""
    return NewJob(
        payload=msg.payload,
        queue=msg.queue,
        priority=msg.priority,
        delay_s=msg.delay_s,
        key=msg.key if msg.HasField("key") else None,
        max_attempts=msg.max_attempts if msg.HasField("max_attempts") else DEFAULT_MAX_ATTEMPTS,
        id=msg.id,
    )


def job_to_pb(job: Job) -> pb.Job:
    msg = pb.Job(
        id=job.id,
        queue=job.queue,
        payload=job.payload,
        attempts=job.attempts,
        max_attempts=job.max_attempts,
        token=job.token,
        priority=job.priority,
        created_at=job.created_at,
    )
    if job.key is not None:
        msg.key = job.key
    return msg


def job_from_pb(msg: pb.Job) -> Job:
    return Job(
        id=msg.id,
        queue=msg.queue,
        payload=msg.payload,
        attempts=msg.attempts,
        max_attempts=msg.max_attempts,
        token=msg.token,
        priority=msg.priority,
        key=msg.key if msg.HasField("key") else None,
        created_at=msg.created_at,
    )


def job_from_ref(ref: pb.JobRef) -> Job:
    """A :class:`Job` naming a claim by its id and token (all that later calls use)."""
    return Job(id=ref.id, queue="", payload=b"", attempts=0, max_attempts=1, token=ref.token)


def job_ref(job: Job) -> pb.JobRef:
    return pb.JobRef(id=job.id, token=job.token)


def stats_to_pb(stats: Stats) -> pb.StatsResponse:
    msg = pb.StatsResponse(
        version=stats.version,
        pushed=stats.pushed,
        completed=stats.completed,
        dead=stats.dead,
        claimed=stats.claimed,
        broker_epoch=stats.broker_epoch,
        document_bytes=stats.document_bytes,
        tombstones=stats.tombstones,
    )
    for name, q in stats.queues.items():
        entry = msg.queues[name]
        entry.depth = q.depth
        entry.claimed = q.claimed
        entry.dead = q.dead
        entry.delayed = q.delayed
        entry.spilled = q.spilled
        if q.oldest_age_s is not None:
            entry.oldest_age_s = q.oldest_age_s
    if stats.broker_id is not None:
        msg.broker_id = stats.broker_id
    if stats.broker_address is not None:
        msg.broker_address = stats.broker_address
    if stats.lease_until is not None:
        msg.lease_until = stats.lease_until
    return msg


def stats_from_pb(msg: pb.StatsResponse) -> Stats:
    queues = {
        name: QueueStats(
            depth=q.depth,
            claimed=q.claimed,
            dead=q.dead,
            delayed=q.delayed,
            oldest_age_s=q.oldest_age_s if q.HasField("oldest_age_s") else None,
            spilled=q.spilled,
        )
        for name, q in sorted(msg.queues.items())
    }
    return Stats(
        version=msg.version,
        queues=queues,
        pushed=msg.pushed,
        completed=msg.completed,
        dead=msg.dead,
        claimed=msg.claimed,
        broker_id=msg.broker_id if msg.HasField("broker_id") else None,
        broker_address=msg.broker_address if msg.HasField("broker_address") else None,
        broker_epoch=msg.broker_epoch,
        lease_until=msg.lease_until if msg.HasField("lease_until") else None,
        document_bytes=msg.document_bytes,
        tombstones=msg.tombstones,
    )
