"""The dead-letter calls of the in-process client, over the document's dead jobs
and the dead segments (:mod:`osqueue.broker.cold.dead`).

:class:`DeadCalls` lists, retries and purges dead jobs for both the in-process
client and the gRPC service (it is :attr:`BrokerCalls.dead
<osqueue.broker.inproc.calls.BrokerCalls.dead>`).  With no filter but ``ids`` the
document's jobs are taken by one ``RetryDead``/``PurgeDead`` op (as before
dead segments); ids found in no document job, every other filter, and "all"
go on through the dead segments, one commit per segment (paged, resumable:
run it again to finish).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING, Unpack

from osqueue.api import DeadOptions
from osqueue.broker.cold.dead import DeadPage
from osqueue.broker.inproc.claimed import raise_if_error
from osqueue.errors import JobNotFound
from osqueue.state import Counted, PurgeDead, Removed, RetryDead, make
from osqueue.state.cold_dead import DeadFilter
from osqueue.state.model import StoredJob

if TYPE_CHECKING:
    from osqueue.broker.inproc.host import BrokerHost


class DeadCalls:
    """``retry_dead``, ``purge_dead`` and ``dead_jobs`` on a broker here."""

    def __init__(self, broker: BrokerHost) -> None:
        self.broker = broker

    async def retry_dead(
        self, ids: Sequence[str] | None = None, **options: Unpack[DeadOptions]
    ) -> int:
        """Queue dead jobs again (attempts 0, ``last_error`` kept): ``ids``, or those
        the filters admit (:class:`~osqueue.api.DeadOptions`; none: all).  Each job
        is retried at most once per call across a crash."""
        return await self._act(True, ids, options)

    async def purge_dead(
        self, ids: Sequence[str] | None = None, **options: Unpack[DeadOptions]
    ) -> int:
        """Delete dead jobs: ``ids``, or those the filters admit (none: all)."""
        return await self._act(False, ids, options)

    async def dead_jobs(
        self,
        queue: str | None = None,
        *,
        error: str | None = None,
        since: float | None = None,
        until: float | None = None,
        offset: int = 0,
        limit: int | None = None,
    ) -> list[StoredJob]:
        """A page of the dead jobs the filters admit: the document's, then the dead
        segments', oldest first (a segment is read only when the page reaches it)."""
        out: list[StoredJob] = []
        skipped = 0
        f = DeadFilter(queue=queue, error=error, since=since, until=until)
        async for job in self.broker.segments.dead.listing(f):
            if skipped < offset:
                skipped += 1
                continue
            if limit is not None and len(out) >= limit:
                break
            out.append(job)
        return out

    async def _act(self, retry: bool, ids: Sequence[str] | None, options: DeadOptions) -> int:
        f, pages = make.dead_call(ids, options)
        return await self.act(f, retry=retry, progress=options.get("progress"), max_segments=pages)

    async def act(
        self,
        f: DeadFilter,
        *,
        retry: bool,
        progress: Callable[[int, int], None] | None = None,
        max_segments: int | None = None,
        page: DeadPage | None = None,
    ) -> int:
        """Retry (or purge) the dead jobs ``f`` admits (checked: :func:`make.dead_filter
        <osqueue.state.make.dead_filter>`); how many.  The gRPC service's entry
        (``page``: a page of a paged run, :class:`~osqueue.broker.cold.dead.DeadPage`)."""
        doc = self.broker.document
        ids = f.ids
        if ids is not None and f.plain and (not doc.dead or all(i in doc.jobs for i in ids)):
            named = tuple(sorted(ids))
            op = RetryDead(named) if retry else PurgeDead(named)
            result = raise_if_error(await self.broker.add_op(op))
            assert isinstance(result, Counted | Removed)
            return result.n if isinstance(result, Counted) else len(result.jobs)
        n = await self.broker.segments.dead.act(
            f, retry=retry, progress=progress, max_segments=max_segments, page=page
        )
        if ids and n == 0:
            raise JobNotFound(f"no dead job {min(ids)}")
        return n
