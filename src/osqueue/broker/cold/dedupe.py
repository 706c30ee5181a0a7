"""Pushes whose id a cold object's filter may hold: read the objects, then answer.

The push transition fails such a push alone with
:class:`~osqueue.state.dedupe_filter.ReadToConfirm` naming the objects
(nothing changes).  :func:`confirm_pushes` reads them through the segment
cache, checked: a push whose id one of them holds (at a position not loaded
yet, created within ``dedupe_window_s``) is answered as a retry, the others
are submitted again with ``absent_from`` naming what was read, and applied.
A merge or a load meanwhile may ask again (four rounds at most).  Dead
segments and objects of waiting children are read whole (:func:`_held_cold`),
the others through the cache.  See docs/segments.md, "Dedupe filter".

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

from osqueue.errors import CorruptDocument, JobNotFound, NotFound
from osqueue.state import Document, Push, Pushed, Result
from osqueue.state.cold_dead import DEAD_PREFIX
from osqueue.state.dedupe_filter import ReadToConfirm
from osqueue.state.model import StoredJob
from osqueue.state.waiting_refs import WAITING_PREFIX

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
            cold = [k for k in result.keys if k.startswith((DEAD_PREFIX, WAITING_PREFIX))]
            hot = [k for k in result.keys if k not in cold]
            cache = broker.segments.cache
            if (hot and await cache.holds_id(op.id, hot, lambda: broker.document, since)) or (
                cold and await _held_cold(broker, op.id, cold, since)
            ):
                return Pushed(op.id, False)
            op = msgspec.structs.replace(op, absent_from=(*op.absent_from, *result.keys))
        result = await broker.add_op(op)
        if type(result) is not ReadToConfirm:
            return result
    return result


async def _held_cold(broker: BrokerHost, job_id: str, keys: Sequence[str], since: float) -> bool:
    """Whether one of the dead segments or objects of waiting children ``keys``
    (whose filters may hold ``job_id``) holds it, created at ``since`` or later:
    read and checked.  Every job of such an object is one a retried push must
    find (dead, or waiting: cancelled while cold too, as a tombstone would say).
    An object that cannot be read while its reference stays (missing, broken,
    set aside) counts as holding it (the safe side: a retry is never applied
    twice); a key no longer referenced is passed over (swapped by a retry or a
    purge, or loaded: the push is checked again against what is there now)."""
    for key in keys:
        doc = broker.document
        if doc is None:
            return True
        try:
            jobs = await _read(broker, doc, key)
        except (NotFound, CorruptDocument):
            now = broker.document
            if now is None or _holds(now, key):
                return True
            continue
        if jobs is None:
            if _holds(doc, key):
                return True  # set aside: its filter answers alone
            continue
        if any(job.id == job_id and job.created_at.timestamp() >= since for job in jobs):
            return True
    return False


async def _read(broker: BrokerHost, doc: Document, key: str) -> list[StoredJob] | None:
    """The jobs of the listed dead segment or object of waiting children ``key``
    (None: not listed), read and checked."""
    if key.startswith(DEAD_PREFIX):
        dead = doc.dead.find(key)
        return None if dead is None else await broker.segments.dead.read(dead)
    waiting = doc.waiting_cold.refs.get(key)
    return None if waiting is None else await broker.segments.waiting.read(waiting)


def _holds(doc: Document, key: str) -> bool:
    """``key`` is a dead segment or an object of waiting children the document still
    references, listed or set aside."""
    return doc.dead.holds(key) or doc.waiting_cold.holds(key)
