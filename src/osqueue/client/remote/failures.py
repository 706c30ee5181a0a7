"""What a failed call means, and what the client does about it.

A failed attempt is classified into an :class:`Action` (follow the address
the broker named, re-read the document, back off, or give the error to the
caller) by :func:`classify` (a gRPC error) or :func:`failure_of_status` (an
``osqueue`` Status, from a trailer or an item of a batch answer).
:class:`BatchRun` keeps the outcome of every item of one batch RPC while its
retried items go out again; :func:`holder_result` turns an item's final
outcome into what the caller sees.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, replace
from enum import Enum

import grpc

from osqueue.errors import (
    BrokerUnavailable,
    InvalidInput,
    JobNotFound,
    LeaseLost,
    MaybeCommitted,
    OsqueueError,
    PermissionDenied,
    ResourceExhausted,
    Unauthenticated,
)
from osqueue.wire._pb import queue_pb2 as pb
from osqueue.wire.status import (
    RETRY_ELSEWHERE,
    RETRY_LATER,
    broker_address_from,
    from_status,
    from_trailers,
)


class Action(Enum):
    FOLLOW = "follow"  # go to the address the broker named
    REDISCOVER = "rediscover"  # read the document again
    BACKOFF = "backoff"  # same broker, later
    RAISE = "raise"  # the caller's problem


@dataclass(frozen=True, slots=True)
class Failure:
    action: Action
    error: OsqueueError
    #: The attempt may have been applied (its answer was lost).
    unknown: bool = False
    address: str | None = None


_TRANSPORT_CODES = frozenset(
    {
        grpc.StatusCode.UNAVAILABLE,
        grpc.StatusCode.DEADLINE_EXCEEDED,
        grpc.StatusCode.CANCELLED,
        grpc.StatusCode.ABORTED,
    }
)

OK = pb.CODE_OK


def failure_of_status(status: pb.Status) -> Failure:
    """What to do about an osqueue Status that is not OK."""
    error = from_status(status)
    if status.reason in RETRY_ELSEWHERE:
        hint = status.broker_address or None
        action = Action.FOLLOW if hint else Action.REDISCOVER
        return Failure(action, error, status.maybe_committed, hint)
    if status.reason in RETRY_LATER:
        return Failure(Action.BACKOFF, error)
    if status.reason == pb.REASON_STORAGE_ERROR:
        return Failure(Action.BACKOFF, error, unknown=True)
    return Failure(Action.RAISE, error)


def classify(exc: grpc.aio.AioRpcError, address: str) -> Failure:
    """What to do about a failed call to the broker at ``address``."""
    trailers = exc.trailing_metadata()
    status = from_trailers(trailers)
    if status is not None and status.reason != pb.REASON_UNSPECIFIED:
        failure = failure_of_status(status)
        hint = failure.address or broker_address_from(trailers)
        return replace(failure, address=hint) if hint else failure
    code = exc.code()
    details = exc.details() or ""
    name = code.name.lower() if code is not None else "unknown"
    if code in _TRANSPORT_CODES:
        error = BrokerUnavailable(f"broker at {address}: {name}: {details}")
        return Failure(Action.REDISCOVER, error, unknown=True)
    if code == grpc.StatusCode.UNAUTHENTICATED:
        return Failure(Action.RAISE, Unauthenticated(details or None))
    if code == grpc.StatusCode.PERMISSION_DENIED:
        return Failure(Action.RAISE, PermissionDenied(details or None))
    if code == grpc.StatusCode.RESOURCE_EXHAUSTED:  # gRPC's own: a message too large
        return Failure(Action.RAISE, ResourceExhausted(f"broker at {address}: {details}"))
    if code == grpc.StatusCode.INVALID_ARGUMENT:
        return Failure(Action.RAISE, InvalidInput(details or None))
    if code == grpc.StatusCode.UNIMPLEMENTED:
        message = f"the server at {address} does not serve osqueue.v1 ({details})"
        return Failure(Action.RAISE, OsqueueError(message))
    return Failure(Action.RAISE, OsqueueError(f"broker at {address}: {name}: {details}"))


#: An item's final outcome: its Status (OK or an error the caller sees), or the
#: error that stopped the whole batch; and whether an earlier attempt may have
#: applied it.
ItemOutcome = tuple[pb.Status | OsqueueError, bool]


class BatchRun:
    """The items of one batch still to send, and the outcomes of the others."""

    def __init__(self, n: int) -> None:
        self.todo = list(range(n))
        self.outcomes: list[pb.Status | OsqueueError | None] = [None] * n
        self.unknown = [False] * n

    def mark_unknown(self, sent: list[int]) -> None:
        for i in sent:
            self.unknown[i] = True

    def finish(self, indices: list[int], error: OsqueueError) -> None:
        for i in indices:
            self.outcomes[i] = error
        self.todo = []

    def take(self, sent: list[int], statuses: Sequence[pb.Status]) -> pb.Status | None:
        """Record the answers; keep the items to retry; return a retry's Status if any."""
        if len(statuses) != len(sent):
            self.finish(sent, OsqueueError(f"the broker answered {len(statuses)} of {len(sent)}"))
            return None
        self.todo, again = [], None
        for i, status in zip(sent, statuses, strict=True):
            if status.reason in RETRY_ELSEWHERE or status.reason in RETRY_LATER:
                self.todo.append(i)
                self.unknown[i] = self.unknown[i] or status.maybe_committed
                again = again or status
            else:
                self.outcomes[i] = status
        return again

    def results(self) -> list[ItemOutcome]:
        return [
            (outcome if outcome is not None else BrokerUnavailable(), maybe)
            for outcome, maybe in zip(self.outcomes, self.unknown, strict=True)
        ]


def holder_result(
    what: str, job_id: str, outcome: pb.Status | OsqueueError, maybe: bool
) -> BaseException | None:
    """None for success, else the error; LeaseLost/JobNotFound after a lost answer
    becomes MaybeCommitted (our own earlier attempt may be what moved the job)."""
    if isinstance(outcome, OsqueueError):
        return outcome
    if outcome.code == OK:
        return None
    error = from_status(outcome)
    if maybe and isinstance(error, LeaseLost | JobNotFound):
        return MaybeCommitted(
            f"{what} of job {job_id}: an earlier attempt's answer was lost and it may have "
            f"been applied; the broker now says: {error}"
        )
    return error


def errors_of(outcomes: Sequence[object]) -> list[OsqueueError | None]:
    """One error (or None) per outcome; an outcome that is not an osqueue error is raised."""
    out: list[OsqueueError | None] = []
    for outcome in outcomes:
        if isinstance(outcome, OsqueueError):
            out.append(outcome)
        elif isinstance(outcome, BaseException):
            raise outcome
        else:
            out.append(None)
    return out
