"""A remote call's arguments made into its op (checked once, by the state layer) and its message.

Each call is made into its op by :mod:`osqueue.state.make`, the functions the
in-process client and the server call too, so bad input fails here with the
field named, without a round trip; the op becomes its message by the wire's
one table (:mod:`osqueue.wire.convert`).  A push's id is chosen here (before
the first send), so the broker applies a retried push once.
"""

from __future__ import annotations

from collections.abc import Sequence

from osqueue.api import ClaimOptions, DeadOptions, EncodedResult, Job, NewJob
from osqueue.errors import InvalidInput
from osqueue.state import make
from osqueue.wire._pb import queue_pb2 as pb
from osqueue.wire.convert import job_ref, to_pb


def push_message(job: NewJob, max_payload_bytes: int) -> pb.NewJob:
    """The push message for ``job`` (:func:`osqueue.state.make.push`)."""
    return to_pb(make.push(job, max_payload_bytes), pb.NewJob)


def claim_request(
    worker: str, queues: Sequence[str] | str, options: ClaimOptions, max_claim_jobs: int
) -> tuple[pb.ClaimRequest, float]:
    """The claim message (asking for at most ``max_claim_jobs``) and the wait in seconds."""
    op = make.claim(worker, queues, options.get("max_jobs", 1))
    wait = make.wait(options.get("wait_s", 0.0))
    max_jobs = min(op.max_jobs, max_claim_jobs)
    return pb.ClaimRequest(worker=op.worker, queues=op.queues, max_jobs=max_jobs), wait


def holder_ref(job: Job) -> pb.JobRef:
    """The reference a holder's call sends (id and fencing token) for a claimed ``job``."""
    return job_ref(*make.holder(job))


def completion_ref(job: Job, result: object, max_result_bytes: int) -> pb.JobRef:
    """What a completion sends: the job's reference with its ``result`` encoded
    (:meth:`EncodedResult.of <osqueue.api.EncodedResult.of>`; None: none), at
    most ``max_result_bytes``."""
    encoded = EncodedResult.of(result)
    if encoded is not None and len(encoded.data) > max_result_bytes:
        raise InvalidInput(
            f"is {len(encoded.data)} bytes encoded; at most {max_result_bytes}", field="result"
        )
    return job_ref(*make.holder(job), encoded)


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


def fail_item(
    job: Job, error: str, retry_after_s: float | None, max_error_chars: int
) -> pb.FailItem:
    """A failure to report (:func:`osqueue.state.make.fail`)."""
    op = make.fail(job, error, retry_after_s, max_error_chars)
    return to_pb(op, pb.FailItem, job=job_ref(op.job_id, op.token))


def dead_request(ids: Sequence[str] | None, options: DeadOptions) -> pb.DeadRequest:
    """Which dead jobs a retry or purge is about: ``ids`` (None: all of them) among
    those the filters of ``options`` admit, and its page of dead segments.  ``all``
    is set only with no filter: a broker that knows no filters then acts on no
    job rather than on every one."""
    f, pages = make.dead_call(ids, options)
    extra = {} if pages is None else {"max_segments": pages}
    return to_pb(f, pb.DeadRequest, all=f.ids is None and f.plain, **extra)
