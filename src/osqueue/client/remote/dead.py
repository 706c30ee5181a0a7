"""Retry and purge of dead jobs over gRPC, a page of dead segments per call.

A run through many dead segments (``osqueue dead URL retry --all`` of a million
dead jobs) would take one call longer than its deadline, so the remote client
asks for :data:`PAGE_SEGMENTS` segments a call and goes on until the broker
says none is left (``DeadResponse.segments_left``).  Each page passes over the
segments the earlier pages left in place (the jobs the filters did not take:
``DeadResponse.passed``, sent back in ``DeadRequest.passed``), so a filtered run
reads each segment once.  A page sent again after a lost answer takes no job
twice: the broker's swaps apply once, and a segment already swapped holds only
jobs the filters do not take.  A broker that knows no pages (it answers no
``segments_left``) did the whole run in the first call.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Sequence

from osqueue.api import DeadOptions
from osqueue.client.remote.requests import dead_request
from osqueue.wire._pb import queue_pb2 as pb

#: dead segments one call of a whole run goes through (50,000 jobs each at most)
PAGE_SEGMENTS = 4


async def dead_run(
    call: Callable[[pb.DeadRequest], Awaitable[pb.DeadResponse]],
    ids: Sequence[str] | None,
    options: DeadOptions,
) -> int:
    """Retry or purge (``call``: the RPC) the dead jobs ``ids`` (None: all) that the
    filters of ``options`` admit; how many.  ``max_segments`` given: that one page;
    else page after page, ``progress`` told after each (jobs so far, segments left)."""
    request = dead_request(ids, options)
    if request.HasField("max_segments"):
        return int((await call(request)).count)
    request.max_segments = PAGE_SEGMENTS
    progress = options.get("progress")
    total = 0
    while True:
        response = await call(request)
        total += response.count
        left = response.segments_left if response.HasField("segments_left") else 0
        if progress is not None:
            progress(total, left)
        if left <= 0:
            return total
        request.passed.extend(response.passed)
