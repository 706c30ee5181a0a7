"""What the dashboard changes, and how: through the broker, with the remote client.

Reading never needs a broker; changing does, because only the broker writes the
document.  Each action opens a client the way the CLI does
(:func:`osqueue.inspect.options.open_client`, with the dashboard's token), makes
its call and closes it: actions are rare, and a client per action always
follows the broker of the moment.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Sequence

from osqueue.errors import OsqueueError
from osqueue.inspect.admin import DeadAction, on_dead, set_paused
from osqueue.inspect.options import ClientOptions, open_client

log = logging.getLogger(__name__)

#: Pausing a queue is the broker's queue-settings op (``set_queue(queue,
#: paused=...)``): a paused queue is not claimable, and the setting is held in the
#: document, so it survives failover.
PAUSE_AVAILABLE = True


class PauseUnavailable(OsqueueError):
    """The broker's client has no queue settings (an osqueue without ``set_queue``)."""


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

    async def pause(self, queue: str, *, paused: bool) -> None:
        """Pause (or resume) ``queue``: the broker's queue-settings op."""
        async with open_client(self.options) as client:
            set_queue = getattr(client, "set_queue", None)
            if set_queue is None:
                raise PauseUnavailable(
                    f"cannot {'pause' if paused else 'resume'} queue {queue!r}: this "
                    f"client ({type(client).__name__}) has no queue settings"
                )
            await set_queue(queue, paused=paused)
        log.info(
            "queue %s",
            "paused" if paused else "resumed",
            extra={"action": "pause" if paused else "resume", "queue": queue},
        )

    async def pause_schedule(self, name: str, *, paused: bool) -> None:
        """Pause (or resume) schedule ``name``: put back as it is, ``paused`` set."""
        async with open_client(self.options) as client:
            await set_paused(client, name, paused, self.options.url)
        log.info(
            "schedule %s",
            "paused" if paused else "resumed",
            extra={"action": "pause" if paused else "resume", "schedule": name},
        )


def _asked(ids: Sequence[str] | None) -> int | str:
    return "all" if ids is None else len(ids)
