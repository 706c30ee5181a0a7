"""Ride-along completions: a finished job's completion goes out with the next claim.

When a handler returns, its slot is free at once, and the claim for the next
job carries the completion of the last one (``complete_and_claim``: one call,
one commit).  The job's task queues its completion on the
:class:`CompletionRelay` (:meth:`~CompletionRelay.queue`) and awaits the
answer; the claim loop takes what is queued (:meth:`~CompletionRelay.take`),
sends it with its claim and answers each ride:

* :class:`Sent`: the broker took the completion;
* :class:`Failed`: it did not, with this error (for that job, or for the
  whole call);
* :class:`SendAlone`: it never went out (no free slot to claim for, a failed
  claim, the loop stopping): the job's task sends it with ``complete()``.

A ride is only queued while the relay is :attr:`~CompletionRelay.open`: the
claim loop is not parked in a long poll or a backoff (nothing would carry the
completion until it returns), and the worker is not stopping.  Every client
can complete and claim in one call (it is a method of
:class:`~osqueue.api.QueueClient`; the worker refuses a client without it).
"""

from __future__ import annotations

import asyncio
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Final, TypeAlias

from osqueue.api import EncodedResult, Job
from osqueue.errors import OsqueueError


@dataclass(frozen=True, slots=True)
class Sent:
    """The completion went out with a claim and the broker took it."""


@dataclass(frozen=True, slots=True)
class Failed:
    """The completion went out with a claim and was answered with ``error``."""

    error: OsqueueError


@dataclass(frozen=True, slots=True)
class SendAlone:
    """The completion did not go out: the job's own task sends it with ``complete()``."""


RideAnswer: TypeAlias = Sent | Failed | SendAlone

SENT: Final = Sent()
SEND_ALONE: Final = SendAlone()


@dataclass(frozen=True, slots=True)
class Ride:
    """A completion queued to ride with the next claim, and its answer to come."""

    job: Job
    answer: asyncio.Future[RideAnswer]
    #: the job's result (None: none)
    result: EncodedResult | None = None


class CompletionRelay:
    """Completions queued to ride with the claim loop's next claim; see the module docstring."""

    __slots__ = ("_closed", "_queued", "parked")

    def __init__(self) -> None:
        #: the claim loop waits in a long poll or a backoff: completions must not wait for it
        self.parked = False
        self._closed = False
        self._queued: list[Ride] = []

    @property
    def open(self) -> bool:
        """A completion queued now rides with the next claim."""
        return not self.parked and not self._closed

    @property
    def pending(self) -> bool:
        """Some completion is queued and not yet taken by the claim loop."""
        return bool(self._queued)

    def close(self) -> None:
        """The worker is stopping: queue no more (what is queued is still taken)."""
        self._closed = True

    def queue(self, job: Job, result: EncodedResult | None = None) -> asyncio.Future[RideAnswer]:
        """Queue ``job``'s completion (with its ``result``) for the next claim (only
        while :attr:`open`)."""
        answer: asyncio.Future[RideAnswer] = asyncio.get_running_loop().create_future()
        self._queued.append(Ride(job, answer, result))
        return answer

    def take(self) -> list[Ride]:
        """Everything queued so far, for the claim loop to send (or answer)."""
        rides, self._queued = self._queued, []
        return rides

    def send_all_alone(self) -> None:
        """Give every queued completion back to its job's task (:class:`SendAlone`)."""
        answer_all(self.take(), SEND_ALONE)


def answer_all(rides: Sequence[Ride], answer: RideAnswer) -> None:
    """Answer every ride that is still awaited with ``answer``."""
    for ride in rides:
        if not ride.answer.done():
            ride.answer.set_result(answer)


def answer_each(rides: Sequence[Ride], errors: Sequence[OsqueueError | None]) -> None:
    """Answer each ride with the broker's answer to its completion (``None``: taken)."""
    for ride, error in zip(rides, errors, strict=True):
        if not ride.answer.done():
            ride.answer.set_result(SENT if error is None else Failed(error))
