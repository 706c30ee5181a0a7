"""Finding the broker: read the queue document, take the address it advertises.

Clients never need a broker's address configured: the broker writes it into
``queue.json`` with its lease.  Discovery only reads the document (it never
writes), so any number of clients can look at once.
"""

from __future__ import annotations

from dataclasses import dataclass

from osqueue.errors import NotFound
from osqueue.state import DOCUMENT_KEY, BrokerInfo
from osqueue.state.codec import decode_owner
from osqueue.storage.port import Storage


@dataclass(frozen=True, slots=True)
class BrokerLocation:
    """Who owns the queue and where to reach it (as the document says).

    ``lease_until`` is the owner's wall clock, for display: whether the owner is
    alive is judged by watching its versions (:mod:`osqueue.broker.lease.watch`),
    and a client simply follows the address and fails over on errors."""

    broker_id: str
    address: str | None
    epoch: int
    lease_until: float
    version: int
    #: The broker's heartbeat timeout (None from a document written before it was recorded).
    heartbeat_timeout_s: float | None = None


class Discovery:
    """Reads the broker's location from the queue document in ``storage``."""

    def __init__(self, storage: Storage) -> None:
        self.storage = storage
        #: What the last successful read found (None before one).
        self.last: BrokerLocation | None = None

    async def locate(self) -> BrokerLocation | None:
        """The current owner, or None when there is no document or no owner yet.

        Only the document's ``version`` and ``broker`` are decoded (any format).
        Raises ``CorruptDocument`` if they do not decode and ``StorageError`` if
        the document cannot be read.
        """
        version, owner = await self.read_owner() or (0, None)
        if owner is None:
            return None
        self.last = BrokerLocation(
            broker_id=owner.id,
            address=owner.address,
            epoch=owner.epoch,
            lease_until=owner.lease_until.timestamp(),
            version=version,
            heartbeat_timeout_s=owner.heartbeat_timeout_s,
        )
        return self.last

    async def read_owner(self) -> tuple[int, BrokerInfo | None] | None:
        """The document's ``version`` and ``broker`` as stored; None without a
        document (errors as :meth:`locate`)."""
        try:
            blob = await self.storage.read(DOCUMENT_KEY)
        except NotFound:
            return None
        return decode_owner(blob.data)
