"""A histogram as the hot path records it: counts per bucket and a sum."""

from __future__ import annotations

from bisect import bisect_left
from collections.abc import Iterable
from itertools import pairwise

from osqueue.errors import InvalidInput


class Histogram:
    """Observations counted into fixed buckets, and their sum.

    ``bounds`` are the buckets' upper bounds (Prometheus ``le``, inclusive);
    a last bucket takes what lies above them all.  :meth:`observe` is a bisect
    and two additions: no lock (one event loop writes and reads it) and no
    dependency.  The exposition reads :meth:`cumulative` at scrape time.
    """

    __slots__ = ("bounds", "counts", "sum")

    def __init__(self, bounds: Iterable[float]) -> None:
        self.bounds = tuple(float(b) for b in bounds)
        if not self.bounds or any(a >= b for a, b in pairwise(self.bounds)):
            raise InvalidInput(
                f"must be increasing and not empty, got {self.bounds}", field="bounds"
            )
        #: observations per bucket; the last counts those above every bound
        self.counts = [0] * (len(self.bounds) + 1)
        self.sum = 0.0

    def observe(self, value: float) -> None:
        self.counts[bisect_left(self.bounds, value)] += 1
        self.sum += value

    @property
    def count(self) -> int:
        return sum(self.counts)

    def cumulative(self) -> list[tuple[float, int]]:
        """(upper bound, observations at or below it) per bucket, ending with
        ``(inf, count)``."""
        out: list[tuple[float, int]] = []
        total = 0
        for bound, n in zip((*self.bounds, float("inf")), self.counts, strict=True):
            total += n
            out.append((bound, total))
        return out
