"""How much of a deep queue the document keeps, sized to the claims it serves.

The configured ``head_jobs``, ``load_jobs`` and ``spill_above_jobs`` suit
claims of a few hundred jobs per commit.  A commit that claims more than the
head holds stops its claims at the barrier, and they wait a whole commit for
the load (a round trip of the storage's latency each); a queue whose working
set is larger than the spill threshold spills jobs that are claimed a moment
later.  So the segment manager keeps each of the three at least twice the
claims of a recent commit: :class:`ClaimDemand` tracks that demand (the
largest claim count of a commit, decaying by a tenth a commit, rounded up to
a power of two so the sizes change seldom) and gives the policy to plan with.
A queue claimed a few hundred jobs at a time keeps the configured sizes.

What the demand adds is bounded in bytes: a stream's head and its loads grow
to ``head_max_bytes`` of its jobs at most (:meth:`ClaimDemand.sizes`, by the
average job of its first segment), never below the configured sizes.  So a
client claiming 10,000 jobs at a time costs the document that much of its
head, not four times its claims (``2 * head_jobs`` with a load in flight):
its claims stop at the barrier more often, and the load then goes at once.
"""

from __future__ import annotations

import dataclasses

from osqueue.state import Document, Policy, SegmentRef

#: per commit, the remembered demand keeps this share of itself
_DECAY = 0.9


class ClaimDemand:
    """The claims per commit a deep queue's head must cover, and the policy for it."""

    def __init__(self, configured: Policy, max_bytes: int | None = None) -> None:
        #: the configured sizes (what a queue with no job claimed keeps)
        self.configured = configured
        self._max_bytes = max_bytes
        self._demand = 0.0
        self.policy = configured
        #: the largest claim per commit whose demand the configured ``head_jobs`` covers
        self._small = _power_of_two(configured.head_jobs // 2 + 1) // 2
        #: a commit that claims no more than this changes nothing: :attr:`_small` while
        #: the configured head holds, else -1 (every commit decays the demand then)
        self.steady_claims = self._small

    def after_commit(self, claimed: int) -> bool:
        """Count a commit that claimed ``claimed`` jobs; True if :attr:`policy` changed."""
        if claimed <= self.steady_claims:
            # The configured head holds and this claim cannot raise it: nothing
            # changes (the demand remembered asks for no more than the head either,
            # and any claim that would raise it is above it, so left undecayed it
            # decides nothing).
            return False
        self._demand = max(float(claimed), self._demand * _DECAY)
        want = 2 * _power_of_two(int(self._demand))
        base = self.configured
        head = max(base.head_jobs, want)
        if head == self.policy.head_jobs:
            return False
        above = base.spill_above_jobs
        self.policy = dataclasses.replace(
            base,
            head_jobs=head,
            load_jobs=max(base.load_jobs, want),
            spill_above_jobs=None if above is None else max(above, want),
        )
        self.steady_claims = self._small if head == base.head_jobs else -1
        return True

    def sizes(self, first: SegmentRef, claimed: bool = True) -> tuple[int, int]:
        """``(head_jobs, load_jobs)`` for the stream whose first segment is ``first``:
        the demand's, but at most ``max_bytes`` of jobs the size of ``first``'s
        average one (and never below the configured sizes).  ``claimed``: its
        queue has jobs claimed; one that has none is claimed by nobody now, and
        keeps the configured sizes (the demand is the broker's, not its)."""
        policy, max_bytes = self.policy, self._max_bytes
        if not claimed:
            policy = self.configured
        head, load = policy.head_jobs, policy.load_jobs
        if max_bytes is None or policy is self.configured:
            return head, load
        cap = max_bytes * max(1, first.count) // max(1, first.size_bytes)
        base = self.configured
        return max(base.head_jobs, min(head, cap)), max(base.load_jobs, min(load, cap))

    def head_of(self, doc: Document, first: SegmentRef) -> int:
        """``head_jobs`` for the stream of ``first`` after a commit."""
        return self.sizes(first, _claims_held(doc, first.queue))[0]

    def load_of(self, doc: Document | None, ref: SegmentRef) -> int:
        """The jobs the next ``Load`` of ``ref`` puts back."""
        return self.sizes(ref, doc is None or _claims_held(doc, ref.queue))[1]


def _claims_held(doc: Document, queue: str) -> bool:
    return (queue, "claimed") in doc.index.counts


def _power_of_two(n: int) -> int:
    """The least power of two at least ``n`` (0 for 0)."""
    return 0 if n <= 0 else 1 << (n - 1).bit_length()
