"""``osqueue broker URL``: serve a queue over gRPC (placeholder until run_broker lands)."""

from __future__ import annotations


def broker() -> None:
    """Run the broker."""
