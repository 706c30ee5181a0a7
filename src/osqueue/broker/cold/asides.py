"""Set-asides on their way to a commit, for every kind of cold object.

A manager that finds an object missing or broken submits one ``SetAside`` for its
key (finding it again while that op waits adds nothing), logs why, and forgets
the op once a commit took it (or the intake dropped it: the reference was gone).
"""

from __future__ import annotations

import logging
from collections.abc import Callable, KeysView

from osqueue.state import Op, SetAside


class PendingAsides:
    """The ``SetAside`` ops a manager submitted that no commit took yet, by key."""

    def __init__(
        self,
        submit: Callable[[Op], object],
        pending: Callable[[Op], bool],
        log: logging.Logger,
    ) -> None:
        """``submit`` hands an op to the next commit, ``pending`` says whether the
        intake still holds it; ``log`` is the manager's logger."""
        self._submit, self._pending, self._log = submit, pending, log
        self.ops: dict[str, SetAside] = {}

    def __bool__(self) -> bool:
        return bool(self.ops)

    def __contains__(self, key: object) -> bool:
        return key in self.ops

    def keys(self) -> KeysView[str]:
        return self.ops.keys()

    def add(self, key: str, why: str, message: str, shown: object = None) -> bool:
        """Submit ``SetAside(key, why)`` unless one for ``key`` waits already; log
        ``message`` (``%s`` for the key, then for ``shown``, or ``why``).  True if
        it was submitted."""
        if key in self.ops:
            return False
        op = SetAside(key, why)
        self.ops[key] = op
        shown = why if shown is None else shown
        self._log.error(message, key, shown, extra={"action": "set_aside", "key": key})
        self._submit(op)
        return True

    def settle(self) -> bool:
        """Forget the ops the intake no longer holds (committed, or dropped); True if
        any was."""
        done = [key for key, op in self.ops.items() if not self._pending(op)]
        for key in done:
            del self.ops[key]
        return bool(done)
