"""Converting between the client API's values and the wire's messages loses nothing."""

from __future__ import annotations

import dataclasses

import msgspec
import pytest
from google.protobuf.message import Message

from osqueue.api import (
    EncodedResult,
    Job,
    JobResult,
    NewJob,
    QueueSettings,
    QueueStats,
    ScheduleInfo,
    Stats,
)
from osqueue.errors import InvalidInput
from osqueue.state import Push, PutSchedule, SetQueue
from osqueue.wire._pb import queue_pb2 as pb
from osqueue.wire.convert import (
    from_pb,
    job_result_from_pb,
    job_result_to_pb,
    result_from_pb,
    result_to_pb,
    stats_from_pb,
    stats_to_pb,
    table,
    to_pb,
)

#: Each value the wire carries, its message, and the fields only one side has.
PAIRS: list[tuple[type[object], type[Message], set[str]]] = [
    (NewJob, pb.NewJob, set()),
    (
        Push,
        pb.NewJob,
        {
            "payload_ref",
            "payload_size",
            "payload_sha256",
            "dedupe",
            "absent_from",
            "sealed_parents",
        },
    ),
    (Job, pb.Job, set()),
    (PutSchedule, pb.Schedule, set()),
    (ScheduleInfo, pb.Schedule, set()),
    (SetQueue, pb.QueueSettings, {"remove"}),  # on SetQueueRequest
    (QueueSettings, pb.QueueSettings, set()),
    (QueueStats, pb.QueueStats, set()),
    (Stats, pb.StatsResponse, {"queues"}),  # a map, by hand
]


def _names(cls: type[object]) -> set[str]:
    if isinstance(cls, type) and issubclass(cls, msgspec.Struct):
        return {f.name for f in msgspec.structs.fields(cls)}
    return {f.name for f in dataclasses.fields(cls)}  # type: ignore[arg-type]


@pytest.mark.parametrize(("cls", "message", "apart"), PAIRS)
def test_the_table_carries_every_field_a_value_has(
    cls: type[object], message: type[Message], apart: set[str]
) -> None:
    # a field added to the value without its message field (or the other way) shows here
    carried = {name for name, _, _ in table(cls, message)}
    assert carried == _names(cls) - apart
    assert carried <= set(message.DESCRIPTOR.fields_by_name)


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
        assert from_pb(to_pb(job, pb.NewJob), NewJob) == job


def test_every_field_of_a_push_survives_the_wire() -> None:
    job = NewJob(
        b"p",
        queue="q",
        priority=-3,
        delay_s=2.5,
        key="k",
        max_attempts=9,
        id="j1",
        group="g",
        after=("a", "b"),
        on_parent_failure="run",
        result_ttl_s=60.0,
    )
    defaults = NewJob(b"")
    assert all(
        getattr(job, f.name) != getattr(defaults, f.name) for f in msgspec.structs.fields(NewJob)
    )
    message = to_pb(job, pb.NewJob)
    assert from_pb(message, NewJob) == job
    # the defaults travel as unset fields, and come back as the defaults
    assert not to_pb(NewJob(b"", id="j"), pb.NewJob).HasField("key")
    assert to_pb(NewJob(b"", id="j"), pb.NewJob).on_parent_failure == ""
    # an empty queue stays empty (refused by the push check, not read as the default)
    assert from_pb(pb.NewJob(id="j"), NewJob) == NewJob(b"", queue="", id="j")


def test_a_schedule_and_settings_survive_the_wire() -> None:
    op = PutSchedule("s", "q", cron="* * * * *", tz="UTC", payload=b"x", catch_up="skip")
    assert from_pb(to_pb(op, pb.Schedule), PutSchedule) == op
    info = ScheduleInfo("s", "q", None, None, 30.0, b"", 1, 3, "once", 100.0, note="n")
    assert from_pb(to_pb(info, pb.Schedule), ScheduleInfo) == info
    change = SetQueue("q", rate_per_s=2.0, max_claimed=0, paused=False)
    assert from_pb(to_pb(change, pb.QueueSettings), SetQueue) == change
    settings = QueueSettings("q", paused=True, burst=4, result_ttl_s=9.0)
    assert from_pb(to_pb(settings, pb.QueueSettings), QueueSettings) == settings
