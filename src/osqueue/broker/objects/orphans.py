"""The orphan sweep shared by payload and result objects.

Objects written beside the document (``payloads/``, ``results/``) are
referenced by it once their op commits.  One that no version references any
more, or never did (its op never committed), is an orphan.  An orphan is
deleted only if two sweeps an interval apart both found it unreferenced, no
op in flight uses it, and the broker's lease has at least half its length
left (so no other broker can be committing).  Every upload has a key of its
own, so an op retried elsewhere never writes an object a sweep deletes.
"""

from __future__ import annotations

import logging
from collections.abc import Callable

from osqueue.storage.port import Storage

log = logging.getLogger(__name__)


async def sweep_orphans(
    storage: Storage,
    prefix: str,
    suspects: set[str],
    orphan: Callable[[str], bool],
    may_delete: Callable[[], bool],
) -> tuple[set[str], int]:
    """One sweep of the objects under ``prefix``: delete the orphans the previous
    sweep found too (``suspects``); return the orphans left for the next, and how
    many it deleted.

    ``orphan`` says whether no job (of the broker's current document) and no op
    in flight uses a key; it is asked again right before each delete (the
    document changes while this runs).  ``may_delete`` says whether deleting is
    safe right now."""
    listed = await storage.list(prefix)
    orphans = {key for key in listed if orphan(key)}
    deleted = 0
    for key in sorted(orphans & suspects):
        if not may_delete():
            break
        if not orphan(key):  # referenced meanwhile
            orphans.discard(key)
            continue
        await storage.delete(key)
        orphans.discard(key)
        deleted += 1
    if deleted:
        log.info(
            "deleted %d objects under %s nothing references",
            deleted,
            prefix,
            extra={"action": "sweep", "prefix": prefix},
        )
    return orphans, deleted
