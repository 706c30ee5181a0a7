"""Pushes whose id a cold object's filter may hold: read the objects, then answer.

The push transition fails such a push alone with
:class:`~osqueue.state.dedupe_filter.ReadToConfirm` naming the objects
(nothing changes).  :func:`confirm_pushes` reads them through the segment
cache, checked: a push whose id one of them holds (at a position not loaded
yet, created within ``dedupe_window_s``) is answered as a retry, the others
are submitted again with ``absent_from`` naming what was read, and applied.
A merge or a load meanwhile may ask again (four rounds at most).  See
docs/segments.md, "Dedupe filter".

A push naming parents that sealed objects of the record of finished jobs may
hold fails the same way, with the parents named (``ReadToConfirm.parents``):
the broker reads those objects (:meth:`FinishedObjects.read_parents
<osqueue.broker.cold.finished.FinishedObjects.read_parents>`) and submits it
again with what it found (``sealed_parents``).  See docs/segments.md, "The
finished record".
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING

import msgspec

from osqueue.errors import JobNotFound
from osqueue.state import Push, Pushed, Result
from osqueue.state.dedupe_filter import ReadToConfirm

if TYPE_CHECKING:
    from osqueue.broker.inproc.host import BrokerHost

_ROUNDS = 4


async def confirm_pushes(
    broker: BrokerHost, ops: Sequence[Push], results: Sequence[Result]
) -> Sequence[Result]:
    """``results`` (one per op of ``ops``) with every ``ReadToConfirm`` settled.

    A push that named, as a parent, a job of the same batch that had to be
    confirmed first (so was not in the document yet: ``JobNotFound``) is
    submitted again once that job is in, in the batch's order."""
    if not any(type(r) is ReadToConfirm for r in results):
        return results
    out = list(results)
    late: set[str] = set()  # the batch's jobs placed only after a confirmation
    for i, result in enumerate(out):
        op = ops[i]
        again = isinstance(result, JobNotFound) and bool(late.intersection(op.after))
        if again:
            result = await broker.add_op(op)
        if isinstance(result, ReadToConfirm):
            again, result = True, await _confirm(broker, op, result)
        if again and isinstance(result, Pushed):
            late.add(op.id)
        out[i] = result
    return out


async def _confirm(broker: BrokerHost, op: Push, asked: ReadToConfirm) -> Result:
    result: Result = asked
    for _ in range(_ROUNDS):
        assert isinstance(result, ReadToConfirm)
        if result.parents:  # parents in sealed objects of the record of finished jobs
            op = await broker.segments.finished.read_parents(op, result, broker.document)
        else:
            since = broker.clock.now() - broker.config.dedupe_window_s
            cache = broker.segments.cache
            if await cache.holds_id(op.id, result.keys, lambda: broker.document, since):
                return Pushed(op.id, False)
            op = msgspec.structs.replace(op, absent_from=(*op.absent_from, *result.keys))
        result = await broker.add_op(op)
        if type(result) is not ReadToConfirm:
            return result
    return result
