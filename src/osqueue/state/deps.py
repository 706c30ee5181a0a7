"""Dependencies: a job that waits until its parents completed.

``push(..., after=[parent, ...])`` makes a job ``waiting`` (not claimable)
until every parent is ``done``; it is then ``queued`` (its ``delay_s``
counts from its push).  A parent that ends ``dead`` or ``cancelled`` either
cancels the child (``on_parent_failure="cancel"``, the default; the
cancellation spreads to the child's own children the same way) or counts as
finished for it (``"run"``).  Fan-out (many children of one parent), fan-in
(one child of many parents) and chains (``after=[previous]``) all follow.

Parents are named before or beside their children: a parent must be in the
document (live, done or dead), or in a segment, or in the record of finished
jobs (:mod:`osqueue.state.finished_jobs`, asked through
:func:`osqueue.state.results.finished`), or earlier in the same batch.  A
parent whose entry of the record was sealed into an object
(:mod:`osqueue.state.finished_objects`) is read by the broker: the push
fails alone with ``ReadToConfirm`` naming the parents and the objects, and
comes back with what the broker found (``Push.sealed_parents``).
Anything else is ``JobNotFound``: the id is unknown, or its job finished too
long ago.  The record keeps a finished job for ``dependency_window_s`` when
children may name it: it had waiting children, or a push named parents
within that window (``Document.dependencies_at``); see
:func:`osqueue.state.results.record`.

The document holds each waiting job's remaining parents (``after``); the
index maps each parent to its waiting children, so a parent's end touches
its children only.  Pure: the transition calls :func:`place` on a push and
:func:`settle` with the jobs that ended in the commit.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Literal, Protocol

import msgspec

from osqueue.api import FinishedStatus
from osqueue.errors import InvalidInput, JobNotFound
from osqueue.state import cold_waiting, finished_objects, validate
from osqueue.state.dedupe_filter import ReadToConfirm
from osqueue.state.document import Document
from osqueue.state.model import StoredJob
from osqueue.state.ops import ParentRead
from osqueue.state.results import finished, maybe_spilled

MAX_PARENTS = 256
POLICIES = ("cancel", "run")

#: How a parent stands for a child being pushed or waiting.
Standing = Literal["done", "failed", "pending"]


def check(after: Sequence[str], on_parent_failure: str, job_id: str | None) -> tuple[str, ...]:
    """A push's parents, checked (each once, in order) and the policy's name."""
    if isinstance(after, str) or not isinstance(after, tuple | list):
        raise InvalidInput(f"must be a list of job ids, not {type(after).__name__}", field="after")
    if len(after) > MAX_PARENTS:
        raise InvalidInput(f"{len(after)} parents; at most {MAX_PARENTS}", field="after")
    for i, parent in enumerate(after):
        validate.job_id(parent, f"after[{i}]")
        if parent == job_id:
            raise InvalidInput("a job cannot wait for itself", field=f"after[{i}]")
    if on_parent_failure not in POLICIES:
        raise InvalidInput(
            f"{on_parent_failure!r} is not one of cancel, run", field="on_parent_failure"
        )
    return tuple(dict.fromkeys(after))


def parent_outcome(doc: Document, parent: str) -> Standing | None:
    """How ``parent`` stands as the document alone says: ``done``, ``failed`` (dead
    or cancelled), ``pending`` (live in the document), or None (not there: it may
    be in a sealed object of the record, or in a segment)."""
    ended = finished(doc, parent)
    if ended is not None:
        return _standing(ended)
    return "pending" if parent in doc.jobs else None


def _standing(ended: FinishedStatus) -> Standing:
    return "done" if ended == "done" else "failed"


def place(
    doc: Document,
    job: StoredJob,
    window_s: float,
    now: float = 0.0,
    read: Sequence[ParentRead] = (),
) -> StoredJob | None:
    """The pushed ``job`` (carrying every parent in ``after``) as it enters the
    document: ``waiting`` for the parents still pending, or ``queued`` when none
    is; None when a failed parent cancels it at once.  ``JobNotFound`` names a
    parent nobody knows; ``ReadToConfirm`` names the parents that sealed objects
    of the record may hold (unread yet: ``read`` is what the broker found)."""
    pending: list[str] = []
    failed = False
    asked: dict[str, None] = {}
    keys: dict[str, None] = {}
    for i, parent in enumerate(job.after):
        standing = parent_outcome(doc, parent)
        if standing is None and (doc.finished.sealed or read):  # finished, sealed?
            ended, unread = finished_objects.parent_keys(doc, parent, now, read)
            if unread:
                asked[parent] = None
                keys.update(dict.fromkeys(unread))
                continue
            if ended is not None:
                standing = _standing(ended)
        # asked after the sealed record: a segment's id bounds may hold a finished job
        if standing is None and maybe_spilled(doc, parent):
            standing = "pending"
        if standing is None:
            raise JobNotFound(
                f"after[{i}]: no job {parent} (not live, and not among the jobs the "
                f"record of finished jobs holds: it keeps them {window_s:g}s while "
                "children may name them); push parents before their children"
            )
        if standing == "pending":
            pending.append(parent)
        elif standing == "failed":
            failed = True
    if asked:
        raise ReadToConfirm(job.id, tuple(keys), tuple(asked))
    if failed and job.on_parent_failure == "cancel":
        return None
    if pending:
        return msgspec.structs.replace(job, status="waiting", after=tuple(pending))
    return msgspec.structs.replace(job, status="queued", after=())


class Host(Protocol):
    """What :func:`settle` needs of the transition building the new version."""

    doc: Document

    def put_job(self, job: StoredJob) -> None:
        """Store a changed job."""
        ...

    def cancel_child(self, job: StoredJob) -> None:
        """Take a waiting job out as cancelled (counted, recorded, and appended to
        the list :func:`settle` walks)."""
        ...


def settle(host: Host, ended: list[tuple[str, FinishedStatus]]) -> None:
    """Release or cancel the waiting children of the jobs that ``ended`` (in order;
    a child cancelled here is appended to ``ended`` by ``host.cancel_child``, so
    cancellation spreads down)."""
    doc = host.doc
    children = doc.index.children
    i = 0
    while i < len(ended):
        parent, outcome = ended[i]
        i += 1
        kids = children.get(parent)
        if not kids:
            continue
        for child_id in list(kids):
            child = doc.jobs.get(child_id)
            if child is None or child.status != "waiting" or parent not in child.after:
                continue
            if outcome != "done" and child.on_parent_failure == "cancel":
                host.cancel_child(child)
                continue
            rest = tuple(p for p in child.after if p != parent)
            if rest:
                host.put_job(msgspec.structs.replace(child, after=rest))
            else:
                host.put_job(msgspec.structs.replace(child, status="queued", after=()))
    if doc.waiting_cold:  # and the objects of waiting children (no job read)
        cold_waiting.settle(doc, ended)
