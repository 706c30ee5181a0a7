"""Converting between the client API's values and the wire's messages loses nothing."""

from __future__ import annotations

import dataclasses

from osqueue.api import QueueStats, Stats
from osqueue.wire.convert import stats_from_pb, stats_to_pb


def test_stats_survive_the_wire_field_for_field() -> None:
    stats = Stats(
        version=42,
        queues={
            "a": QueueStats(depth=3, claimed=1, dead=2, delayed=1, oldest_age_s=1.5, spilled=2),
            "b": QueueStats(depth=0, claimed=0, dead=0, delayed=0, oldest_age_s=None),
        },
        pushed=10,
        completed=6,
        dead=2,
        claimed=1,
        broker_id="b-1",
        broker_address="10.0.0.1:7070",
        broker_epoch=3,
        lease_until=1_800_000_000.25,
        document_bytes=123_456,
        tombstones=789,
    )
    # every field differs from its default, so a field the wire forgets shows here
    assert all(
        getattr(stats, f.name) != f.default
        for f in dataclasses.fields(Stats)
        if f.default is not dataclasses.MISSING
    )
    assert all(
        getattr(stats.queues["a"], f.name) != f.default
        for f in dataclasses.fields(QueueStats)
        if f.default is not dataclasses.MISSING
    )
    assert stats_from_pb(stats_to_pb(stats)) == stats
