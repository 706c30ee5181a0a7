"""Finding the broker: read the queue document, take the address it advertises.

Clients never need a broker's address configured: the broker writes it into
``queue.json`` with its lease.  Discovery only reads the document (it never
writes), so any number of clients can look at once.
"""

from __future__ import annotations

from dataclasses import dataclass

from osqueue.errors import NotFound
from osqueue.state import DOCUMENT_KEY
from osqueue.state.codec import decode_owner
from osqueue.storage.port import Storage


@dataclass(frozen=True, slots=True)
class BrokerLocation:
    """Who owns the queue, where to reach it, and until when (as the document says)."""

    broker_id: str
    address: str | None
    epoch: int
    lease_until: float
    version: int
    #: The broker's heartbeat timeout (None from a document written before it was recorded).
    heartbeat_timeout_s: float | None = None

    def live(self, now: float, margin_s: float = 0.0) -> bool:
        """True while the lease (plus a clock-skew margin) has not run out at ``now``."""
        return self.lease_until + margin_s > now


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
        try:
            blob = await self.storage.read(DOCUMENT_KEY)
        except NotFound:
            return None
        version, owner = decode_owner(blob.data)
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
