"""Result objects: results too large for the document live under ``results/``.

A completion whose result is above ``result_inline_max_bytes`` stores it
first, as an object of its own (``results/<job id>=<upload id>``: every
upload has a key of its own), and the completion carries the reference; the
record of finished jobs keeps it (:mod:`osqueue.state.finished_jobs`).  The object
is read back by ``result()``.

Objects nothing references are deleted by the orphan sweep
(:mod:`osqueue.broker.objects.orphans`, run by
:class:`~osqueue.broker.objects.result_sweep.ResultSweeper`): the upload of a
completion that never committed (refused, a stale token, the broker died
between the upload and the commit) and the object of an entry that expired or
was evicted.  Until its completion is answered an upload is in
:attr:`ResultObjects.uploading`, out of the sweep's reach.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable, Callable, Iterable, Sequence

from osqueue.api import EncodedResult, Job
from osqueue.broker.objects.orphans import sweep_orphans
from osqueue.errors import (
    NOT_APPLIED,
    CorruptDocument,
    InvalidInput,
    NotFound,
    OsqueueError,
    StorageError,
)
from osqueue.ids import new_id
from osqueue.state import RESULT_PREFIX, Complete, Document, Op, Policy, Result, ResultData
from osqueue.state.results import check_value, job_of_result_key, keeps_result, result_key
from osqueue.storage.port import Storage

log = logging.getLogger(__name__)


class ResultObjects:
    """The result objects of one queue, as its broker uses them."""

    def __init__(
        self,
        storage: Storage,
        policy: Policy,
        document: Callable[[], Document | None] = lambda: None,
    ) -> None:
        self.storage = storage
        self._policy = policy
        #: the broker's committed document (None: not known), to tell whether a job
        #: keeps its result at all
        self._document = document
        self._inline_max = policy.result_inline_max_bytes
        self._max = policy.max_result_bytes
        #: keys uploaded for completions not answered yet: the sweep never takes them
        self.uploading: set[str] = set()

    async def data(self, job_id: str, result: object) -> ResultData | None:
        """The result a completion of ``job_id`` carries: ``result`` encoded
        (:meth:`EncodedResult.of <osqueue.api.EncodedResult.of>`) and checked,
        inline when small, else uploaded (the key stays in :attr:`uploading`
        until :meth:`answered`).  A job that keeps no result (its
        ``result_ttl_s`` is 0: :func:`~osqueue.state.results.keeps_result`) has
        its result checked but neither uploaded nor sent: None."""
        encoded = EncodedResult.of(result)
        if encoded is None:
            return None
        size = len(encoded.data)
        if size > self._max:
            raise InvalidInput(
                f"{size} bytes is above the limit of {self._max} (max_result_bytes)",
                field="result",
            )
        check_value(encoded.kind, encoded.data)
        doc = self._document()
        if doc is not None and keeps_result(doc, job_id, self._policy) is False:
            return None
        if size <= self._inline_max:
            return ResultData(encoded.kind, size, value=encoded.data)
        ref = result_key(job_id, new_id())
        self.uploading.add(ref)
        try:
            await self.storage.put(ref, encoded.data)
        except BaseException:
            self.uploading.discard(ref)
            raise
        return ResultData(encoded.kind, size, ref=ref)

    async def completions(
        self, jobs: Sequence[Job], results: Sequence[object] | None
    ) -> list[Complete | OsqueueError]:
        """One completion op per job, its result encoded and checked (and uploaded,
        if large), or the error its result got."""
        if results is not None and len(results) != len(jobs):
            raise InvalidInput(
                f"{len(results)} results for {len(jobs)} jobs; give one per job", field="results"
            )
        if results is None:
            return [Complete(job.id, job.token) for job in jobs]
        outcomes = await self._all_data(jobs, results)
        return [
            outcome if isinstance(outcome, OsqueueError) else Complete(job.id, job.token, outcome)
            for job, outcome in zip(jobs, outcomes, strict=True)
        ]

    async def _all_data(
        self, jobs: Sequence[Job], results: Sequence[object]
    ) -> list[ResultData | OsqueueError | None]:
        """Each job's result (:meth:`data`), the uploads made concurrently.  If the
        caller is cancelled meanwhile, the objects that landed are left to the sweep."""
        tasks = [
            asyncio.ensure_future(self._data_or_error(job.id, result))
            for job, result in zip(jobs, results, strict=True)
        ]
        try:
            return list(await asyncio.gather(*tasks))
        except BaseException:
            for task in tasks:
                task.cancel()
            landed = await asyncio.gather(*tasks, return_exceptions=True)
            self.answered(d.ref for d in landed if isinstance(d, ResultData))
            raise

    async def _data_or_error(self, job_id: str, result: object) -> ResultData | OsqueueError | None:
        try:
            return await self.data(job_id, result)
        except OsqueueError as exc:
            return exc

    async def submit(
        self,
        ops: Sequence[Op | OsqueueError],
        submit_many: Callable[[Sequence[Op]], Awaitable[list[Result]]],
        document: Callable[[], Document],
    ) -> list[Result]:
        """Submit ``ops`` (completions, maybe a claim) with ``submit_many``; one
        answer each (an error in ``ops`` is its own answer).

        The uploads stay out of the sweep's reach until the broker answers, even
        if the caller is cancelled first; those no entry of the committed
        ``document()`` keeps (a refused or repeated completion, a job that keeps
        no record) are deleted.  An outcome not known keeps its object (the
        sweep judges it)."""
        real = [op for op in ops if not isinstance(op, OsqueueError)]
        refs = _refs(real)
        answered: Awaitable[list[Result]] = submit_many(real)
        if refs:
            submitted = asyncio.ensure_future(answered)
            submitted.add_done_callback(lambda _: self.answered(refs))
            answered = asyncio.shield(submitted)
        try:
            answers = iter(await answered)
        except OsqueueError:  # refused before anything was queued: none was applied
            await self.discard(refs)
            raise
        out: list[Result] = []
        unused: list[str] = []
        for op in ops:
            answer = op if isinstance(op, OsqueueError) else next(answers)
            out.append(answer)
            if isinstance(op, Complete) and op.result is not None and op.result.ref is not None:
                kept = not isinstance(answer, NOT_APPLIED) and (
                    isinstance(answer, OsqueueError) or _kept(document(), op)
                )
                if not kept:
                    unused.append(op.result.ref)
        await self.discard(unused)
        return out

    def answered(self, refs: Iterable[str | None]) -> None:
        """The completions of these uploads are answered: the sweep may judge them."""
        for ref in refs:
            if ref is not None:
                self.uploading.discard(ref)

    async def discard(self, refs: Iterable[str | None]) -> None:
        """Delete objects nothing will read (a refused or repeated completion);
        errors are logged, and the sweep deletes what is left."""
        for ref in refs:
            if ref is None:
                continue
            try:
                await self.storage.delete(ref)
            except StorageError:
                log.warning("could not delete an unused result object", extra={"key": ref})

    async def read(self, data: ResultData) -> EncodedResult | None:
        """The result a record references; None if its object is gone.  An object
        whose length is not the entry's ``size`` (replaced or cut short outside
        osqueue) is ``CorruptDocument`` naming its key."""
        if data.value is not None:
            return EncodedResult(data.kind, data.value)
        assert data.ref is not None
        try:
            found = await self.storage.get(data.ref)
        except NotFound:
            log.warning("a referenced result object is gone", extra={"key": data.ref})
            return None
        if len(found) != data.size:
            log.error(
                "a result object does not hold what its entry says",
                extra={"key": data.ref, "expected_bytes": data.size, "found_bytes": len(found)},
            )
            raise CorruptDocument(
                f"result object {data.ref!r} holds {len(found)} bytes; its entry says {data.size}"
            )
        return EncodedResult(data.kind, found)

    # ------------------------------------------------------------------ sweep

    def orphan(self, key: str, doc: Document | None) -> bool:
        """No entry of ``doc``'s record and no completion in flight uses this object."""
        if key in self.uploading or doc is None:
            return False
        if key in doc.finished.sealed.results:  # an entry sealed in an object uses it
            return False
        entry = doc.finished.get(job_of_result_key(key))
        return entry is None or entry.result is None or entry.result.ref != key

    async def sweep(
        self,
        suspects: set[str],
        document: Callable[[], Document | None],
        may_delete: Callable[[], bool],
    ) -> tuple[set[str], int]:
        """One sweep of ``results/`` (see :func:`~osqueue.broker.objects.orphans.sweep_orphans`)."""
        return await sweep_orphans(
            self.storage,
            RESULT_PREFIX,
            suspects,
            lambda key: self.orphan(key, document()),
            may_delete,
        )


def _refs(ops: Sequence[object]) -> list[str]:
    """The result objects the completions among ``ops`` reference."""
    return [
        op.result.ref
        for op in ops
        if isinstance(op, Complete) and op.result is not None and op.result.ref is not None
    ]


def _kept(doc: Document, op: Complete) -> bool:
    """The record's entry for ``op``'s job holds ``op``'s result object."""
    entry = doc.finished.get(op.job_id)
    ref = op.result.ref if op.result is not None else None
    if ref is not None and ref in doc.finished.sealed.results:  # sealed since
        return True
    return entry is not None and entry.result is not None and entry.result.ref == ref
