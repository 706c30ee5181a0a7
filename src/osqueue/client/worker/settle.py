"""Settling: a unit's jobs are completed, failed or retried once its handler returned,
and held jobs are released at shutdown.

A job handler's return value is the job's result (:class:`~osqueue.api.EncodedResult`:
bytes as they are, str as text, anything else as JSON; None: no result).  A
value that cannot be kept (not JSON-serialisable, or above the broker's
limit) is logged and dropped: the job still completes.  A batch handler's
return value is its per-job errors, so batch jobs complete without results.

A completion rides with the claim loop's next claim when the
:class:`~osqueue.client.worker.relay.CompletionRelay` is open, and goes out
with ``complete()`` otherwise (or when the relay answers
:class:`~osqueue.client.worker.relay.SendAlone`).  An answer that the job is
no longer ours (:data:`GONE_ERRORS`) counts it lost; a transient error leaves
the job to come back after the broker's heartbeat timeout.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Mapping

from osqueue.api import EncodedResult, Job, QueueClient
from osqueue.client.worker.config import WorkerCounters
from osqueue.client.worker.handlers import BatchHandler, Retry, error_line
from osqueue.client.worker.relay import CompletionRelay, Failed, RideAnswer, SendAlone, Sent
from osqueue.client.worker.units import Outcome, Unit
from osqueue.errors import InvalidInput, JobNotFound, LeaseLost, OsqueueError, Retryable

log = logging.getLogger(__name__)

#: Answers to a heartbeat or settle call that mean the job is no longer ours.
GONE_ERRORS: tuple[type[OsqueueError], ...] = (LeaseLost, JobNotFound)
#: A completion whose result is larger than this goes out on its own, not with a
#: claim (a result refused for its size then costs no other job anything).
RIDE_MAX_RESULT_BYTES = 64 * 1024


def note_lost(counters: WorkerCounters, job: Job, exc: OsqueueError) -> None:
    """Count and log a job whose lease is lost (its result is dropped)."""
    counters.job(job.queue, "lost")
    log.warning(
        "lost the lease of a job; its result will be dropped",
        extra={"action": "lease_lost", "job": job.id, "error": error_line(exc)},
    )


class Settler:
    """Completes, fails or retries a unit's jobs, and releases jobs given back."""

    def __init__(
        self,
        client: QueueClient,
        relay: CompletionRelay,
        counters: WorkerCounters,
        worker_id: str,
    ) -> None:
        self._client = client
        self._relay = relay
        self._counters = counters
        self._worker_id = worker_id

    async def settle(self, unit: Unit, outcome: Outcome) -> None:
        """Complete or fail the unit's jobs (its slot is already free).  The
        completions are queued on the relay first, to ride with the next claim."""
        results = _per_job_errors(unit, outcome)
        value = None if isinstance(unit.handler, BatchHandler) else outcome.result
        kept = _encoded(unit.jobs[0], value) if outcome.error is None else None
        rides = {
            job.id: self._relay.queue(job, kept)
            for job, error in results
            if error is None
            and not unit.context.is_lost(job.id)
            and self._relay.open
            and (kept is None or len(kept.data) <= RIDE_MAX_RESULT_BYTES)
        }
        await asyncio.gather(
            *(self._settle_job(unit, job, err, kept, rides.get(job.id)) for job, err in results)
        )

    async def _settle_job(
        self,
        unit: Unit,
        job: Job,
        error: BaseException | None,
        result: EncodedResult | None,
        ride: asyncio.Future[RideAnswer] | None = None,
    ) -> None:
        if unit.context.is_lost(job.id):
            return
        try:
            if error is None:
                await self._complete(job, result, ride)
                self._counters.job(job.queue, "completed")
            elif isinstance(error, Retry):
                await self._client.fail(job, error=error_line(error), retry_after_s=error.after_s)
                self._counters.job(job.queue, "retried")
            else:
                line = error_line(error)
                log.warning(
                    "job %s failed: %s",
                    job.id,
                    line,
                    extra={"action": "fail", "job": job.id, "error": line},
                    # The handler's traceback, once per failure: what its author needs.
                    exc_info=error,
                )
                await self._client.fail(job, error=line)
                self._counters.job(job.queue, "failed")
        except GONE_ERRORS as exc:
            note_lost(self._counters, job, exc)
        except Retryable as exc:
            log.warning(
                "could not settle job; it will be retried after the heartbeat timeout",
                extra={"action": "settle", "job": job.id, "error": error_line(exc)},
            )

    async def _complete(
        self, job: Job, result: EncodedResult | None, ride: asyncio.Future[RideAnswer] | None
    ) -> None:
        """Complete ``job`` (with ``result``): with the next claim if it rides there
        (unless the claim loop answers :class:`SendAlone`), else on its own.  A
        result the broker refuses is dropped and the job completed without it."""
        try:
            if ride is not None:
                match await ride:
                    case Sent():
                        return
                    case Failed(error):
                        raise error
                    case SendAlone():
                        pass
            await self._client.complete(job, result=result)
        except InvalidInput as exc:
            field = exc.field or ""
            if result is None or not (field.startswith("result") or ".result" in field):
                raise
            _dropped(job, exc)
            await self._client.complete(job)

    async def release(self, jobs: list[Job]) -> None:
        """Give ``jobs`` back untouched (no attempt counted) so another worker takes them."""
        if not jobs:
            return
        results = await asyncio.gather(
            *(self._client.release(job) for job in jobs), return_exceptions=True
        )
        for job, result in zip(jobs, results, strict=True):
            if result is None:
                self._counters.job(job.queue, "released")
            elif isinstance(result, Exception):
                log.warning(
                    "could not release job; it returns after the heartbeat timeout",
                    extra={"action": "release", "job": job.id, "error": error_line(result)},
                )
            else:
                raise result  # pragma: no cover (BaseException: KeyboardInterrupt and such)
        log.info(
            "released held jobs",
            extra={"action": "release", "worker": self._worker_id, "count": len(jobs)},
        )


def _encoded(job: Job, value: object) -> EncodedResult | None:
    """A handler's return value as the job's result; None (and a warning) if it
    cannot be one."""
    try:
        return EncodedResult.of(value)
    except InvalidInput as exc:
        _dropped(job, exc)
        return None


def _dropped(job: Job, exc: OsqueueError) -> None:
    log.warning(
        "job %s: its handler's return value cannot be kept as its result; "
        "completing it without one: %s",
        job.id,
        exc.message,
        extra={"action": "result_dropped", "job": job.id, "error": exc.message},
    )


def _per_job_errors(unit: Unit, outcome: Outcome) -> list[tuple[Job, BaseException | None]]:
    if outcome.error is not None or not isinstance(unit.handler, BatchHandler):
        return [(job, outcome.error) for job in unit.jobs]
    result = outcome.result
    if not isinstance(result, Mapping):
        return [(job, None) for job in unit.jobs]
    ids = {job.id for job in unit.jobs}
    unknown = [k for k in result if k not in ids]
    if unknown:
        log.warning(
            "batch handler returned errors for jobs not in its batch",
            extra={"action": "batch_result", "unknown": unknown[:10]},
        )
    out: list[tuple[Job, BaseException | None]] = []
    for job in unit.jobs:
        value = result.get(job.id)
        if value is not None and not isinstance(value, BaseException):
            value = InvalidInput(
                f"batch handler returned {value!r} for job {job.id}; expected an exception",
                field="result",
            )
        out.append((job, value))
    return out
