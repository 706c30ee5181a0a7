"""Where a broker is in its life, and what an op is told once it no longer serves."""

from __future__ import annotations

import asyncio
from enum import Enum
from typing import TYPE_CHECKING

from osqueue.errors import NotBroker, OsqueueError, ShuttingDown

if TYPE_CHECKING:
    from osqueue.broker.lease.hold import Lease


class State(Enum):
    """Where a broker is in its life (``Broker.state``)."""

    NEW = "new"
    STANDBY = "standby"
    SERVING = "serving"
    STOPPING = "stopping"
    STOPPED = "stopped"
    STEPPED_DOWN = "stepped-down"
    FAILED = "failed"


class Lifecycle:
    """The broker's :class:`State`, the failure that ended it, and its graceful stop.

    ``new`` -> (``standby`` ->) ``serving`` -> ``stopping`` -> ``stopped``; a
    serving or stopping broker can end ``stepped-down`` (another broker owns the
    document) or ``failed`` (:attr:`failure` says why).  :attr:`serving` is kept
    beside the state because every op checks it.  :attr:`closing` stays true from
    the moment a graceful stop begins: the commit loop writes its last version
    then, with the address cleared and the lease ended.
    """

    def __init__(self, lease: Lease) -> None:
        self._lease = lease
        self._state = State.NEW
        #: the broker serves: it takes ops (``state is State.SERVING``)
        self.serving = False
        #: the error that stopped the broker (``State.FAILED``)
        self.failure: OsqueueError | None = None
        #: a graceful stop has begun
        self.closing = False
        #: set once the broker has stopped, for any reason
        self.closed = asyncio.Event()

    @property
    def state(self) -> State:
        return self._state

    @state.setter
    def state(self, state: State) -> None:
        self._state = state
        self.serving = state is State.SERVING

    def check_open(self) -> None:
        """Raise what an op is told if the broker takes no ops now."""
        if not self.serving:
            raise self.refusal()

    def refusal(self) -> OsqueueError:
        """What an op is told once the broker takes no ops."""
        if self.failure is not None:
            return self.failure.with_traceback(None)  # shared by many callers
        if self._state is State.STEPPED_DOWN:
            return NotBroker("this broker stepped down", address=self._lease.owner_address)
        return ShuttingDown()

    def stop_error(self, maybe: bool) -> OsqueueError:
        """What the ops of a batch whose write did not commit are told: the failure,
        or (after a step-down) where the new broker is; ``maybe``: an attempt's
        outcome stayed unknown, so the op may have been applied before the takeover."""
        if self.failure is not None:
            return self.failure
        note = " (the op may have been applied before the takeover)" if maybe else ""
        return NotBroker(
            f"another broker owns the queue now{note}",
            address=self._lease.owner_address,
            maybe_committed=maybe,
        )
