"""What the dashboard changes, and how: through the broker, with the remote client.

Reading never needs a broker; changing does, because only the broker writes the
document.  Each action opens a client the way the CLI does
(:func:`osqueue.cli.options.open_client`, with the dashboard's token), makes
its call and closes it: actions are rare, and a client per action always
follows the broker of the moment.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Sequence

from osqueue.cli.dead import DeadAction, on_dead
from osqueue.cli.options import ClientOptions, open_client
from osqueue.errors import OsqueueError

log = logging.getLogger(__name__)

#: Pausing a queue needs a broker op (a paused queue is not claimable, held in the
#: document so it survives failover) that this osqueue does not have yet.
PAUSE_AVAILABLE = False


class PauseUnavailable(OsqueueError):
    """Pausing a queue needs the broker's pause op, which this osqueue does not have yet."""


class Actions:
    def __init__(self, options: ClientOptions) -> None:
        self.options = options

    async def dead(self, action: DeadAction, ids: Sequence[str] | None) -> int:
        """Retry or purge dead jobs (``ids`` None: every dead job); how many."""
        async with open_client(self.options) as client:
            count = await on_dead(client, action, list(ids) if ids is not None else None)
        log.info(
            "dead jobs %s",
            action.value,
            extra={"action": f"{action.value}_dead", "count": count, "asked": _asked(ids)},
        )
        return count

    async def cancel(self, job_ids: Sequence[str]) -> list[BaseException | None]:
        """Cancel each job; one outcome per id (None: cancelled)."""
        async with open_client(self.options) as client:
            outcomes = await asyncio.gather(
                *(client.cancel(i) for i in job_ids), return_exceptions=True
            )
        log.info("cancelled jobs", extra={"action": "cancel", "asked": len(job_ids)})
        return list(outcomes)

    # ----------------------------------------------------------------- PAUSE / RESUME
    # The place for pausing and resuming a queue.  When the broker has the op,
    # call it here (through a client method such as ``client.pause(queue)``), set
    # PAUSE_AVAILABLE, and the overview's pause buttons (templates/overview.html)
    # and the /queues/{name}/pause route in web.py start working.

    async def pause(self, queue: str, *, paused: bool) -> None:
        raise PauseUnavailable(
            f"cannot {'pause' if paused else 'resume'} queue {queue!r}: pausing needs a "
            "broker op this osqueue does not have yet"
        )


def _asked(ids: Sequence[str] | None) -> int | str:
    return "all" if ids is None else len(ids)
