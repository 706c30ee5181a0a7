"""Another broker's lease, judged by the one who watches it.

A lease is only as good as the clocks that read it.  ``lease_until`` is the
writer's wall clock plus the lease: a standby whose clock runs an hour ahead
would see every live lease as long run out, and a lease written by a clock an
hour ahead would hold every standby off for an hour after its writer died.  So
no wall clock decides.  The observer notes, on its own monotonic clock, when it
first saw the document as it is now (its version, owner and epoch); the lease
has run out once it has seen nothing new for the lease's length (``lease_s``,
which the owner records in the document) plus the margin.  A broker that is
alive writes at least every third of its lease, so the observer sees a new
version long before that; one that died or froze writes nothing, and the
observer takes over a lease length after the last version it saw.  The price:
an observer that has just started (or just read the document for the first
time) watches a whole lease before it takes over, however old the lease is.

A lease released by a graceful stop (``lease_s`` 0) is vacant at once.  The
wall clock is still read, for one thing: a lease whose end lies further ahead
of this clock than its length (the writer's clock runs ahead, or ours behind),
or that had already ended by this clock when its writer renewed it (ours runs
ahead), is logged as suspect once per broker and epoch with both times.  It
changes nothing else.
"""

from __future__ import annotations

import logging
from typing import NamedTuple

from osqueue.state import BrokerInfo, to_datetime

log = logging.getLogger(__name__)


class _Sight(NamedTuple):
    """What makes a document new to the observer."""

    version: int
    broker_id: str
    epoch: int


class LeaseWatch:
    """One observer's view of the owner's lease (a standby, a client about to start
    a broker of its own).  Feed it every read (:meth:`see`); it answers how long the
    lease has left on the observer's monotonic clock."""

    def __init__(self, margin_s: float) -> None:
        self._margin_s = margin_s
        self._sight: _Sight | None = None
        self._since = 0.0  # monotonic time of the first read that returned _sight
        self._suspected: set[tuple[str, int, str]] = set()  # logged once each

    def see(self, version: int, owner: BrokerInfo | None, mono: float, wall: float) -> float:
        """A read of the document (``version``, its ``owner``) returned at ``mono`` on
        the observer's monotonic clock and ``wall`` on its wall clock: the seconds
        (monotonic) until the lease counts as run out, 0 if it has."""
        if owner is None or owner.lease_s == 0:
            return 0.0  # no owner, or a lease released by a graceful stop
        sight = _Sight(version, owner.id, owner.epoch)
        if sight != self._sight:
            renewed = self._sight is not None
            self._sight, self._since = sight, mono
            self._check_clock(owner, wall, renewed)
        return max(0.0, self._since + owner.lease_s + self._margin_s - mono)

    def _check_clock(self, owner: BrokerInfo, wall: float, renewed: bool) -> None:
        """Log (once per broker, epoch and kind) a lease that no clock within the
        margin of the writer's could have written."""
        until = owner.lease_until.timestamp()
        if until - wall > owner.lease_s + self._margin_s:
            self._suspect(owner, wall, "ahead", "its end lies further ahead than its length")
        elif renewed and wall - until > self._margin_s:
            # Seen new just now, so written just now: its end cannot be past yet.
            self._suspect(owner, wall, "behind", "it had already ended when it was renewed")

    def _suspect(self, owner: BrokerInfo, wall: float, kind: str, why: str) -> None:
        key = (owner.id, owner.epoch, kind)
        if key in self._suspected:
            return
        self._suspected.add(key)
        log.warning(
            "suspect lease of broker %s (epoch %d): %s by this clock (lease until %s, "
            "this clock %s, lease %gs); a clock is skewed, and only the versions seen "
            "decide when it runs out",
            owner.id,
            owner.epoch,
            why,
            owner.lease_until.isoformat(),
            to_datetime(wall).isoformat(),
            owner.lease_s,
            extra={
                "action": "lease_suspect",
                "broker": owner.id,
                "epoch": owner.epoch,
                "lease_until": owner.lease_until.timestamp(),
                "observer_now": wall,
                "skew": kind,
            },
        )
