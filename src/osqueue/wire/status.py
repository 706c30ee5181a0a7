"""Errors on the wire: one table between osqueue errors, gRPC codes and ``Status``.

The server turns an :class:`~osqueue.errors.OsqueueError` into a
:class:`Status` message (per item inside a batch response, or for a whole call
in the ``osqueue-status-bin`` trailer); the remote client turns it back into
the same exception class the in-process client raises.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass

import grpc

from osqueue import errors
from osqueue.wire._pb import queue_pb2 as pb

#: Trailing metadata key holding a serialized :class:`Status` for a failed call.
STATUS_TRAILER = "osqueue-status-bin"
#: Trailing metadata key holding the new broker's ``host:port`` (NotBroker).
BROKER_ADDRESS_TRAILER = "osqueue-broker-address"


@dataclass(frozen=True, slots=True)
class _Kind:
    error: type[errors.OsqueueError]
    reason: pb.Reason.ValueType
    code: grpc.StatusCode
    #: Builds the exception from a Status (its extra fields included).
    build: Callable[[pb.Status], errors.OsqueueError]


def _plain(error: type[errors.OsqueueError]) -> Callable[[pb.Status], errors.OsqueueError]:
    def build(status: pb.Status) -> errors.OsqueueError:
        return error(status.message or None)

    return build


def _invalid(status: pb.Status) -> errors.OsqueueError:
    return errors.InvalidInput(status.message or None, field=status.field or None)


def _duplicate(status: pb.Status) -> errors.OsqueueError:
    return errors.DuplicateKey(status.message or None, existing_id=status.existing_id or None)


def _not_broker(status: pb.Status) -> errors.OsqueueError:
    return errors.NotBroker(
        status.message or None,
        address=status.broker_address or None,
        maybe_committed=status.maybe_committed,
    )


def _storage(status: pb.Status) -> errors.OsqueueError:
    return errors.StorageError(status.message or None)


def _corrupt(status: pb.Status) -> errors.OsqueueError:
    return errors.CorruptDocument(status.message or None)


def _unauthenticated(status: pb.Status) -> errors.OsqueueError:
    # PermissionDenied travels as REASON_UNAUTHENTICATED (clients that predate it
    # still see Unauthenticated) with gRPC's PERMISSION_DENIED code.
    if status.code == grpc.StatusCode.PERMISSION_DENIED.value[0]:
        return errors.PermissionDenied(status.message or None)
    return errors.Unauthenticated(status.message or None)


_S = grpc.StatusCode
_KINDS: tuple[_Kind, ...] = (
    _Kind(errors.InvalidInput, pb.REASON_INVALID_INPUT, _S.INVALID_ARGUMENT, _invalid),
    _Kind(errors.LeaseLost, pb.REASON_LEASE_LOST, _S.FAILED_PRECONDITION, _plain(errors.LeaseLost)),
    _Kind(errors.JobNotFound, pb.REASON_JOB_NOT_FOUND, _S.NOT_FOUND, _plain(errors.JobNotFound)),
    _Kind(errors.DuplicateKey, pb.REASON_DUPLICATE_KEY, _S.ALREADY_EXISTS, _duplicate),
    _Kind(errors.QueueFull, pb.REASON_QUEUE_FULL, _S.RESOURCE_EXHAUSTED, _plain(errors.QueueFull)),
    _Kind(
        errors.ResourceExhausted,
        pb.REASON_RESOURCE_EXHAUSTED,
        _S.RESOURCE_EXHAUSTED,
        _plain(errors.ResourceExhausted),
    ),
    _Kind(errors.NotBroker, pb.REASON_NOT_BROKER, _S.UNAVAILABLE, _not_broker),
    _Kind(
        errors.ShuttingDown, pb.REASON_SHUTTING_DOWN, _S.UNAVAILABLE, _plain(errors.ShuttingDown)
    ),
    _Kind(
        errors.BrokerUnavailable,
        pb.REASON_BROKER_UNAVAILABLE,
        _S.UNAVAILABLE,
        _plain(errors.BrokerUnavailable),
    ),
    _Kind(errors.Unauthenticated, pb.REASON_UNAUTHENTICATED, _S.UNAUTHENTICATED, _unauthenticated),
    _Kind(
        errors.MaybeCommitted, pb.REASON_MAYBE_COMMITTED, _S.UNKNOWN, _plain(errors.MaybeCommitted)
    ),
    _Kind(errors.DocumentGone, pb.REASON_DOCUMENT_GONE, _S.DATA_LOSS, _plain(errors.DocumentGone)),
    _Kind(errors.CorruptDocument, pb.REASON_CORRUPT_DOCUMENT, _S.DATA_LOSS, _corrupt),
    _Kind(errors.StorageError, pb.REASON_STORAGE_ERROR, _S.UNAVAILABLE, _storage),
)
_BY_ERROR: dict[type[errors.OsqueueError], _Kind] = {k.error: k for k in _KINDS}
_BY_REASON: dict[int, _Kind] = {int(k.reason): k for k in _KINDS}
_BY_CODE_NUMBER: dict[int, grpc.StatusCode] = {c.value[0]: c for c in grpc.StatusCode}

#: Reasons that mean "this broker did not take the operation; find the broker and retry"
#: (the errors of category :class:`~osqueue.errors.BrokerMoved`).
RETRY_ELSEWHERE: frozenset[int] = frozenset(
    int(k.reason) for k in _KINDS if issubclass(k.error, errors.BrokerMoved)
)
#: Reasons that mean "back off, then retry here" (:class:`~osqueue.errors.Overloaded`).
RETRY_LATER: frozenset[int] = frozenset(
    int(k.reason) for k in _KINDS if issubclass(k.error, errors.Overloaded)
)

OK = pb.Status()


def _kind_of(exc: BaseException) -> _Kind | None:
    for cls in type(exc).__mro__:
        kind = _BY_ERROR.get(cls)
        if kind is not None:
            return kind
    return None


def to_status(exc: errors.OsqueueError, *, field_prefix: str = "") -> pb.Status:
    """The Status for ``exc``; ``field_prefix`` (``"jobs[3]"``) locates an item's field."""
    kind = _kind_of(exc)
    if kind is None:
        return pb.Status(
            code=pb.CODE_INTERNAL, reason=pb.REASON_INTERNAL, message=f"internal error: {exc}"
        )
    status = pb.Status(code=kind.code.value[0], reason=kind.reason, message=exc.message)
    if isinstance(exc, errors.InvalidInput):
        status.field = _join(field_prefix, exc.field)
        if status.field and not status.message.startswith(status.field):
            status.message = f"{status.field}: {_strip_field(exc.message, exc.field)}"
    elif isinstance(exc, errors.DuplicateKey) and exc.existing_id:
        status.existing_id = exc.existing_id
    elif isinstance(exc, errors.PermissionDenied):
        status.code = _S.PERMISSION_DENIED.value[0]
    elif isinstance(exc, errors.NotBroker):
        status.broker_address = exc.address or ""
        status.maybe_committed = exc.maybe_committed
    return status


def _join(prefix: str, field: str | None) -> str:
    if not field:
        return prefix
    if not prefix:
        return field
    return f"{prefix}{field}" if field.startswith("[") else f"{prefix}.{field}"


def _strip_field(message: str, field: str | None) -> str:
    if field and message.startswith(f"{field}: "):
        return message[len(field) + 2 :]
    return message


def invalid(field: str, message: str) -> pb.Status:
    """An INVALID_ARGUMENT Status for ``field``."""
    return to_status(errors.InvalidInput(message, field=field))


def from_status(status: pb.Status) -> errors.OsqueueError:
    """The exception a non-OK Status stands for."""
    kind = _BY_REASON.get(int(status.reason))
    if kind is not None:
        return kind.build(status)
    return errors.OsqueueError(status.message or f"the broker answered {status.code}")


def grpc_code(status: pb.Status) -> grpc.StatusCode:
    return _BY_CODE_NUMBER.get(int(status.code), grpc.StatusCode.UNKNOWN)


def trailers(status: pb.Status) -> tuple[tuple[str, str | bytes], ...]:
    """Trailing metadata for a call that failed with ``status``."""
    items: list[tuple[str, str | bytes]] = [(STATUS_TRAILER, status.SerializeToString())]
    if status.broker_address:
        items.append((BROKER_ADDRESS_TRAILER, status.broker_address))
    return tuple(items)


def from_trailers(metadata: Sequence[tuple[str, str | bytes]] | None) -> pb.Status | None:
    """The Status a failed call carried in its trailers, if any (and if it parses)."""
    for key, value in metadata or ():
        if key == STATUS_TRAILER and isinstance(value, bytes):
            status = pb.Status()
            try:
                status.ParseFromString(value)
            except Exception:  # a garbled trailer: fall back to the gRPC code alone
                return None
            return status
    return None


def broker_address_from(metadata: Sequence[tuple[str, str | bytes]] | None) -> str | None:
    for key, value in metadata or ():
        if key == BROKER_ADDRESS_TRAILER and isinstance(value, str) and value:
            return value
    return None
