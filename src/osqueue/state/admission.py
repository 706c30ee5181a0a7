"""A push's check against ``max_document_bytes``, without measuring the document
for each push of a commit.

A push is admitted only if the document stays under the cap with every queued
job grown by :data:`CLAIM_RESERVE_BYTES` (what its claim and completion add),
so claims and completions never take a written document past it.  Measuring
the document (:meth:`Document.size_upper <osqueue.state.document.Document.size_upper>`)
walks every section; a commit of many pushes measures it once and adds each
push's encoding from there (:class:`SizeBound`).  Ops on held jobs between the
pushes (a worker's completion and its follow-up push, the common batch) change
only jobs' encodings and the brackets of the record of finished jobs: the
bound adds what :func:`~osqueue.state.document.held_bytes` moved.  Any other
op voids it, and the next push measures again.
"""

from __future__ import annotations

from osqueue.errors import QueueFull
from osqueue.state.document import Document, held_bytes
from osqueue.state.ops import Policy

#: What a claim and its completion add to a queued job at most (the claim record,
#: attempts, first_claimed_at, done_version, done_at; for a worker name of up to
#: 24 characters and tokens and versions of up to 12 digits).  A push is
#: admitted only if the document stays under ``max_document_bytes`` with every
#: queued job grown by this, so claims and completions never take a written
#: document past the cap (a failure's error text still can).
CLAIM_RESERVE_BYTES = 280


class SizeBound:
    """One transition's bound of ``doc.size_upper()`` less the record of finished
    jobs (entries that yield to jobs: the sweep evicts from it)."""

    __slots__ = ("bound", "doc", "held", "held_moved", "kept", "policy")

    def __init__(self, doc: Document, policy: Policy) -> None:
        self.doc = doc
        self.policy = policy
        #: set by the transition while it applies the callers' ops: a run of
        #: pushes keeps :attr:`bound` from one to the next
        self.kept = False
        #: the bound (None: measure it)
        self.bound: int | None = None
        #: :func:`held_bytes` as :attr:`bound` counts it, and whether an op on a
        #: held job has moved it since
        self.held = 0
        self.held_moved = False

    def void(self) -> None:
        """Something the bound does not follow changed: the next push measures."""
        self.bound = None

    def admit(self, frag_bytes: int, *, cache: bool) -> None:
        """Raise ``QueueFull`` unless a new job encoded in ``frag_bytes`` fits (with
        room for every queued job to be claimed and completed).  ``cache``: the
        push changes nothing else the bound counts (the next one may keep it)."""
        doc = self.doc
        room = CLAIM_RESERVE_BYTES * (doc.index.queued + 1)
        limit = self.policy.max_document_bytes
        bound = self.bound
        if bound is not None and self.held_moved:  # claims or completions since
            held = held_bytes(doc)
            bound = self.bound = None if held is None else bound + held - self.held
            self.held, self.held_moved = held or 0, False
        if bound is None:
            bound = self._measure()
        if bound + frag_bytes + 1 + room > limit:
            if self.bound is not None:  # kept: maybe high by what a push discarded
                bound = self.bound = self._measure()
            if bound + frag_bytes + 1 + room > limit:
                raise QueueFull(
                    f"the queue document would exceed max_document_bytes={limit} once its "
                    "queued jobs are claimed; retry when workers have caught up"
                )
        # the job's encoding and its comma: what the written size grows by
        self.bound = bound + frag_bytes + 1 if self.kept and cache else None
        self.held += frag_bytes + 1

    def _measure(self) -> int:
        doc = self.doc
        bound = doc.size_upper() - doc.finished.size_bytes()  # (the header measured too)
        self.held, self.held_moved = held_bytes(doc) or 0, False
        return bound
