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
"""

from __future__ import annotations

import dataclasses

from osqueue.state import Policy

#: per commit, the remembered demand keeps this share of itself
_DECAY = 0.9


class ClaimDemand:
    """The claims per commit a deep queue's head must cover, and the policy for it."""

    def __init__(self, configured: Policy) -> None:
        self._configured = configured
        self._demand = 0.0
        self.policy = configured
        #: the largest claim per commit whose demand the configured ``head_jobs`` covers
        self._small = _power_of_two(configured.head_jobs // 2 + 1) // 2

    def after_commit(self, claimed: int) -> bool:
        """Count a commit that claimed ``claimed`` jobs; True if :attr:`policy` changed."""
        if claimed <= self._small and self.policy.head_jobs == self._configured.head_jobs:
            # The configured head holds and this claim cannot raise it: nothing
            # changes (the demand remembered asks for no more than the head either,
            # and any claim that would raise it is above it, so left undecayed it
            # decides nothing).
            return False
        self._demand = max(float(claimed), self._demand * _DECAY)
        want = 2 * _power_of_two(int(self._demand))
        base = self._configured
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
        return True


def _power_of_two(n: int) -> int:
    """The least power of two at least ``n`` (0 for 0)."""
    return 0 if n <= 0 else 1 << (n - 1).bit_length()
