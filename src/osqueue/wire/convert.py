"""Between the API's values (``NewJob``, ``Job``, ``Stats``, results) and their wire messages.

The remote client converts with the ``*_to_pb`` functions and the server with
the ``*_from_pb`` ones (and the other way round for answers); neither imports
the other.
"""

from __future__ import annotations

from typing import Any

from osqueue.api import (
    DEFAULT_MAX_ATTEMPTS,
    EncodedResult,
    Job,
    JobResult,
    NewJob,
    QueueSettings,
    QueueStats,
    ResultKind,
    ScheduleInfo,
    Stats,
)
from osqueue.errors import InvalidInput
from osqueue.wire._pb import queue_pb2 as pb

_KIND_TO_PB: dict[ResultKind, pb.ResultKind.ValueType] = {
    "bytes": pb.RESULT_KIND_BYTES,
    "text": pb.RESULT_KIND_TEXT,
    "json": pb.RESULT_KIND_JSON,
}
_KIND_FROM_PB: dict[int, ResultKind] = {int(v): k for k, v in _KIND_TO_PB.items()}


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
    if job.group is not None:
        msg.group = job.group
    if job.after:
        msg.after.extend(job.after)
    if job.on_parent_failure != "cancel":
        msg.on_parent_failure = job.on_parent_failure
    if job.result_ttl_s is not None:
        msg.result_ttl_s = job.result_ttl_s
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
        group=msg.group if msg.HasField("group") else None,
        after=tuple(msg.after),
        on_parent_failure=msg.on_parent_failure or "cancel",  # type: ignore[arg-type]
        result_ttl_s=msg.result_ttl_s if msg.HasField("result_ttl_s") else None,
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
    if job.group is not None:
        msg.group = job.group
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
        group=msg.group if msg.HasField("group") else None,
    )


def job_from_ref(ref: pb.JobRef) -> Job:
    """A :class:`Job` naming a claim by its id and token (all that later calls use)."""
    return Job(id=ref.id, queue="", payload=b"", attempts=0, max_attempts=1, token=ref.token)


def job_ref(job: Job) -> pb.JobRef:
    return pb.JobRef(id=job.id, token=job.token)


def result_to_pb(result: EncodedResult) -> pb.ResultValue:
    return pb.ResultValue(kind=_KIND_TO_PB[result.kind], data=result.data)


def result_from_pb(msg: pb.ResultValue, field: str = "result") -> EncodedResult:
    """The result a message carries; a kind this release does not know is
    ``InvalidInput`` naming ``field``."""
    kind = _KIND_FROM_PB.get(int(msg.kind))
    if kind is None:
        raise InvalidInput(f"{msg.kind} is not a result kind", field=f"{field}.kind")
    return EncodedResult(kind, msg.data)


def job_result_to_pb(result: JobResult, value: EncodedResult | None) -> pb.ResultResponse:
    """The answer to a Result call: ``result`` with its ``value`` (encoded)."""
    msg = pb.ResultResponse(status=result.status, attempts=result.attempts)
    if value is not None:
        msg.value.CopyFrom(result_to_pb(value))
    if result.error is not None:
        msg.error = result.error
    if result.finished_at is not None:
        msg.finished_at = result.finished_at
    return msg


def job_result_from_pb(msg: pb.ResultResponse) -> JobResult:
    value = result_from_pb(msg.value, "value").decode() if msg.HasField("value") else None
    return JobResult(
        status=msg.status,
        value=value,
        error=msg.error if msg.HasField("error") else None,
        attempts=msg.attempts,
        finished_at=msg.finished_at if msg.HasField("finished_at") else None,
    )


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
        finished=stats.finished,
        finished_evicted=stats.finished_evicted,
    )
    for name, q in stats.queues.items():
        entry = msg.queues[name]
        entry.depth = q.depth
        entry.claimed = q.claimed
        entry.dead = q.dead
        entry.delayed = q.delayed
        entry.waiting = q.waiting
        entry.paused = q.paused
        entry.spilled = q.spilled
        entry.set_aside = q.set_aside
        entry.set_aside_segments = q.set_aside_segments
        entry.pushed_total = q.pushed_total
        entry.completed_total = q.completed_total
        entry.failed_total = q.failed_total
        entry.dead_total = q.dead_total
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
            waiting=q.waiting,
            paused=q.paused,
            spilled=q.spilled,
            set_aside=q.set_aside,
            set_aside_segments=q.set_aside_segments,
            pushed_total=q.pushed_total,
            completed_total=q.completed_total,
            failed_total=q.failed_total,
            dead_total=q.dead_total,
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
        finished=msg.finished,
        finished_evicted=msg.finished_evicted,
    )


# --------------------------------------------------------------------------- schedules


def schedule_spec_to_pb(
    name: str,
    *,
    queue: str,
    payload: bytes,
    cron: str | None,
    every_s: float | None,
    tz: str | None,
    priority: int,
    max_attempts: int,
    catch_up: str,
    paused: bool = False,
) -> pb.Schedule:
    """The message of a ``schedule`` call (only its spec fields)."""
    msg = pb.Schedule(
        name=name,
        queue=queue,
        payload=payload,
        priority=priority,
        max_attempts=max_attempts,
        catch_up=catch_up,
        paused=paused,
    )
    if cron is not None:
        msg.cron = cron
    if every_s is not None:
        msg.every_s = every_s
    if tz is not None:
        msg.tz = tz
    return msg


def schedule_spec_from_pb(msg: pb.Schedule) -> dict[str, Any]:
    """The keyword arguments of ``schedule`` a message carries (name included)."""
    return {
        "name": msg.name,
        "queue": msg.queue,
        "payload": msg.payload,
        "cron": msg.cron if msg.HasField("cron") else None,
        "every_s": msg.every_s if msg.HasField("every_s") else None,
        "tz": msg.tz if msg.HasField("tz") else None,
        "priority": msg.priority,
        "max_attempts": msg.max_attempts if msg.HasField("max_attempts") else DEFAULT_MAX_ATTEMPTS,
        "catch_up": msg.catch_up or "once",
        "paused": msg.paused,
    }


def schedule_info_to_pb(info: ScheduleInfo) -> pb.Schedule:
    msg = schedule_spec_to_pb(
        info.name,
        queue=info.queue,
        payload=info.payload,
        cron=info.cron,
        every_s=info.every_s,
        tz=info.tz,
        priority=info.priority,
        max_attempts=info.max_attempts,
        catch_up=info.catch_up,
        paused=info.paused,
    )
    msg.next_run_at = info.next_run_at
    if info.last_run_at is not None:
        msg.last_run_at = info.last_run_at
    if info.last_job_id is not None:
        msg.last_job_id = info.last_job_id
    if info.note is not None:
        msg.note = info.note
    return msg


def schedule_info_from_pb(msg: pb.Schedule) -> ScheduleInfo:
    spec = schedule_spec_from_pb(msg)
    return ScheduleInfo(
        next_run_at=msg.next_run_at,
        last_run_at=msg.last_run_at if msg.HasField("last_run_at") else None,
        last_job_id=msg.last_job_id if msg.HasField("last_job_id") else None,
        note=msg.note if msg.HasField("note") else None,
        **spec,
    )


# --------------------------------------------------------------------------- queue settings


def settings_to_pb(
    queue: str,
    *,
    rate_per_s: float | None = None,
    burst: int | None = None,
    max_claimed: int | None = None,
    max_claimed_per_group: int | None = None,
    paused: bool | None = None,
    result_ttl_s: float | None = None,
) -> pb.QueueSettings:
    """A settings message: the fields given are set, the others left unset."""
    msg = pb.QueueSettings(queue=queue)
    if rate_per_s is not None:
        msg.rate_per_s = rate_per_s
    if burst is not None:
        msg.burst = burst
    if max_claimed is not None:
        msg.max_claimed = max_claimed
    if max_claimed_per_group is not None:
        msg.max_claimed_per_group = max_claimed_per_group
    if paused is not None:
        msg.paused = paused
    if result_ttl_s is not None:
        msg.result_ttl_s = result_ttl_s
    return msg


def settings_args_from_pb(msg: pb.QueueSettings) -> dict[str, Any]:
    """The keyword arguments of ``set_queue`` a message carries (unset: None)."""
    return {
        "rate_per_s": msg.rate_per_s if msg.HasField("rate_per_s") else None,
        "burst": msg.burst if msg.HasField("burst") else None,
        "max_claimed": msg.max_claimed if msg.HasField("max_claimed") else None,
        "max_claimed_per_group": (
            msg.max_claimed_per_group if msg.HasField("max_claimed_per_group") else None
        ),
        "paused": msg.paused if msg.HasField("paused") else None,
        "result_ttl_s": msg.result_ttl_s if msg.HasField("result_ttl_s") else None,
    }


def queue_settings_to_pb(settings: QueueSettings) -> pb.QueueSettings:
    return settings_to_pb(
        settings.queue,
        rate_per_s=settings.rate_per_s,
        burst=settings.burst,
        max_claimed=settings.max_claimed,
        max_claimed_per_group=settings.max_claimed_per_group,
        paused=settings.paused,
        result_ttl_s=settings.result_ttl_s,
    )


def queue_settings_from_pb(msg: pb.QueueSettings) -> QueueSettings:
    args = settings_args_from_pb(msg)
    return QueueSettings(queue=msg.queue, **{**args, "paused": bool(args["paused"])})
