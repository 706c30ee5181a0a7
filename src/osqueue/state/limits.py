"""Queue settings: pause, a rate limit, and caps on claimed jobs, checked at claim time.

Each queue may carry :class:`~osqueue.state.model.StoredSettings` in the
document (``queue_settings``; one :class:`~osqueue.state.ops.SetQueue` op
changes them, pause and resume included), so the broker that serves applies
them and a takeover inherits them:

* ``paused``: nothing of the queue is claimed (pushes still land);
* ``rate_per_s`` and ``burst``: a token bucket.  A claim takes one token per
  job; the bucket refills at ``rate_per_s`` on the broker's clock up to
  ``burst``.  Its level is document state (``tokens`` at ``tokens_at``), so a
  takeover does not refill it: over any window of the broker's clock the
  queue's claims are at most ``burst + rate_per_s x window``;
* ``max_claimed``: at most this many of the queue's jobs claimed at once;
* ``max_claimed_per_group``: at most this many claimed jobs of one group
  (``push(..., group=...)``); jobs without a group are not capped by it;
* ``result_ttl_s``: how long the queue's finished jobs keep their answers,
  unless their push says (:func:`osqueue.state.results.result_ttl`); not a
  claim limit.

A claim asks :class:`Gate` which queues are open and how many jobs each may
give (:meth:`Gate.budget`), and takes each queue's next job whose group has
room (:meth:`Gate.head`): ready entries of a group at its cap are set aside
in the index (``held``) and go back when the group has room again, so a
group's deep backlog costs each claim nothing.

Pure: the clock is the ``now`` given.
"""

from __future__ import annotations

import heapq
import math
from collections.abc import Sequence

import msgspec

from osqueue.api import QueueSettings
from osqueue.errors import InvalidInput
from osqueue.state import validate
from osqueue.state.document import Document
from osqueue.state.index import Index, ReadyEntry
from osqueue.state.model import StoredJob, StoredSettings, to_datetime

#: A rate above this is no rate limit worth the name.
MAX_RATE_PER_S = 1_000_000.0
MAX_CAP = 10_000_000
#: Tokens are kept to this many decimals (the document's bytes stay short), rounded
#: down, so rounding never adds a token.
_TOKEN_DIGITS = 6


def _round_down(tokens: float) -> float:
    scale = 10**_TOKEN_DIGITS
    return float(math.floor(tokens * scale + 1e-9) / scale)


# --------------------------------------------------------------------------- settings


def capacity(settings: StoredSettings) -> float:
    """The bucket's capacity: ``burst``, or one second's worth (at least 1)."""
    if settings.burst is not None:
        return float(settings.burst)
    assert settings.rate_per_s is not None
    return float(max(1, math.ceil(settings.rate_per_s)))


def tokens_at(settings: StoredSettings, now: float) -> float:
    """The bucket's level at ``now`` (full when never used; no refill backwards)."""
    full = capacity(settings)
    if settings.tokens is None or settings.tokens_at is None:
        return full
    assert settings.rate_per_s is not None
    elapsed = max(0.0, now - settings.tokens_at.timestamp())
    return min(full, settings.tokens + elapsed * settings.rate_per_s)


def next_token_at(settings: StoredSettings, now: float) -> float | None:
    """When the bucket next holds a whole token (None: no rate limit, or it does now)."""
    if settings.rate_per_s is None or settings.tokens is None or settings.tokens_at is None:
        return None
    level = tokens_at(settings, now)
    if level >= 1.0:
        return None
    start = max(now, settings.tokens_at.timestamp())
    return start + (1.0 - level) / settings.rate_per_s


def _check_limit(value: float | None, field: str, *, integer: bool) -> None:
    if value is None:
        return
    if integer:
        validate.count(value, field, minimum=0, maximum=MAX_CAP)  # type: ignore[arg-type]
        return
    if isinstance(value, bool) or not isinstance(value, int | float) or not math.isfinite(value):
        raise InvalidInput(f"must be a number, not {value!r}", field=field)
    if not 0 <= value <= MAX_RATE_PER_S:
        raise InvalidInput(f"{value:g} is not between 0 and {MAX_RATE_PER_S:g}", field=field)


def check_settings(
    queue: str,
    *,
    rate_per_s: float | None,
    burst: int | None,
    max_claimed: int | None,
    max_claimed_per_group: int | None,
    paused: bool | None,
    result_ttl_s: float | None = None,
) -> None:
    """Check a ``set_queue``'s fields (None leaves a setting as it is; 0 removes a
    limit).  Each error names its field."""
    validate.queue_name(queue)
    _check_limit(rate_per_s, "rate_per_s", integer=False)
    _check_limit(burst, "burst", integer=True)
    _check_limit(max_claimed, "max_claimed", integer=True)
    _check_limit(max_claimed_per_group, "max_claimed_per_group", integer=True)
    if paused is not None and not isinstance(paused, bool):
        raise InvalidInput(f"must be true or false, not {paused!r}", field="paused")
    if result_ttl_s is not None:
        validate.seconds(result_ttl_s, "result_ttl_s", maximum=validate.MAX_RESULT_TTL_S)


def updated(
    old: StoredSettings | None,
    *,
    rate_per_s: float | None,
    burst: int | None,
    max_claimed: int | None,
    max_claimed_per_group: int | None,
    paused: bool | None,
    now: float,
    result_ttl_s: float | None = None,
) -> StoredSettings:
    """``old`` with the given changes (None: unchanged; 0: no limit, and for
    ``result_ttl_s`` no setting: the broker's applies).  The bucket keeps its
    level across a change, cut to the new capacity."""
    now = round(now, 3)  # the clock as the document stores it (the bucket's time is exact)
    cur = old or StoredSettings()
    level = tokens_at(cur, now) if cur.rate_per_s is not None else None
    new = StoredSettings(
        paused=cur.paused if paused is None else paused,
        rate_per_s=cur.rate_per_s if rate_per_s is None else (float(rate_per_s) or None),
        burst=cur.burst if burst is None else (burst or None),
        max_claimed=cur.max_claimed if max_claimed is None else (max_claimed or None),
        max_claimed_per_group=(
            cur.max_claimed_per_group
            if max_claimed_per_group is None
            else (max_claimed_per_group or None)
        ),
        result_ttl_s=(cur.result_ttl_s if result_ttl_s is None else (float(result_ttl_s) or None)),
    )
    if new.rate_per_s is not None and level is not None:
        # the bucket's clock never goes back (a broker whose clock is behind earns nothing)
        at = max(now, cur.tokens_at.timestamp()) if cur.tokens_at is not None else now
        new = msgspec.structs.replace(
            new, tokens=_round_down(min(level, capacity(new))), tokens_at=to_datetime(at)
        )
    return new


def is_default(settings: StoredSettings) -> bool:
    """No setting in force (the entry can leave the document)."""
    return (
        not settings.paused
        and settings.rate_per_s is None
        and settings.max_claimed is None
        and settings.max_claimed_per_group is None
        and settings.result_ttl_s is None
    )


# --------------------------------------------------------------------------- claims


def gated(doc: Document, queues: Sequence[str]) -> bool:
    """A claim of ``queues`` must pass a :class:`Gate`: one of them has settings, or
    jobs are held back for their group.  (Settings of other queues alone, such as
    a paused queue of parents elsewhere, leave the claim on its fast path.)"""
    settings = doc.queue_settings
    return bool(doc.index.held) or (bool(settings) and not settings.keys().isdisjoint(queues))


class Gate:
    """One claim's (or one look's) view of the limits of the queues it asks for."""

    __slots__ = ("_budget", "_doc", "_now", "_taken")

    def __init__(self, doc: Document, queues: Sequence[str], now: float) -> None:
        self._doc = doc
        now = round(now, 3)  # the clock as the document stores it (the bucket's time is exact)
        self._now = now
        #: queue -> how many more jobs it may give (None: no limit but groups)
        self._budget: dict[str, float | None] = {}
        #: queue -> jobs taken through this gate
        self._taken: dict[str, int] = {}
        settings = doc.queue_settings
        index = doc.index
        for q in queues:
            s = settings.get(q)
            if index.held:
                _restore(index, doc.jobs, q, s)
            if s is None:
                self._budget[q] = None
                continue
            self._budget[q] = _budget(s, index.count(q, "claimed"), now)

    def open(self, queues: Sequence[str]) -> tuple[str, ...]:
        """The queues that may give a job now."""
        return tuple(q for q in queues if self.budget(q) != 0)

    def budget(self, queue: str) -> float | None:
        b = self._budget.get(queue)
        return b if b is None else max(0.0, b)

    def head(self, queue: str) -> ReadyEntry | None:
        """The queue's next ready entry whose group has room (entries of groups at
        their cap are set aside in ``index.held``)."""
        doc = self._doc
        index, jobs = doc.index, doc.jobs
        s = doc.queue_settings.get(queue)
        cap = s.max_claimed_per_group if s is not None else None
        while True:
            entry = index.head(queue, jobs)
            if entry is None or cap is None:
                return entry
            group = jobs[entry[2]].group
            if group is None or index.group_claimed.get((queue, group), 0) < cap:
                return entry
            index.ready[queue].pop()
            index.held.setdefault((queue, group), []).append(entry)

    def took(self, job: StoredJob) -> bool:
        """A job of ``job.queue`` was claimed: spend its budget; False once the queue
        may give no more in this claim."""
        q = job.queue
        self._taken[q] = self._taken.get(q, 0) + 1
        b = self._budget.get(q)
        if b is None:
            return True
        self._budget[q] = b - 1
        return b - 1 >= 1

    def commit(self) -> None:
        """Write the buckets the claims drew from back into the document."""
        doc, now = self._doc, self._now
        for q, n in self._taken.items():
            s = doc.queue_settings.get(q)
            if s is None or s.rate_per_s is None:
                continue
            level = _round_down(tokens_at(s, now) - n)
            at = max(now, s.tokens_at.timestamp()) if s.tokens_at is not None else now
            doc.set_queue_settings(
                q, msgspec.structs.replace(s, tokens=level, tokens_at=to_datetime(at))
            )


def _budget(s: StoredSettings, claimed: int, now: float) -> float | None:
    if s.paused:
        return 0.0
    budget: float | None = None
    if s.rate_per_s is not None:
        budget = float(math.floor(tokens_at(s, now) + 1e-9))
    if s.max_claimed is not None:
        room = float(max(0, s.max_claimed - claimed))
        budget = room if budget is None else min(budget, room)
    return budget


def _restore(
    index: Index, jobs: dict[str, StoredJob], queue: str, s: StoredSettings | None
) -> None:
    """Put back into ``queue``'s ready heap the held entries whose group has room."""
    cap = s.max_claimed_per_group if s is not None else None
    for key in [k for k in index.held if k[0] == queue]:
        room = None if cap is None else cap - index.group_claimed.get(key, 0)
        if room is not None and room <= 0:
            continue
        held = index.held[key]
        heapq.heapify(held)
        ready = index.ready_of(queue)
        moved = 0
        while held and (room is None or moved < room):
            entry = heapq.heappop(held)
            job = jobs.get(entry[2])
            if job is not None and job.status == "queued" and job.seq == entry[1]:
                ready.push(entry)
                moved += 1
        if not held:
            del index.held[key]


def held_count(index: Index, queue: str) -> int:
    """Entries of ``queue`` set aside for their group's cap (stats count them ready)."""
    return sum(len(h) for (q, _), h in index.held.items() if q == queue) if index.held else 0


def next_capacity_at(doc: Document, now: float) -> float | None:
    """The earliest time a rate-limited queue with ready jobs gets a token back
    (a parked claim may then succeed; nothing needs writing for it)."""
    out: float | None = None
    for q, s in doc.queue_settings.items():
        if s.paused or s.rate_per_s is None:
            continue
        at = next_token_at(s, now)
        if at is None or doc.index.head(q, doc.jobs) is None:
            continue
        out = at if out is None else min(out, at)
    return out


def capacity_now(doc: Document, queue: str, now: float) -> float | None:
    """How many jobs of ``queue`` a claim could take now by its limits alone
    (None: no limit)."""
    s = doc.queue_settings.get(queue)
    if s is None:
        return None
    return _budget(s, doc.index.count(queue, "claimed"), now)


def settings_info(queue: str, s: StoredSettings | None) -> QueueSettings:
    """The public view of a queue's stored settings (no entry: none in force)."""
    if s is None:
        return QueueSettings(queue)
    return QueueSettings(
        queue=queue,
        paused=s.paused,
        rate_per_s=s.rate_per_s,
        burst=s.burst,
        max_claimed=s.max_claimed,
        max_claimed_per_group=s.max_claimed_per_group,
        result_ttl_s=s.result_ttl_s,
    )
