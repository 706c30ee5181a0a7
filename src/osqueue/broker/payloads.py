"""Payload objects: large payloads live under ``payloads/``, not in the document.

A push whose payload is above the broker's inline limit stores it first, as an
object of its own (``payloads/<job id>=<upload id>``: every upload has a key of
its own), and the job keeps the reference.  The object is read back when the
job is claimed and deleted when the job leaves the document.

What can go wrong is covered by the sweep: an upload whose push never
committed (the broker died between the upload and the commit, or the outcome
stayed unknown), and a delete that failed after the job left.  An object is
deleted only if two sweeps an interval apart both found it unreferenced, no
push in flight uses it (:attr:`Payloads.uploading`), and the broker's lease has
at least half its length left (so no other broker can be committing).  Since
every upload has its own key, a push retried elsewhere never writes an object
a sweep deletes.  :class:`~osqueue.broker.payload_sweep.PayloadSweeper` runs
the sweep every ``payload_sweep_interval_s`` while the broker serves.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Iterable

from osqueue.errors import NotFound, StorageError
from osqueue.ids import new_id
from osqueue.state import PAYLOAD_PREFIX, Document, StoredJob
from osqueue.storage.port import Storage

log = logging.getLogger(__name__)


def payload_key(job_id: str, upload_id: str) -> str:
    """The key of one upload of ``job_id``'s payload."""
    return f"{PAYLOAD_PREFIX}{job_id}={upload_id}"


def job_of_key(key: str) -> str:
    """The job id a payload object's key names (``payloads/<id>=<upload>``)."""
    return key[len(PAYLOAD_PREFIX) :].partition("=")[0]


class Payloads:
    """The payload objects of one queue, as its broker uses them."""

    def __init__(self, storage: Storage) -> None:
        self.storage = storage
        #: keys uploaded for pushes not answered yet: the sweep never takes them
        self.uploading: set[str] = set()

    async def upload(self, job_id: str, payload: bytes) -> str:
        """Store ``payload`` for a push of ``job_id``; returns the reference.

        The key stays in :attr:`uploading` until :meth:`answered` (also when the
        upload fails: an object that landed after all is the sweep's)."""
        ref = payload_key(job_id, new_id())
        self.uploading.add(ref)
        try:
            await self.storage.put(ref, payload)
        except BaseException:
            self.uploading.discard(ref)
            raise
        return ref

    def answered(self, refs: Iterable[str | None]) -> None:
        """The pushes of these uploads are answered: the sweep may judge them now."""
        for ref in refs:
            if ref is not None:
                self.uploading.discard(ref)

    async def discard(self, refs: Iterable[str | None]) -> None:
        """Delete objects no job will read (a refused or repeated push); errors are
        logged, and the sweep deletes what is left."""
        for ref in refs:
            if ref is None:
                continue
            try:
                await self.storage.delete(ref)
            except StorageError:
                log.warning("could not delete an unused payload object", extra={"key": ref})

    async def read(self, job: StoredJob) -> bytes | None:
        """The payload of a claimed job; None if its object is gone (the job was
        cancelled, and its object deleted, between the claim and this read)."""
        if job.payload_ref is None:
            return job.payload or b""
        try:
            return await self.storage.get(job.payload_ref)
        except NotFound:
            log.warning("claimed job's payload object is gone", extra={"job": job.id})
            return None

    @staticmethod
    def refs_of(jobs: Iterable[StoredJob]) -> list[str]:
        """The payload objects of jobs that left the document (to delete)."""
        return [j.payload_ref for j in jobs if j.payload_ref]

    # ------------------------------------------------------------------ sweep

    def orphan(self, key: str, doc: Document | None) -> bool:
        """No job of ``doc`` (in the document or spilled to a segment) and no push
        in flight uses this object."""
        if key in self.uploading or doc is None:
            return False
        job = doc.jobs.get(job_of_key(key))
        if job is not None and job.payload_ref == key:
            return False
        return key not in doc.segments.payloads

    async def sweep(
        self,
        suspects: set[str],
        document: Callable[[], Document | None],
        may_delete: Callable[[], bool],
    ) -> tuple[set[str], int]:
        """One sweep: delete the unreferenced objects the previous sweep found too
        (``suspects``); return the unreferenced ones left for the next, and how
        many it deleted.

        ``document`` gives the broker's current document (it changes while this
        runs); ``may_delete`` says whether deleting is safe right now."""
        listed = await self.storage.list(PAYLOAD_PREFIX)
        orphans = {key for key in listed if self.orphan(key, document())}
        deleted = 0
        for key in sorted(orphans & suspects):
            if not may_delete():
                break
            if not self.orphan(key, document()):  # pushed or committed meanwhile
                orphans.discard(key)
                continue
            await self.storage.delete(key)
            orphans.discard(key)
            deleted += 1
        if deleted:
            log.info(
                "deleted %d payload objects no job references",
                deleted,
                extra={"action": "sweep"},
            )
        return orphans, deleted
