"""Converting between the client API's values and the wire's messages loses nothing."""

from __future__ import annotations

import dataclasses

import pytest

from osqueue.api import EncodedResult, JobResult, NewJob, QueueStats, Stats
from osqueue.errors import InvalidInput
from osqueue.wire._pb import queue_pb2 as pb
from osqueue.wire.convert import (
    job_result_from_pb,
    job_result_to_pb,
    new_job_from_pb,
    new_job_to_pb,
    result_from_pb,
    result_to_pb,
    stats_from_pb,
    stats_to_pb,
)


def test_stats_survive_the_wire_field_for_field() -> None:
    stats = Stats(
        version=42,
        queues={
            "a": QueueStats(
                depth=3,
                claimed=1,
                dead=2,
                delayed=1,
                oldest_age_s=1.5,
                waiting=4,
                paused=True,
                spilled=2,
                pushed_total=20,
                completed_total=11,
                failed_total=5,
                dead_total=2,
                set_aside=5,
                set_aside_segments=1,
            ),
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
        finished=55,
        finished_evicted=7,
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


@pytest.mark.parametrize(
    "value",
    [b"\x00raw", "text \u00e9", {"a": [1, 2.5, None, True]}, [1, "x"], 7, 0.5, False],
)
def test_a_result_survives_the_wire_as_the_same_value(value: object) -> None:
    encoded = EncodedResult.of(value)
    assert encoded is not None
    back = result_from_pb(result_to_pb(encoded))
    assert back == encoded
    assert back.decode() == value
    answer = JobResult("done", value, None, 2, 1_800_000_000.5)
    assert job_result_from_pb(job_result_to_pb(answer, encoded)) == answer


def test_a_job_result_without_value_error_or_time_survives_the_wire() -> None:
    for answer in (JobResult("queued"), JobResult("dead", error="boom", attempts=5)):
        assert job_result_from_pb(job_result_to_pb(answer, None)) == answer


def test_an_unknown_result_kind_names_the_field() -> None:
    with pytest.raises(InvalidInput) as info:
        result_from_pb(pb.ResultValue(kind=pb.RESULT_KIND_UNSPECIFIED, data=b"x"), "jobs[2].result")
    assert info.value.field == "jobs[2].result.kind"


def test_result_ttl_s_survives_the_wire_and_unset_stays_unset() -> None:
    for ttl in (None, 0.0, 86_400.0):
        job = NewJob(b"p", result_ttl_s=ttl, id="j1")
        assert new_job_from_pb(new_job_to_pb(job, "j1", b"p", 0.0)) == job
