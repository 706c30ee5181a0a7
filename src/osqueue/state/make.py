"""A client's call made into its operation, checked once, here.

Each function takes a call's arguments (as both clients and the gRPC server
have them) and returns the op of :mod:`osqueue.state.ops` the broker commits,
or raises :class:`~osqueue.errors.InvalidInput` naming the field.  The
in-process client and the remote client call these before anything is
submitted or sent; the server calls them on every decoded message (with
``field`` naming the item, ``jobs[3]``).  The transitions trust a push made
here: its fields are not checked again at commit.
"""

from __future__ import annotations

from collections.abc import Sequence

import msgspec

from osqueue.api import DeadOptions, Job, NewJob, ScheduleSpec, SettingsChange
from osqueue.errors import InvalidInput
from osqueue.ids import new_id
from osqueue.state import deps, validate
from osqueue.state.cold_dead import DeadFilter
from osqueue.state.limits import check_settings
from osqueue.state.ops import (
    Cancel,
    ClaimOp,
    Fail,
    Heartbeat,
    Push,
    PutSchedule,
    Release,
    RemoveSchedule,
    SetQueue,
)
from osqueue.state.schedules import check_name, check_paused, check_spec
from osqueue.state.scheduling import check_group


def _placed(exc: InvalidInput, field: str) -> InvalidInput:
    """``exc`` with its field placed under ``field`` (``jobs[3].priority``)."""
    if not field:
        return exc
    message = exc.message.removeprefix(f"{exc.field}: ") if exc.field else exc.message
    return InvalidInput(message, field=f"{field}.{exc.field}" if exc.field else field)


def push(job: NewJob, max_payload_bytes: int, field: str = "") -> Push:
    """The :class:`Push` of ``job``: its id chosen now if it has none (a chosen id
    keeps a dedupe tombstone: the caller may send the push again), its payload
    bytes of at most ``max_payload_bytes``, every field by the document's rules."""
    payload = job.payload
    if type(payload) is not bytes:
        if not isinstance(payload, bytearray | memoryview):
            error = InvalidInput(f"must be bytes, not {type(payload).__name__}", field="payload")
            raise _placed(error, field)
        payload = bytes(payload)
    try:
        if len(payload) > max_payload_bytes:
            raise InvalidInput(
                f"{len(payload)} bytes is above the limit of {max_payload_bytes}",
                field="payload",
            )
        job_id = job.id
        if job_id is None or job_id == "":
            job_id, dedupe = new_id(), False  # known to nobody else: never re-sent
        else:
            validate.job_id(job_id)
            dedupe = True
        delay = validate.new_job(job.queue, job.priority, job.delay_s, job.key, job.max_attempts)
        after = job.after
        if job.group is not None or after or job.on_parent_failure != "cancel":
            check_group(job.group)
            after = deps.check(after, job.on_parent_failure, job_id)
        if job.result_ttl_s is not None:
            validate.seconds(job.result_ttl_s, "result_ttl_s", maximum=validate.MAX_RESULT_TTL_S)
    except InvalidInput as exc:
        raise _placed(exc, field) from None
    # positional, in Push's field order (the per-job path of a large push_many)
    return Push(
        job_id,
        payload,
        job.queue,
        job.priority,
        delay,
        job.key,
        job.max_attempts,
        None,  # payload_ref: set by the broker if it stores the payload as an object
        0,  # payload_size
        None,  # payload_sha256
        dedupe,
        job.group,
        after if type(after) is tuple else tuple(after),
        job.on_parent_failure,
        job.result_ttl_s,
    )


def claim(worker: str, queues: Sequence[str] | str, max_jobs: int) -> ClaimOp:
    """The :class:`ClaimOp` of a claim: 1-64 queues (a name alone is one queue)."""
    if type(queues) is not tuple:  # a tuple (the worker's) is used as it is
        queues = (queues,) if isinstance(queues, str) else tuple(queues)
    if type(max_jobs) is not int or not 0 < max_jobs <= validate.MAX_CLAIM:
        validate.count(max_jobs, "max_jobs", maximum=validate.MAX_CLAIM)
    return ClaimOp(validate.worker_name(worker), validate.queue_names(queues), max_jobs)


def wait(wait_s: float, field: str = "wait_s") -> float:
    """A long poll's wait in seconds (0: none)."""
    if type(wait_s) is float and wait_s == 0.0:  # the default needs no check
        return wait_s
    return validate.seconds(wait_s, field) or 0.0


def holder(job: Job, field: str = "job") -> tuple[str, int]:
    """The id and fencing token a holder's call (heartbeat, complete, fail,
    release) names its claimed ``job`` by."""
    if not isinstance(job, Job):
        raise InvalidInput(f"must be a claimed Job, not {type(job).__name__}", field=field)
    return job.id, job.token


def ref(job_id: str, token: int, field: str = "") -> tuple[str, int]:
    """A claim named by id and token (as a message carries it), both checked."""
    prefix = f"{field}." if field else ""
    return validate.job_id(job_id, f"{prefix}id"), validate.token(token, f"{prefix}token")


def heartbeat(job: Job) -> Heartbeat:
    return Heartbeat(*holder(job))


def release(job: Job) -> Release:
    return Release(*holder(job))


def fail(
    job: Job, error: str, retry_after_s: float | None, max_error_chars: int | None = None
) -> Fail:
    """A failure to report: ``error`` cut to ``max_error_chars`` (None: the broker
    cuts it to its own limit), the retry delay checked."""
    if not isinstance(error, str):
        raise InvalidInput(f"must be text, not {type(error).__name__}", field="error")
    retry = validate.seconds(retry_after_s, "retry_after_s")
    return Fail(*holder(job), error if max_error_chars is None else error[:max_error_chars], retry)


def cancel(job_id: str, field: str = "job_id") -> Cancel:
    return Cancel(validate.job_id(job_id, field))


def dead(ids: Sequence[str] | None) -> tuple[str, ...] | None:
    """Which dead jobs a retry or purge is about: ``ids``, or all of them when None."""
    if ids is None:
        return None
    if isinstance(ids, str):
        raise InvalidInput("must be a list of job ids", field="ids")
    return tuple(validate.job_id(i, f"ids[{n}]") for n, i in enumerate(ids))


#: the latest death time a dead-letter filter may name (Unix seconds; year 5138)
MAX_INSTANT_S = 1e11


def dead_filter(
    ids: Sequence[str] | None,
    *,
    queue: str | None = None,
    error: str | None = None,
    since: float | None = None,
    until: float | None = None,
) -> DeadFilter:
    """Which dead jobs a retry or purge takes: ``ids`` (None: any) among those the
    filters admit (each None: no limit; ``since``/``until`` are Unix seconds),
    checked (the in-process client, the remote client and the server call it)."""
    if error is not None and not isinstance(error, str):
        raise InvalidInput(f"must be text, not {type(error).__name__}", field="error")
    checked = dead(ids)
    return DeadFilter(
        queue=None if queue is None else validate.queue_name(queue, "queue"),
        error=error,
        since=validate.seconds(since, "since", maximum=MAX_INSTANT_S),
        until=validate.seconds(until, "until", maximum=MAX_INSTANT_S),
        ids=None if checked is None else frozenset(checked),
    )


def max_segments(value: int | None) -> int | None:
    """A retry's or purge's page of dead segments (None: all of them)."""
    if value is None:
        return None
    return validate.count(value, "max_segments", maximum=2**31 - 1)


def dead_call(ids: Sequence[str] | None, options: DeadOptions) -> tuple[DeadFilter, int | None]:
    """A client's ``retry_dead``/``purge_dead`` call: its filter and its page of dead
    segments, both checked (the in-process and the remote client)."""
    f = dead_filter(
        ids,
        queue=options.get("queue"),
        error=options.get("error"),
        since=options.get("since"),
        until=options.get("until"),
    )
    return f, max_segments(options.get("max_segments"))


def schedule(name: str, spec: ScheduleSpec, max_payload_bytes: int | None = None) -> PutSchedule:
    """The :class:`PutSchedule` of ``schedule(name, **spec)``, checked (its payload
    against ``max_payload_bytes`` if given; the broker applies its own limit)."""
    payload = spec.get("payload", b"")
    if isinstance(payload, bytearray | memoryview):
        spec = {**spec, "payload": bytes(payload)}
    op = PutSchedule(name=name, **spec)
    cron, every_s = check_spec(
        name=op.name,
        queue=op.queue,
        cron=op.cron,
        tz=op.tz,
        every_s=op.every_s,
        payload=op.payload,
        priority=op.priority,
        max_attempts=op.max_attempts,
        catch_up=op.catch_up,
        max_payload_bytes=len(op.payload) if max_payload_bytes is None else max_payload_bytes,
    )
    check_paused(op.paused)
    return msgspec.structs.replace(op, cron=cron, every_s=every_s)


def unschedule(name: str) -> RemoveSchedule:
    return RemoveSchedule(check_name(name))


def set_queue(queue: str, settings: SettingsChange, remove: bool = False) -> SetQueue:
    """The :class:`SetQueue` of ``set_queue(queue, remove=..., **settings)``, checked."""
    op = SetQueue(queue, remove=remove, **settings)
    check_settings(
        op.queue,
        rate_per_s=op.rate_per_s,
        burst=op.burst,
        max_claimed=op.max_claimed,
        max_claimed_per_group=op.max_claimed_per_group,
        paused=op.paused,
        result_ttl_s=op.result_ttl_s,
    )
    if not isinstance(op.remove, bool):
        raise InvalidInput(f"must be true or false, not {op.remove!r}", field="remove")
    return op


__all__ = [
    "cancel",
    "claim",
    "dead",
    "fail",
    "heartbeat",
    "holder",
    "push",
    "ref",
    "release",
    "schedule",
    "set_queue",
    "unschedule",
    "wait",
]
