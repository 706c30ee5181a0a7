"""A remote call's arguments, checked and turned into its message before anything is sent.

The checks are the document's own rules (:mod:`osqueue.state.validate`), so
bad input fails here with the field named, without a round trip; the broker
applies the same rules again to every op it commits.  A push's id is chosen
here (before the first send), so the broker applies a retried push once.
"""

from __future__ import annotations

from collections.abc import Sequence

from osqueue.api import EncodedResult, Job, NewJob
from osqueue.errors import InvalidInput
from osqueue.ids import new_id
from osqueue.state import deps, validate
from osqueue.state.scheduling import check_group
from osqueue.wire._pb import queue_pb2 as pb
from osqueue.wire.convert import job_ref, new_job_to_pb, result_to_pb


def push_message(job: NewJob, max_payload_bytes: int) -> pb.NewJob:
    """The push message for ``job``: its id chosen now, its fields checked by
    :func:`osqueue.state.validate.new_job`, its payload at most ``max_payload_bytes``."""
    payload: object = job.payload
    if isinstance(payload, bytearray | memoryview):
        payload = bytes(payload)
    if not isinstance(payload, bytes):
        raise InvalidInput(f"must be bytes, not {type(payload).__name__}", field="payload")
    if len(payload) > max_payload_bytes:
        raise InvalidInput(
            f"is {len(payload)} bytes; at most {max_payload_bytes}",
            field="payload",
        )
    job_id = validate.job_id(job.id, "id") if job.id is not None else new_id()
    delay_s = validate.new_job(job.queue, job.priority, job.delay_s, job.key, job.max_attempts)
    if job.group is not None:
        check_group(job.group)
    if job.after or job.on_parent_failure != "cancel":
        deps.check(job.after, job.on_parent_failure, job_id)
    if job.result_ttl_s is not None:
        validate.seconds(job.result_ttl_s, "result_ttl_s", maximum=validate.MAX_RESULT_TTL_S)
    return new_job_to_pb(job, job_id, payload, delay_s)


def claim_request(
    worker: str,
    queues: Sequence[str] | str,
    max_jobs: int,
    wait_s: float,
    max_claim_jobs: int,
) -> tuple[pb.ClaimRequest, float]:
    """The claim message (asking for at most ``max_claim_jobs``) and the wait in seconds."""
    if isinstance(queues, str):
        queues = (queues,)
    validate.worker_name(worker, "worker")
    if not queues:
        raise InvalidInput("name at least one queue", field="queues")
    for i, queue in enumerate(queues):
        validate.queue_name(queue, f"queues[{i}]")
    validate.count(max_jobs, "max_jobs", maximum=validate.MAX_CLAIM)
    wait = validate.seconds(wait_s, "wait_s") or 0.0
    request = pb.ClaimRequest(
        worker=worker, queues=list(queues), max_jobs=min(max_jobs, max_claim_jobs)
    )
    return request, wait


def holder_ref(job: Job) -> pb.JobRef:
    """The reference a holder's call sends (id and fencing token) for a claimed ``job``."""
    if not isinstance(job, Job):
        raise InvalidInput(f"must be a claimed Job, not {type(job).__name__}", field="job")
    return job_ref(job)


def completion_ref(job: Job, result: object, max_result_bytes: int) -> pb.JobRef:
    """What a completion sends: the job's reference with its ``result`` encoded
    (:meth:`EncodedResult.of <osqueue.api.EncodedResult.of>`; None: none), at
    most ``max_result_bytes``."""
    ref = holder_ref(job)
    encoded = EncodedResult.of(result)
    if encoded is not None:
        if len(encoded.data) > max_result_bytes:
            raise InvalidInput(
                f"is {len(encoded.data)} bytes encoded; at most {max_result_bytes}",
                field="result",
            )
        ref.result.CopyFrom(result_to_pb(encoded))
    return ref


def completion_refs(
    jobs: Sequence[Job], results: Sequence[object] | None, max_result_bytes: int
) -> list[pb.JobRef]:
    """The references of completions of ``jobs`` with ``results`` (one per job)."""
    if results is None:
        return [holder_ref(job) for job in jobs]
    if len(results) != len(jobs):
        raise InvalidInput(
            f"{len(results)} results for {len(jobs)} jobs; give one per job", field="results"
        )
    return [completion_ref(j, r, max_result_bytes) for j, r in zip(jobs, results, strict=True)]


def result_request(job_id: str, wait_s: float) -> tuple[pb.ResultRequest, float]:
    """A Result call's message, and its wait in seconds."""
    validate.job_id(job_id, "job_id")
    wait = validate.seconds(wait_s, "wait_s") or 0.0
    return pb.ResultRequest(id=job_id, wait_s=wait), wait


def fail_item(
    job: Job, error: str, retry_after_s: float | None, max_error_chars: int
) -> pb.FailItem:
    """A failure to report: ``error`` cut to ``max_error_chars``, the retry delay checked."""
    if not isinstance(error, str):
        raise InvalidInput(f"must be text, not {type(error).__name__}", field="error")
    item = pb.FailItem(job=holder_ref(job), error=error[:max_error_chars])
    retry = validate.seconds(retry_after_s, "retry_after_s")
    if retry is not None:
        item.retry_after_s = retry
    return item


def dead_request(ids: Sequence[str] | None) -> pb.DeadRequest:
    """Which dead jobs a retry or purge is about: ``ids``, or all of them when None."""
    if ids is None:
        return pb.DeadRequest(all=True)
    return pb.DeadRequest(ids=[validate.job_id(i, f"ids[{n}]") for n, i in enumerate(ids)])
