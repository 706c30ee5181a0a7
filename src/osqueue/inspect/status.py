"""The queue at a glance, computed from one read of the document: the dict
``osqueue status --json`` prints, the dashboard's overview and ``osqueue top``
show; and how every view tells an age."""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any

from osqueue.api import QueueStats, Stats
from osqueue.state import Document, stats_of


def status_of(url: str, doc: Document, now: float) -> dict[str, Any]:
    """The status as a JSON-ready dict (the ``--json`` output)."""
    doc.index.promote_due(doc.jobs, now)
    stats: Stats = stats_of(doc, now)
    owner = doc.broker
    broker: dict[str, Any] | None = None
    if owner is not None:
        until = owner.lease_until.timestamp()
        broker = {
            "id": owner.id,
            "address": owner.address,
            "epoch": owner.epoch,
            "lease_until": _iso(until),
            "lease_remaining_s": round(until - now, 3),
            "live": until > now and owner.address is not None,
        }
    queues = {
        name: {
            "depth": q.depth,
            "ready": q.depth - q.delayed,
            "delayed": q.delayed,
            "spilled": q.spilled,
            "claimed": q.claimed,
            "dead": q.dead,
            "oldest_age_s": None if q.oldest_age_s is None else round(q.oldest_age_s, 3),
            "waiting": q.waiting,
            "paused": q.paused,
            "set_aside": q.set_aside,
            **_totals(q),
        }
        for name, q in sorted(stats.queues.items())
    }
    aside = set_aside_entries(doc)
    ages = [q["oldest_age_s"] for q in queues.values() if q["oldest_age_s"] is not None]
    return {
        "url": url,
        "version": doc.version,
        "document_bytes": stats.document_bytes,
        "tombstones": stats.tombstones,
        "broker": broker,
        "depth": stats.depth,
        "spilled": sum(q.spilled for q in stats.queues.values()),
        "segments": sum(1 for _ in doc.segments),
        "set_aside": sum(entry["jobs"] for entry in aside),
        "set_aside_segments": aside,
        "claimed": stats.claimed,
        "dead": stats.dead,
        "oldest_age_s": max(ages) if ages else None,
        "pushed": doc.stats.pushed,
        "completed": doc.stats.completed,
        "failed": doc.stats.failed,
        "reclaimed": doc.stats.reclaimed,
        "queues": queues,
    }


def set_aside_entries(doc: Document) -> list[dict[str, Any]]:
    """Every reference set aside (ready segments, dead segments, objects of waiting
    children): key, queue, priority and seq range (None for waiting children),
    live jobs, reason and time."""
    entries = [_entry(e.ref, e.ref.remaining, e.reason, e.at) for e in doc.segments.set_aside_of()]
    dead, waiting = doc.dead.aside, doc.waiting_cold.aside
    entries += [
        _entry(dead[k].ref, dead[k].ref.count, dead[k].reason, dead[k].at) for k in sorted(dead)
    ]
    for key in sorted(waiting):
        e = waiting[key]
        entries.append(_entry(e.ref, e.ref.live, e.reason, e.at) | _NO_SEQS)
    return entries


_NO_SEQS: dict[str, Any] = {"priority": None, "first_seq": None, "last_seq": None}


def _entry(ref: Any, jobs: int, reason: str, at: datetime) -> dict[str, Any]:
    return {
        "key": ref.key,
        "queue": ref.queue,
        "priority": getattr(ref, "priority", None),
        "first_seq": getattr(ref, "first_seq", None),
        "last_seq": getattr(ref, "last_seq", None),
        "jobs": jobs,
        "reason": reason,
        "at": at.isoformat().replace("+00:00", "Z"),
    }


def _totals(q: QueueStats) -> dict[str, int]:
    """A queue's counters over its life (kept by the document per known queue)."""
    return {
        "pushed_total": q.pushed_total,
        "completed_total": q.completed_total,
        "failed_total": q.failed_total,
        "dead_total": q.dead_total,
    }


def age_text(seconds: float | None) -> str:
    """An age or a span, one way everywhere: ``4.2s``, ``43s``, ``1m43s``, ``2m0s``,
    ``15m27s``, ``3h5m``, ``2d4h`` (or ``-`` for none)."""
    if seconds is None:
        return "-"
    if seconds < 10:
        return f"{max(0.0, seconds):.1f}s"
    total = int(seconds)
    if total < 60:
        return f"{total}s"
    minutes, secs = divmod(total, 60)
    if minutes < 60:
        return f"{minutes}m{secs}s"
    hours, minutes = divmod(minutes, 60)
    if hours < 24:
        return f"{hours}h{minutes}m"
    days, hours = divmod(hours, 24)
    return f"{days}d{hours}h"


def _iso(ts: float) -> str:
    return datetime.fromtimestamp(ts, UTC).isoformat(timespec="milliseconds").replace("+00:00", "Z")
