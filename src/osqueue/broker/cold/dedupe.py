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

from osqueue.state import Push, Pushed, Result
from osqueue.state.dedupe_filter import ReadToConfirm

if TYPE_CHECKING:
    from osqueue.broker.inproc.host import BrokerHost

_ROUNDS = 4


async def confirm_pushes(
    broker: BrokerHost, ops: Sequence[Push], results: Sequence[Result]
) -> Sequence[Result]:
    """``results`` (one per op of ``ops``) with every ``ReadToConfirm`` settled."""
    if not any(type(r) is ReadToConfirm for r in results):
        return results
    out = list(results)
    for i, result in enumerate(out):
        if isinstance(result, ReadToConfirm):
            out[i] = await _confirm(broker, ops[i], result)
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
