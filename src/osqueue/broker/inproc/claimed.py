"""A claim's answer made into the jobs a handler gets.

:class:`ClaimedJobs` is what :class:`~osqueue.broker.inproc.client.LocalClient` does
after a claim commits: inline payloads are used as they are, payload objects
(``payloads/``) are read and checked against the size and checksum their push
recorded (:mod:`osqueue.broker.objects.payloads`).  A job whose object is missing or
wrong never reaches a handler: it is failed through the normal ``Fail`` path,
with an error naming the object, and the rest of the claim is returned.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Sequence
from typing import TYPE_CHECKING

from osqueue.api import Job
from osqueue.broker.objects.payloads import BadPayload
from osqueue.errors import InvalidInput, OsqueueError
from osqueue.state import Claimed, Fail, Result, StoredJob

if TYPE_CHECKING:
    from osqueue.broker.inproc.host import BrokerHost

log = logging.getLogger(__name__)


def raise_if_error(result: Result) -> Result:
    """``result``, unless it is an error: then that error is raised."""
    if isinstance(result, OsqueueError):
        # One error instance can answer many ops: drop the traceback of earlier raises.
        raise result.with_traceback(None)
    return result


class ClaimedJobs:
    """The claimed jobs of one broker's claims, with their payloads."""

    def __init__(self, broker: BrokerHost) -> None:
        self.broker = broker

    async def jobs(self, result: Result) -> list[Job]:
        """The jobs of a claim's ``result`` (its error raised), payloads in hand."""
        if type(result) is not Claimed:  # an error, or an answer of the wrong kind
            raise_if_error(result)
            raise InvalidInput(f"unexpected result {type(result).__name__} for a claim", field="op")
        out: list[Job] = []
        for stored in result.jobs:
            if stored.payload_ref is not None:  # an object under payloads/: read them all
                return await self._with_objects(result.jobs)
            out.append(_job(stored, stored.payload or b""))
        return out

    async def _with_objects(self, claimed: Sequence[StoredJob]) -> list[Job]:
        """The claimed jobs with their payloads read and checked.  A job whose object
        is missing or does not hold what its push recorded never reaches a handler:
        it is failed (:meth:`_fail_unreadable`) and left out, as is a job that left
        the document since the claim (cancelled: its object is deleted too).  The
        other jobs of the claim are returned."""
        reads = await asyncio.gather(*(self._read_payload(j) for j in claimed))
        out: list[Job] = []
        bad: list[tuple[StoredJob, BadPayload]] = []
        for job, got in zip(claimed, reads, strict=True):
            if isinstance(got, BadPayload):
                bad.append((job, got))
            else:
                out.append(_job(job, got))
        if bad:
            await self._fail_unreadable(bad)
        return out

    async def _read_payload(self, job: StoredJob) -> bytes | BadPayload:
        try:
            return await self.broker.payloads.read(job)
        except BadPayload as exc:
            return exc

    async def _fail_unreadable(self, bad: Sequence[tuple[StoredJob, BadPayload]]) -> None:
        """Fail each claimed job whose payload object is bad, through the normal
        ``Fail`` path (so retries and the dead-letter apply), with an error naming
        the object.  A missing object of a job no longer held under this claim is
        not bad: the job left (it was cancelled) and its object went with it."""
        doc = self.broker.document
        ops: list[Fail] = []
        for job, exc in bad:
            assert job.claim is not None
            extra = {"action": "payload-check", "job": job.id, "key": exc.key}
            current = doc.jobs.get(job.id)
            claim = current.claim if current is not None else None
            if exc.missing and (claim is None or claim.token != job.claim.token):
                log.warning("a claimed job left before its payload was read", extra=extra)
                continue
            log.error(
                "claimed job %s is failed: %s",
                job.id,
                exc,
                extra={**extra, "expected": exc.expected, "found": exc.found},
            )
            ops.append(Fail(job.id, job.claim.token, str(exc)))
        if not ops:
            return
        try:
            results = await self.broker.submit_many(ops)
        except OsqueueError as exc:  # the broker stopped: the claims time out instead
            log.warning("could not fail jobs with bad payload objects: %s", exc)
            return
        for op, result in zip(ops, results, strict=True):
            if isinstance(result, OsqueueError):
                log.warning(
                    "could not fail job %s with a bad payload object: %s",
                    op.job_id,
                    result,
                    extra={"action": "payload-check", "job": op.job_id},
                )


def _job(job: StoredJob, payload: bytes) -> Job:
    assert job.claim is not None
    return Job(
        id=job.id,
        queue=job.queue,
        payload=payload,
        attempts=job.attempts,
        max_attempts=job.max_attempts,
        token=job.claim.token,
        priority=job.priority,
        key=job.key,
        created_at=job.created_at.timestamp(),
        group=job.group,
    )
