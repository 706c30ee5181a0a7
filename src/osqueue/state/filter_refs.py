"""The references of cold objects that carry an id filter, as their holders keep them.

The low floor of :mod:`osqueue.state.dedupe_filter`: what a kind's holder of
references (``Segments``, ``DelayedCold``, ``DeadLetters``, ``ColdWaiting``)
needs to keep its filtered references, with nothing imported from the state
package (the reference modules import it, and the ops import them).
"""

from __future__ import annotations

from datetime import datetime
from typing import Any, Protocol


class Filtered(Protocol):
    """A reference to a cold object that may carry a filter (``SegmentRef``,
    ``DelayedRef``, ``DeadRef``, ``WaitingRef``)."""

    @property
    def key(self) -> str: ...
    @property
    def min_id(self) -> str: ...
    @property
    def max_id(self) -> str: ...
    @property
    def id_filter(self) -> tuple[str, ...]: ...
    @property
    def dedupe_created(self) -> datetime | None: ...


class FilterHolder(Protocol):
    """A kind's references (``Segments``, ``DelayedCold``, ``DeadLetters``,
    ``ColdWaiting``): those with a filter in ``filtered`` (listed or set aside),
    the oldest ``dedupe_created`` among them."""

    filtered: dict[str, Any]
    filter_floor: float | None

    def find(self, key: str) -> Any: ...
    def replace(self, ref: Any) -> None: ...


def hold_filter(holder: FilterHolder, ref: Filtered) -> None:
    """``ref`` (listed or set aside in ``holder``) answers for its ids, if it has a filter."""
    created = ref.dedupe_created
    if ref.id_filter and created is not None:
        holder.filtered[ref.key] = ref
        at, floor = created.timestamp(), holder.filter_floor
        holder.filter_floor = at if floor is None else min(floor, at)
