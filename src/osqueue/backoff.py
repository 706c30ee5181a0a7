"""One backoff policy: capped exponential, with optional jitter.

Every retry in osqueue waits ``Backoff.delay_s(attempt)``: the broker after a
storage error, the remote client between failover attempts, the worker after
a failed claim, ``osqueue push`` between tries, and the document's own retry
schedule for failed jobs (``run_at`` after the ``n``-th failed attempt).
"""

from __future__ import annotations

import random
from dataclasses import dataclass

from osqueue.errors import InvalidInput

#: 2 ** 60 seconds is beyond any cap; larger exponents only risk overflow.
_MAX_EXPONENT = 60


@dataclass(frozen=True, slots=True)
class Backoff:
    """Wait ``base_s * 2 ** attempt``, at most ``cap_s``; with ``jitter`` j > 0 the
    wait is drawn uniformly from ``[(1 - j) * d, d]`` (so retries spread out)."""

    base_s: float
    cap_s: float
    jitter: float = 0.0

    def __post_init__(self) -> None:
        for name in ("base_s", "cap_s"):
            value = getattr(self, name)
            if not value >= 0:
                raise InvalidInput(f"must be >= 0 seconds, got {value!r}", field=name)
        if not 0.0 <= self.jitter <= 1.0:
            raise InvalidInput(f"must be within [0, 1], got {self.jitter!r}", field="jitter")

    def delay_s(self, attempt: int, rng: random.Random | None = None) -> float:
        """The wait before retry number ``attempt + 1`` (``attempt`` counts from 0)."""
        delay = min(self.cap_s, self.base_s * 2.0 ** min(max(attempt, 0), _MAX_EXPONENT))
        if self.jitter:
            draw = (rng or random).random()
            delay *= 1.0 - self.jitter * draw
        return delay
