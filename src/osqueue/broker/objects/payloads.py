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
a sweep deletes.  :class:`~osqueue.broker.objects.payload_sweep.PayloadSweeper` runs
the sweep every ``payload_sweep_interval_s`` while the broker serves.

What a reader must find is recorded at push: the job keeps the object's size
and the SHA-256 of its bytes (a checksum, so an object replaced by another of
the same size is caught too).  :func:`read_payload` is the one way to read a
payload object, for every reader: the claim (:meth:`Payloads.read`; the
in-process client then fails that job alone, :mod:`osqueue.broker.inproc.claimed`),
the dashboard's job page, the CLI and the Spark data source.  It checks both
and raises :class:`BadPayload` naming the job, the key, what was expected and
what was found; an object the store refuses to open (a ``file://`` key that
meets a symbolic link) is a bad payload too, never bytes from elsewhere.  Jobs
pushed before the fields existed are read unchecked.
"""

from __future__ import annotations

import asyncio
import hashlib
import logging
from collections.abc import Callable, Iterable
from typing import NamedTuple

from osqueue.broker.objects.orphans import sweep_orphans
from osqueue.errors import NotFound, OsqueueError, StorageError, UnsafePath
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


#: payloads at least this large are hashed in a thread, off the event loop
HASH_IN_THREAD_BYTES = 1 << 20


async def sha256_hex(data: bytes) -> str:
    """The hex SHA-256 of ``data`` (large payloads are hashed in a thread)."""
    if len(data) < HASH_IN_THREAD_BYTES:
        return hashlib.sha256(data).hexdigest()
    return await asyncio.to_thread(lambda: hashlib.sha256(data).hexdigest())


class Uploaded(NamedTuple):
    """A stored payload object: its key, and what a reader must find in it."""

    ref: str
    size_bytes: int
    sha256: str


class BadPayload(OsqueueError):
    """A job's payload object is missing, refused by the store, or does not hold what
    its job recorded at push; its bytes never reach a handler or a screen."""

    def __init__(
        self, job_id: str, key: str, expected: str, found: str, *, missing: bool = False
    ) -> None:
        if missing:
            message = f"payload object {key} of job {job_id} is missing (expected {expected})"
        else:
            message = (
                f"payload object {key} of job {job_id} failed its check: "
                f"expected {expected}, found {found}"
            )
        super().__init__(message)
        self.job_id = job_id
        self.key = key
        self.expected = expected
        self.found = found
        #: the object does not exist (a cancelled job's object is deleted too)
        self.missing = missing


def _expected(job: StoredJob) -> str:
    parts = []
    if job.payload_ref_bytes is not None:
        parts.append(f"{job.payload_ref_bytes} bytes")
    if job.payload_ref_sha256 is not None:
        parts.append(f"sha256 {job.payload_ref_sha256}")
    return " with ".join(parts) or "an object"


async def _check(job: StoredJob, key: str, data: bytes) -> None:
    """Raise :class:`BadPayload` if ``data`` is not what ``job`` recorded for its
    object (a size or digest not recorded is not checked)."""
    size, sha = job.payload_ref_bytes, job.payload_ref_sha256
    if size is not None and len(data) != size:
        found = f"{len(data)} bytes"
        if sha is not None:
            found += f" with sha256 {await sha256_hex(data)}"
        raise BadPayload(job.id, key, _expected(job), found)
    if sha is not None:
        digest = await sha256_hex(data)
        if digest != sha:
            raise BadPayload(job.id, key, _expected(job), f"{len(data)} bytes with sha256 {digest}")


async def read_payload(storage: Storage, job: StoredJob) -> bytes:
    """``job``'s payload: inline, or its object under ``payloads/`` checked against
    the size and SHA-256 its push recorded.  Every reader of a payload object goes
    through here.

    Raises :class:`BadPayload` if the object does not match, if the store refuses
    it (:class:`~osqueue.errors.UnsafePath`), or if it is gone (``missing``: the
    job may have left the document, and its object with it, since the caller
    looked; the caller tells which)."""
    key = job.payload_ref
    if key is None:
        return job.payload or b""
    try:
        data = await storage.get(key)
    except NotFound:
        raise BadPayload(job.id, key, _expected(job), "no object", missing=True) from None
    except UnsafePath as exc:
        raise BadPayload(
            job.id, key, _expected(job), f"an entry the store refuses ({exc})"
        ) from exc
    await _check(job, key, data)
    return data


class Payloads:
    """The payload objects of one queue, as its broker uses them."""

    def __init__(self, storage: Storage) -> None:
        self.storage = storage
        #: keys uploaded for pushes not answered yet: the sweep never takes them
        self.uploading: set[str] = set()

    async def upload(self, job_id: str, payload: bytes) -> Uploaded:
        """Store ``payload`` for a push of ``job_id``; returns the reference, with the
        size and digest the push records for readers to check.

        The key stays in :attr:`uploading` until :meth:`answered` (also when the
        upload fails: an object that landed after all is the sweep's)."""
        digest = await sha256_hex(payload)
        ref = payload_key(job_id, new_id())
        self.uploading.add(ref)
        try:
            await self.storage.put(ref, payload)
        except BaseException:
            self.uploading.discard(ref)
            raise
        return Uploaded(ref, len(payload), digest)

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

    async def read(self, job: StoredJob) -> bytes:
        """The payload of a claimed job, checked (:func:`read_payload`)."""
        return await read_payload(self.storage, job)

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
        if key in doc.waiting_cold.payloads or key in doc.delayed.payloads:  # a waiting child's
            return False
        if key in doc.dead.payloads:  # a job's in a dead segment (osqueue.state.cold_dead)
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
        return await sweep_orphans(
            self.storage,
            PAYLOAD_PREFIX,
            suspects,
            lambda key: self.orphan(key, document()),
            may_delete,
        )
