"""Questions about how jobs finished, answered from a document alone (pure).

* :func:`finished`: did a job finish, and how (``"done"``, ``"dead"``,
  ``"cancelled"``), or not (None)?  What the dependencies feature asks of a
  parent.
* :func:`answer`: what ``client.result(job_id)`` answers, as of a document.
* :func:`check_result`: a completion's result is well-formed (the rules the
  document's entries follow).

The record itself is :class:`~osqueue.state.finished_jobs.FinishedRecord`
(``doc.finished``).
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime
from typing import Protocol

import msgspec

from osqueue.api import RESULT_KINDS, EncodedResult, FinishedStatus, JobResult
from osqueue.errors import InvalidInput
from osqueue.state import validate
from osqueue.state.document import Document
from osqueue.state.finished_jobs import (
    FINISHED_ERROR_CHARS,
    RESULT_PREFIX,
    FinishedJob,
    ResultData,
    Stamp,
)
from osqueue.state.model import StoredJob
from osqueue.state.ops import Policy
from osqueue.storage.keys import check_key


def finished(doc: Document, job_id: str) -> FinishedStatus | None:
    """How job ``job_id`` finished, as ``doc`` knows it; None if it has not (it is
    live, or the document does not know it).

    The record of finished jobs answers first: every job that completed, died
    or was cancelled keeping an entry (:func:`kept_for`) is in it for that
    long (unless evicted by the record's caps: ``doc.stats.finished_evicted``
    counts those).  Past that, a
    job still in the document answers by its status: ``done`` until its
    archive object is written, ``dead`` until it is retried or purged.  Pure:
    an entry past its expiry counts until the sweep prunes it (within
    :data:`~osqueue.state.finished_jobs.PRUNE_SLACK_S`).  A ``dead`` answer can turn
    live again (``osqueue dead URL retry`` re-queues the job and drops its
    entry); ``done`` and ``cancelled`` are final.
    """
    entry = doc.finished.get(job_id)
    if entry is not None:
        return entry.status
    job = doc.jobs.get(job_id)
    if job is not None and job.status in ("done", "dead"):
        return "done" if job.status == "done" else "dead"
    return None


@dataclass(frozen=True, slots=True)
class Answer:
    """What ``result(job_id)`` answers as of a document: ``result``, and the result
    as the record holds it (``data``).  A result inline is decoded into
    ``result.value``; one in a result object is still to be read (``data.ref``)."""

    result: JobResult
    data: ResultData | None = None

    @property
    def unread(self) -> bool:
        """The value lives in a result object not read yet."""
        return self.data is not None and self.data.ref is not None


def answer(doc: Document, job_id: str, now: float) -> Answer | None:
    """``result(job_id)``'s answer as of ``doc`` at broker time ``now``: how the job
    finished, or its live status; None if ``doc`` does not know the id (never
    pushed, or its entry expired)."""
    entry = doc.finished.get(job_id)
    if entry is not None and now <= entry.expires_at:
        return from_entry(entry)
    job = doc.jobs.get(job_id)
    if job is not None:
        if job.status == "done":
            done_at = job.done_at.timestamp() if job.done_at else None
            return Answer(JobResult("done", attempts=job.attempts, finished_at=done_at))
        if job.status == "dead":
            return Answer(JobResult("dead", error=job.last_error, attempts=job.attempts))
        return Answer(JobResult(job.status, attempts=job.attempts))
    if maybe_spilled(doc, job_id):
        return Answer(JobResult("queued"))
    return None


def from_entry(entry: FinishedJob) -> Answer:
    """The answer an entry of the record gives (in the document or a sealed object)."""
    result = JobResult(
        entry.status,
        error=entry.error,
        attempts=entry.attempts,
        finished_at=entry.finished_at.timestamp(),
    )
    data = entry.result
    if data is None:
        return Answer(result)
    if data.value is not None:
        value = EncodedResult(data.kind, data.value).decode()
        return Answer(msgspec.structs.replace(result, value=value), data)
    return Answer(result, data)


def maybe_spilled(doc: Document, job_id: str) -> bool:
    """A live job in a segment object or a delayed object (listed or set aside) may
    have this id (its bounds hold it)."""
    refs = [*doc.segments, *(entry.ref for entry in doc.segments.aside.values())]
    if any(ref.min_id <= job_id <= ref.max_id and job_id not in ref.cancelled for ref in refs):
        return True
    delayed = doc.delayed
    if delayed and any(
        ref.min_id <= job_id <= ref.max_id and job_id not in ref.cancelled
        for ref in [*delayed, *(entry.ref for entry in delayed.aside.values())]
    ):
        return True
    return bool(doc.waiting_cold) and doc.waiting_cold.may_hold(job_id)


def result_key(job_id: str, upload_id: str) -> str:
    """The key of one upload of ``job_id``'s result."""
    return f"{RESULT_PREFIX}{job_id}={upload_id}"


def job_of_result_key(key: str) -> str:
    """The job id a result object's key names (``results/<id>=<upload>``)."""
    return key[len(RESULT_PREFIX) :].partition("=")[0]


def check_value(kind: str, data: bytes, field: str = "result") -> None:
    """``data`` reads as ``kind`` says: a known kind, UTF-8 text, or valid JSON."""
    if kind not in RESULT_KINDS:
        raise InvalidInput(
            f"{kind!r} is not one of {', '.join(RESULT_KINDS)}", field=f"{field}.kind"
        )
    if not isinstance(data, bytes):
        raise InvalidInput(f"must be bytes, not {type(data).__name__}", field=f"{field}.value")
    try:
        if kind == "text":
            data.decode("utf-8")
        elif kind == "json":
            msgspec.json.decode(data)
    except (UnicodeDecodeError, msgspec.DecodeError) as exc:
        raise InvalidInput(f"is not valid {kind}: {exc}", field=f"{field}.value") from exc


def _check_kind(kind: str, field: str) -> None:
    if kind not in RESULT_KINDS:
        raise InvalidInput(
            f"{kind!r} is not one of {', '.join(RESULT_KINDS)}", field=f"{field}.kind"
        )


def check_result(result: ResultData, job_id: str, policy: Policy) -> None:
    """A completion's result: inline within ``result_inline_max_bytes`` and reading
    as its kind says, or a result object of this job within ``max_result_bytes``."""
    if not isinstance(result, ResultData):
        raise InvalidInput(f"must be a result, not {type(result).__name__}", field="result")
    size = result.size
    if type(size) is not int or not 0 <= size <= policy.max_result_bytes:
        raise InvalidInput(
            f"{size!r} bytes is not within the limit of {policy.max_result_bytes}",
            field="result.size",
        )
    if (result.value is None) == (result.ref is None):
        raise InvalidInput("a result has exactly one of value and ref", field="result")
    if result.value is not None:
        check_value(result.kind, result.value)
        if len(result.value) != size or size > policy.result_inline_max_bytes:
            raise InvalidInput(
                f"{len(result.value)} bytes inline (size {size}); at most "
                f"{policy.result_inline_max_bytes} go in the document, store more as an object",
                field="result.value",
            )
        return
    if result.kind not in RESULT_KINDS:
        raise InvalidInput(
            f"{result.kind!r} is not one of {', '.join(RESULT_KINDS)}", field="result.kind"
        )
    ref = result.ref
    assert ref is not None
    check_key(ref, "result.ref")
    if job_of_result_key(ref) != job_id or not ref.startswith(RESULT_PREFIX):
        raise InvalidInput(f"{ref!r} is not a result object of job {job_id}", field="result.ref")


# --------------------------------------------------------------------------- transitions


class Finishing(Protocol):
    """What :func:`record` needs of a commit in progress (the transitions' ``_Tx``)."""

    doc: Document
    now: float
    now_dt: datetime
    policy: Policy
    #: the jobs that finished in this commit, in order, with how they ended
    ended: list[tuple[str, FinishedStatus]]


#: the seconds of ``doc.dependencies_at`` (one object until a push names parents again)
_dependencies_seconds = Stamp()

#: How long a result given is kept when no TTL is set (push, queue or broker).
DEFAULT_RESULT_TTL_S = 3600.0


def result_ttl(doc: Document, job: StoredJob, policy: Policy) -> float | None:
    """The TTL set for ``job``: its push's ``result_ttl_s``, else its queue's
    setting, else the broker's; None when none is set."""
    if job.result_ttl_s is not None:
        return job.result_ttl_s
    settings = doc.queue_settings.get(job.queue) if doc.queue_settings else None
    if settings is not None and settings.result_ttl_s is not None:
        return settings.result_ttl_s
    return policy.result_ttl_s


def kept_for(doc: Document, job: StoredJob, policy: Policy, *, has_result: bool) -> float:
    """How long ``job``'s entry is kept once it finishes (0: none).  A TTL set
    (:func:`result_ttl`) keeps every finish that long, with or without a result
    (0: nothing, not even a result given); with none set, a finish that gives a
    result keeps it :data:`DEFAULT_RESULT_TTL_S` and one that gives none keeps
    nothing, so a queue that never gives results pays nothing for the record."""
    ttl_s = result_ttl(doc, job, policy)
    if ttl_s is not None:
        return ttl_s
    return DEFAULT_RESULT_TTL_S if has_result else 0.0


def dependency_hold(doc: Document, job_id: str, now: float, policy: Policy) -> float:
    """How long a job finishing now is kept for the children that may name it
    after it finished: ``dependency_window_s`` if it has waiting children or a
    push named parents within that window (``doc.dependencies_at``), else 0."""
    window = policy.dependency_window_s
    used = doc.dependencies_at
    if job_id in doc.index.children or job_id in doc.waiting_cold.by_parent:
        return window
    if used is not None and now - _dependencies_seconds(used) <= window:
        return window
    return 0.0


def record(
    tx: Finishing,
    job: StoredJob,
    status: FinishedStatus,
    *,
    error: str | None = None,
    result: ResultData | None = None,
) -> None:
    """Record in ``tx`` that ``job`` finished (``status``).

    It always joins ``tx.ended``.  It gets an entry in the record of finished
    jobs only when someone may ask: for :func:`kept_for` (the entry holds its
    result), and at least for :func:`dependency_hold` (for children pushed
    after it finished; such an entry alone holds no result).  A job with
    neither gets no entry, so a queue that neither gives results nor uses
    dependencies pays nothing for the record."""
    tx.ended.append((job.id, status))
    policy, doc = tx.policy, tx.doc
    if (  # no TTL anywhere, no result, no dependencies: one look at each
        result is None
        and job.result_ttl_s is None
        and policy.result_ttl_s is None
        and not doc.queue_settings
        and doc.dependencies_at is None
        and not doc.index.children
    ):
        return
    ttl_s = kept_for(tx.doc, job, policy, has_result=result is not None)
    hold_s = dependency_hold(tx.doc, job.id, tx.now, policy)
    held = ttl_s <= 0
    if held:
        if hold_s <= 0:
            return
        result = None  # kept for its children only
    if error is not None and len(error) > FINISHED_ERROR_CHARS:
        error = error[:FINISHED_ERROR_CHARS]
    tx.doc.finished.add(
        FinishedJob(
            id=job.id,
            status=status,
            finished_at=tx.now_dt,
            ttl_s=float(max(ttl_s, hold_s)),
            attempts=job.attempts,
            error=error,
            result=result,
            held=held,
        )
    )


def keeps_result(doc: Document, job_id: str, policy: Policy) -> bool | None:
    """Whether a completion of ``job_id`` with a result now would keep it
    (:func:`kept_for` is above 0); None if ``doc`` does not hold it claimed
    (the completion will be judged at commit).  The broker skips storing the
    result of a job that keeps none."""
    job = doc.jobs.get(job_id)
    if job is None or job.status != "claimed":
        return None
    return kept_for(doc, job, policy, has_result=True) > 0


def ttl_of(result_ttl_s: float | None) -> float | None:
    """A push's ``result_ttl_s``, checked (None: its queue's, else the broker's)."""
    if result_ttl_s is None:
        return None
    return validate.seconds(result_ttl_s, "result_ttl_s", maximum=validate.MAX_RESULT_TTL_S)


def sweep(doc: Document, now: float, policy: Policy) -> int:
    """Prune expired entries, and evict past the record's caps or the document's:
    the record yields to jobs, so the written document stays under
    ``max_document_bytes``.  Returns how many entries were evicted."""
    record_ = doc.finished
    if not record_:
        return 0
    record_.prune(now)
    others = doc.size_upper() - record_.size_bytes()  # the document without the record
    room = policy.max_document_bytes - others - len(b',"finished":[]')
    return len(record_.evict(policy.max_finished_jobs, min(policy.max_finished_bytes, room)))
