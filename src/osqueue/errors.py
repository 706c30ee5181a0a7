"""One error hierarchy for all of osqueue.

Every exception osqueue raises is an :class:`OsqueueError`.  Each class's
docstring is its default message.  Foreign exceptions are mapped at the edge
with ``raise Ours(...) from exc`` so the cause is kept.

"May I try again?" is answered here, once, by category:

* :class:`Retryable`: nothing is wrong with the request; the same call may
  succeed later.  Below it:

  * :class:`BrokerMoved`: this broker does not (or no longer) serve the
    queue: find the broker again (re-read the document) and retry there
    (:class:`NotBroker`, :class:`ShuttingDown`, :class:`BrokerUnavailable`).
  * :class:`Overloaded`: the broker is busy; back off and retry the same call
    (:class:`ResourceExhausted`).
  * :class:`StorageError`: the object store failed (I/O, a timeout).
  * :class:`MaybeCommitted`: the answer was lost; the op may have been applied
    (every op osqueue sends is safe to repeat: pushes carry their id, the
    holder's calls their token).
  * :class:`QueueFull`: the document is at its size cap; retry when workers
    have caught up.

* Everything else is the caller's to handle: bad input, a stale token, an
  unknown job, a corrupt document.
"""

from __future__ import annotations


class OsqueueError(Exception):
    """An osqueue operation failed."""

    def __init__(self, message: str | None = None) -> None:
        super().__init__(message or (self.__doc__ or type(self).__name__).strip())

    @property
    def message(self) -> str:
        return str(self.args[0]) if self.args else ""


# --------------------------------------------------------------------------- categories


class Retryable(OsqueueError):
    """The operation did not go through this time; the same call may succeed later."""


class BrokerMoved(Retryable):
    """This broker does not serve the queue now; find the broker again and retry."""


class Overloaded(Retryable):
    """The broker is busy; back off and retry."""


def is_retryable(exc: BaseException) -> bool:
    """True for errors a caller answers by retrying the same request (see :class:`Retryable`)."""
    return isinstance(exc, Retryable)


# --------------------------------------------------------------------------- storage


class NotFound(OsqueueError):
    """The object does not exist."""


class Conflict(OsqueueError):
    """The conditional write lost: the object changed (or exists) since it was read."""


class StorageError(Retryable):
    """The object store failed; the operation may be retried."""

    def __init__(self, message: str | None = None, *, cause: BaseException | None = None) -> None:
        super().__init__(message)
        self.cause = cause
        if cause is not None:
            self.__cause__ = cause


class OutcomeUnknown(StorageError):
    """The write was sent but no answer came back: it may or may not have landed."""


class UnsafePath(StorageError):
    """The store refused the key: on disk its path passes through a symbolic link (or
    an entry that is neither a folder nor a plain file), which could lead outside the
    store's root.  Nothing was read, written or deleted; the same call succeeds once
    the entry is removed."""


# --------------------------------------------------------------------------- input


class InvalidInput(OsqueueError):
    """The request is invalid."""

    def __init__(self, message: str | None = None, *, field: str | None = None) -> None:
        if field and message and not message.startswith(field):
            message = f"{field}: {message}"
        super().__init__(message)
        self.field = field


class CorruptDocument(OsqueueError):
    """The queue document does not decode; it is left untouched."""

    def __init__(
        self, message: str | None = None, *, path: str | None = None, offset: int | None = None
    ) -> None:
        super().__init__(message)
        self.path = path
        self.offset = offset


# --------------------------------------------------------------------------- queue semantics


class LeaseLost(OsqueueError):
    """The job's claim token is stale: the job was reclaimed or finished by someone else."""


class JobNotFound(OsqueueError):
    """No live job has that id."""


class DuplicateKey(OsqueueError):
    """A live job already holds that idempotency key."""

    def __init__(self, message: str | None = None, *, existing_id: str | None = None) -> None:
        super().__init__(message)
        self.existing_id = existing_id


class QueueFull(Retryable):
    """The queue document reached its size cap; retry after workers catch up."""


# --------------------------------------------------------------------------- broker and transport


class NotBroker(BrokerMoved):
    """This broker no longer owns the queue; follow the address of the new one."""

    def __init__(
        self,
        message: str | None = None,
        *,
        address: str | None = None,
        maybe_committed: bool = False,
    ) -> None:
        super().__init__(message)
        self.address = address
        #: True when the op's write was sent but its outcome was never confirmed.
        self.maybe_committed = maybe_committed


class BrokerUnavailable(BrokerMoved):
    """No broker is reachable for this queue right now."""


class MaybeCommitted(Retryable):
    """The broker stopped before it could confirm this operation; it may have been applied."""


class ShuttingDown(BrokerMoved):
    """The broker is shutting down and takes no new operations."""


class Unauthenticated(OsqueueError):
    """The broker refused the call: missing or wrong token."""


class PermissionDenied(Unauthenticated):
    """The broker refused the call: this token may not make it (a read-only token, say)."""


class UntrustedBroker(OsqueueError):
    """The client refused to send its token: the broker's connection is not protected by
    TLS, or its certificate is not the one pinned."""


class ResourceExhausted(Overloaded):
    """The broker is overloaded; back off and retry."""


class DocumentGone(OsqueueError):
    """The queue document was deleted or replaced from outside; the broker stopped."""


class MissingExtra(OsqueueError, ImportError):
    """An optional dependency is missing."""

    def __init__(self, extra: str, module: str) -> None:
        super().__init__(
            f"{module!r} is not installed; install it with: pip install 'osqueue[{extra}]'"
        )
        self.extra = extra


#: Answers that mean an op was not applied: refused before or by its commit (a
#: push or a completion that got one leaves its payload or result object unused).
NOT_APPLIED: tuple[type[OsqueueError], ...] = (
    InvalidInput,
    LeaseLost,
    QueueFull,
    DuplicateKey,
    Overloaded,
    ShuttingDown,
)
