"""Small segment settings the segment tests share: every few pushes spill, every few
claims load, and nothing else (sweeps, stats logs, lease renewals) gets in the way."""

from __future__ import annotations

from osqueue.broker import BrokerConfig

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
