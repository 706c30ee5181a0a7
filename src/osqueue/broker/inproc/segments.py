"""The segment administration of the in-process client.

:class:`SegmentCalls` is the part of :class:`~osqueue.broker.inproc.client.LocalClient`
that readmits a segment set aside (:mod:`osqueue.broker.cold.manager`): the
broker checks the restored object against its reference, then a
:class:`~osqueue.state.Readmit` op rides the next group commit.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from osqueue.broker.inproc.claimed import raise_if_error
from osqueue.state import Counted, Readmit

if TYPE_CHECKING:
    from osqueue.broker.inproc.host import BrokerHost


class SegmentCalls:
    """``readmit_segment`` on a broker here."""

    broker: BrokerHost

    async def readmit_segment(self, key: str) -> int:
        """Put the set-aside segment ``key`` back in its stream, in seq order, once
        its object is restored: the object is checked against the size and
        SHA-256 its reference recorded first (``InvalidInput`` naming ``key`` if
        it still fails).  Returns the jobs readmitted."""
        await self.broker.segments.check_restored(key)
        result = raise_if_error(await self.broker.add_op(Readmit(key)))
        assert isinstance(result, Counted)
        return result.n
