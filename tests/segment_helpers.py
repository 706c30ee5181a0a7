"""Small segment settings the segment tests share: every few pushes spill, every few
claims load, and nothing else (sweeps, stats logs, lease renewals) gets in the way."""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from typing import Any

from osqueue.broker import BrokerConfig
from osqueue.state.dedupe_filter import may_hold
from osqueue.state.filter_refs import Filtered

SMALL = {
    "segment_jobs": 4,
    "head_jobs": 2,
    "load_jobs": 3,
    "spill_above_jobs": 3,
    "compact_jobs": None,  # compaction has tests of its own (test_compaction.py)
    "retry_base_s": 0.001,
    "payload_sweep_interval_s": None,
    "stats_log_interval_s": None,
    "lease_s": 3600.0,
}


def config(**kw: object) -> BrokerConfig:
    """A broker config of the ``SMALL`` settings, with ``kw`` over them."""
    return BrokerConfig(**{**SMALL, **kw})  # type: ignore[arg-type]


#: the delayed-job tests' clock start: a multiple of 100, so windows start on it
DELAYED_T0 = 1_800_000_000.0


def delayed_config(**kw: object) -> BrokerConfig:
    """Tiny cold-delayed settings: a few delayed jobs spill, due later than a minute,
    in windows of 100 s, loaded 10 s ahead, two at a time (``kw`` over them)."""
    return config(
        **{
            "delay_spill_above_jobs": 3,
            "delay_horizon_s": 60.0,
            "delay_lead_s": 10.0,
            "delay_window_s": 100.0,
            "delay_load_jobs": 2,
            "heartbeat_timeout_s": 10_000.0,
            **kw,
        }
    )


def filter_false_positive(ids: Sequence[str], refs: Iterable[Filtered]) -> str:
    """An id never pushed that one of ``refs``' filters may hold (inside its id
    bounds): its push must be read to confirm, then applied as a new job."""
    refs = list(refs)
    return next(
        candidate
        for job_id in ids
        for n in range(5000)
        for candidate in [f"{job_id}{n}"]
        if any(
            ref.min_id <= candidate <= ref.max_id
            and any(may_hold(f, candidate) for f in ref.id_filter)
            for ref in refs
        )
    )


#: per cold part, settings that make a few of its jobs leave the document
COLD_THRESHOLDS: dict[str, dict[str, int]] = {
    "dead": {"dead_keep_jobs": 2, "dead_spill_jobs": 3},
    "delayed": {"delay_spill_above_jobs": 3},
    "waiting": {"waiting_spill_above_jobs": 3, "waiting_object_jobs": 5},
    "finished": {"finished_seal_above_entries": 3, "finished_object_entries": 4},
}


async def cross_cold_threshold(client: Any, part: str, jobs: int = 8) -> None:
    """Make ``jobs`` jobs of ``part``'s kind (past :data:`COLD_THRESHOLDS`): dead
    letters, jobs due in an hour, children of a parent nobody claims, or finished
    jobs whose results are kept."""
    if part == "waiting":
        await client.push(b"parent", id="par", queue="parents")
    for n in range(jobs):
        if part == "dead":
            await client.push(b"x", id=f"d{n}", max_attempts=1)
            (job,) = await client.claim("w", ["default"])
            await client.fail(job, error="boom")
        elif part == "delayed":
            await client.push(b"x", id=f"d{n}", delay_s=3600.0)
        elif part == "waiting":
            await client.push(b"x", id=f"d{n}", after=["par"])
        else:
            await client.push(b"x", id=f"d{n}", result_ttl_s=60)
            (job,) = await client.claim("w", ["default"])
            await client.complete(job, result={"n": n})
