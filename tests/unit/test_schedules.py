"""Periodic jobs in the pure transitions: each tick recorded and pushed in one version."""

from __future__ import annotations

from datetime import UTC, datetime

import msgspec
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from osqueue.errors import CorruptDocument, InvalidInput, QueueFull
from osqueue.state import (
    Counted,
    Document,
    Policy,
    PutSchedule,
    RemoveSchedule,
    Scheduled,
    apply,
    decode,
    encode,
    next_tick_at,
    transition,
)
from osqueue.state.schedules import latest_tick, tick_after, tick_job_id

#: 2026-01-01T00:00:00Z, a Thursday
T0 = datetime(2026, 1, 1, tzinfo=UTC).timestamp()


def scheduled(doc: Document, now: float, **kw: object) -> Document:
    spec: dict[str, object] = {"name": "beat", "queue": "q", "every_s": 60.0, "payload": b"hi"}
    spec.update(kw)
    doc, (res,) = apply(doc, [PutSchedule(**spec)], now)  # type: ignore[arg-type]
    assert isinstance(res, Scheduled), res
    return doc


def jobs_of(doc: Document) -> list[str]:
    return sorted(j.id for j in doc.jobs.values())


def test_every_s_ticks_fall_on_the_epoch_multiples_and_fire_in_the_commit_that_records_them() -> (
    None
):
    doc = scheduled(Document.empty(), T0 + 5)
    s = doc.schedules.get("beat")
    assert s is not None
    assert s.next_at.timestamp() == T0 + 60  # the first tick after the schedule was made
    assert next_tick_at(doc) == T0 + 60
    doc, _ = apply(doc, [], T0 + 59.999)
    assert jobs_of(doc) == []
    doc, _ = apply(doc, [], T0 + 60.2)
    assert jobs_of(doc) == ["beat:20260101T000100Z"]
    job = doc.jobs["beat:20260101T000100Z"]
    assert (job.queue, job.payload, job.status) == ("q", b"hi", "queued")
    s = doc.schedules.get("beat")
    assert s is not None
    assert s.last_at is not None
    assert (s.last_at.timestamp(), s.next_at.timestamp()) == (T0 + 60, T0 + 120)
    assert s.last_job == "beat:20260101T000100Z"


def test_a_replayed_tick_pushes_nothing_twice() -> None:
    """The same base document committed twice (a write that landed after all, a
    broker that re-applies on what it read) yields the same job id; a document
    that already holds the tick's job keeps one."""
    base = scheduled(Document.empty(), T0)
    first, _ = apply(base, [], T0 + 61)
    again, _ = apply(base, [], T0 + 62)
    assert jobs_of(first) == jobs_of(again) == ["beat:20260101T000100Z"]
    # a document whose schedule lost the tick record but holds the job: applied once
    s = first.schedules.get("beat")
    assert s is not None
    rewound = first.copy()
    rewound.schedules.put(msgspec.structs.replace(s, next_at=base.schedules.get("beat").next_at))  # type: ignore[union-attr]
    t = transition(rewound, [], T0 + 63)
    assert jobs_of(t.doc) == ["beat:20260101T000100Z"]
    assert t.doc.stats.pushed == 1


def test_catch_up_once_fires_one_job_for_every_missed_tick() -> None:
    doc = scheduled(Document.empty(), T0)
    doc, _ = apply(doc, [], T0 + 10 * 60 + 30)  # ten ticks passed with no commit
    assert jobs_of(doc) == ["beat:20260101T001000Z"]  # the latest one
    s = doc.schedules.get("beat")
    assert s is not None
    assert s.next_at.timestamp() == T0 + 11 * 60


def test_catch_up_skip_skips_a_tick_that_is_too_late_and_goes_on() -> None:
    doc = scheduled(Document.empty(), T0, every_s=3600.0, catch_up="skip")
    doc, _ = apply(doc, [], T0 + 3600 + 30)  # 30 s late: within the grace, fired
    assert jobs_of(doc) == ["beat:20260101T010000Z"]
    doc, _ = apply(doc, [], T0 + 3 * 3600 + 600)  # two ticks missed, the latest 600 s late
    assert jobs_of(doc) == ["beat:20260101T010000Z"]
    s = doc.schedules.get("beat")
    assert s is not None
    assert s.last_note is not None
    assert "skipped" in s.last_note
    assert s.last_job == "beat:20260101T010000Z"
    assert s.next_at.timestamp() == T0 + 4 * 3600
    doc, _ = apply(doc, [], T0 + 4 * 3600 + 1)
    assert "beat:20260101T040000Z" in jobs_of(doc)
    # the grace is the policy's
    late = scheduled(Document.empty(), T0, every_s=3600.0, catch_up="skip")
    late, _ = apply(late, [], T0 + 3600 + 30, Policy(schedule_grace_s=10.0))
    assert jobs_of(late) == []


def test_a_clock_that_steps_back_fires_nothing_until_it_passes_the_next_tick_again() -> None:
    doc = scheduled(Document.empty(), T0)
    doc, _ = apply(doc, [], T0 + 61)
    doc, _ = apply(doc, [], T0 + 30)  # stepped back
    doc, _ = apply(doc, [], T0 + 100)
    assert jobs_of(doc) == ["beat:20260101T000100Z"]
    doc, _ = apply(doc, [], T0 + 121)
    assert jobs_of(doc) == ["beat:20260101T000100Z", "beat:20260101T000200Z"]


def test_cron_reads_its_time_zone_and_ticks_in_utc() -> None:
    doc = scheduled(Document.empty(), T0, every_s=None, cron="0 3 * * *", tz="Europe/Paris")
    s = doc.schedules.get("beat")
    assert s is not None
    # 03:00 in Paris in January is 02:00 UTC
    assert s.next_at == datetime(2026, 1, 1, 2, 0, tzinfo=UTC)
    doc, _ = apply(doc, [], datetime(2026, 1, 1, 2, 0, 1, tzinfo=UTC).timestamp())
    assert jobs_of(doc) == ["beat:20260101T020000Z"]
    s = doc.schedules.get("beat")
    assert s is not None
    assert s.next_at == datetime(2026, 1, 2, 2, 0, tzinfo=UTC)
    # the summer: 03:00 in Paris is 01:00 UTC
    assert (
        tick_after(s, datetime(2026, 7, 1, tzinfo=UTC).timestamp())
        == datetime(2026, 7, 1, 1, 0, tzinfo=UTC).timestamp()
    )


def test_cron_latest_tick_is_at_or_before_now() -> None:
    doc = scheduled(Document.empty(), T0, every_s=None, cron="*/5 * * * *")
    s = doc.schedules.get("beat")
    assert s is not None
    assert latest_tick(s, T0 + 300) == T0 + 300  # a tick exactly now counts
    assert latest_tick(s, T0 + 299.999) == T0
    assert tick_after(s, T0 + 300) == T0 + 600


@pytest.mark.parametrize(
    ("spec", "field"),
    [
        ({"cron": "* * * *"}, "cron"),  # four fields
        ({"cron": "* * * * * *"}, "cron"),  # six: seconds are not cron here
        ({"cron": "61 * * * *"}, "cron"),
        ({"cron": "0 0 30 2 *"}, "cron"),  # never fires
        ({"cron": "* * * * *", "every_s": 60.0}, "cron"),
        ({"every_s": None}, "cron"),  # neither
        ({"every_s": 0.5}, "every_s"),
        ({"every_s": 1.0005}, "every_s"),
        ({"every_s": float("nan")}, "every_s"),
        ({"tz": "Mars/Olympus"}, "tz"),
        ({"tz": "Europe/Paris"}, "tz"),  # with every_s
        ({"name": "has space"}, "name"),
        ({"name": "x" * 41}, "name"),
        ({"queue": ""}, "queue"),
        ({"catch_up": "always"}, "catch_up"),
        ({"max_attempts": 0}, "max_attempts"),
        ({"priority": 2**40}, "priority"),
        ({"payload": "text"}, "payload"),
    ],
)
def test_a_bad_schedule_is_refused_naming_its_field(spec: dict[str, object], field: str) -> None:
    full: dict[str, object] = {"name": "beat", "queue": "q", "every_s": 60.0}
    full.update(spec)
    if "cron" in spec and "every_s" not in spec:
        full["every_s"] = None
    doc, (res,) = apply(Document.empty(), [PutSchedule(**full)], T0)  # type: ignore[arg-type]
    assert isinstance(res, InvalidInput), res
    assert res.field == field
    assert not doc.schedules


def test_rescheduling_a_name_replaces_it_and_never_refires_a_recorded_tick() -> None:
    doc = scheduled(Document.empty(), T0)
    doc, _ = apply(doc, [], T0 + 60.5)
    # replaced 0.5 s after the tick it just fired, with a period that also ticks then
    doc = scheduled(doc, T0 + 61, every_s=30.0, payload=b"new")
    s = doc.schedules.get("beat")
    assert s is not None
    assert (s.every_s, s.payload, s.next_at.timestamp()) == (30.0, b"new", T0 + 90)
    assert s.last_job == "beat:20260101T000100Z"
    assert len(doc.schedules) == 1
    doc, _ = apply(doc, [], T0 + 95)
    assert jobs_of(doc) == ["beat:20260101T000100Z", "beat:20260101T000130Z"]


def test_a_paused_schedule_fires_nothing_across_many_due_ticks_and_moves_on() -> None:
    doc = scheduled(Document.empty(), T0, paused=True)
    s = doc.schedules.get("beat")
    assert s is not None
    assert s.paused
    assert next_tick_at(doc) is None  # the idle broker does not wake for it
    assert next_tick_at(decode(encode(doc))) is None  # nor once read back
    both = scheduled(doc, T0, name="other", every_s=300.0)
    assert next_tick_at(both) == T0 + 300
    for minute in range(1, 11):  # ten ticks come due, each with a commit
        doc, _ = apply(doc, [], T0 + minute * 60 + 1)
        s = doc.schedules.get("beat")
        assert s is not None
        assert s.last_at is not None
        assert (s.last_at.timestamp(), s.next_at.timestamp()) == (
            T0 + minute * 60,
            T0 + (minute + 1) * 60,
        )
        assert s.last_note is not None
        assert "paused" in s.last_note
    doc, _ = apply(doc, [], T0 + 30 * 60 + 1)  # and twenty with no commit
    assert jobs_of(doc) == []
    s = doc.schedules.get("beat")
    assert s is not None
    assert (s.next_at.timestamp(), s.last_job) == (T0 + 31 * 60, None)
    assert doc.stats.pushed == 0


def test_a_resumed_schedule_fires_its_next_tick_on_time_and_never_the_missed_ones() -> None:
    doc = scheduled(Document.empty(), T0)
    doc, _ = apply(doc, [], T0 + 61)
    assert jobs_of(doc) == ["beat:20260101T000100Z"]
    doc = scheduled(doc, T0 + 62, paused=True)
    assert next_tick_at(doc) is None
    doc, _ = apply(doc, [], T0 + 5 * 60 + 1)  # ticks 2-5 skipped while paused
    doc, _ = apply(doc, [], T0 + 9 * 60 + 30)  # 6-9 missed with no commit
    doc = scheduled(doc, T0 + 9 * 60 + 40, paused=False)  # resumed
    s = doc.schedules.get("beat")
    assert s is not None
    assert not s.paused
    assert s.next_at.timestamp() == T0 + 10 * 60
    assert next_tick_at(doc) == T0 + 10 * 60  # awake again
    doc, _ = apply(doc, [], T0 + 9 * 60 + 59)
    assert jobs_of(doc) == ["beat:20260101T000100Z"]  # no burst of the missed ticks
    doc, _ = apply(doc, [], T0 + 10 * 60 + 0.5)
    assert jobs_of(doc) == ["beat:20260101T000100Z", "beat:20260101T001000Z"]
    assert doc.stats.pushed == 2


def test_paused_must_be_a_bool() -> None:
    doc, (res,) = apply(Document.empty(), [PutSchedule("beat", "q", every_s=60.0, paused=1)], T0)  # type: ignore[arg-type]
    assert isinstance(res, InvalidInput), res
    assert res.field == "paused"
    assert not doc.schedules


def test_unschedule_removes_and_says_whether_there_was_one() -> None:
    doc = scheduled(Document.empty(), T0)
    doc, res = apply(doc, [RemoveSchedule("beat"), RemoveSchedule("beat")], T0 + 1)
    assert res == [Counted(1), Counted(0)]
    doc, _ = apply(doc, [], T0 + 1000)
    assert jobs_of(doc) == []
    assert next_tick_at(doc) is None


def test_a_tick_the_document_cannot_hold_is_recorded_with_a_note() -> None:
    doc = scheduled(Document.empty(), T0, payload=b"x" * 2000)
    small = Policy(max_document_bytes=doc.size_bytes() + 500)
    doc, _ = apply(doc, [], T0 + 61, small)
    assert jobs_of(doc) == []
    s = doc.schedules.get("beat")
    assert s is not None
    assert s.last_note is not None
    assert "pushed no job" in s.last_note
    assert s.next_at.timestamp() == T0 + 120  # no commit loop spinning on it


def test_max_schedules_bounds_the_document() -> None:
    doc = scheduled(Document.empty(), T0)
    doc, (res,) = apply(doc, [PutSchedule("other", "q", every_s=60.0)], T0, Policy(max_schedules=1))
    assert isinstance(res, QueueFull)
    doc = scheduled(doc, T0, payload=b"replacing is fine")


def test_schedules_round_trip_through_the_codec_as_format_4() -> None:
    doc = scheduled(Document.empty(), T0)
    doc = scheduled(doc, T0, name="nightly", every_s=None, cron="0 3 * * *", tz="Asia/Tokyo")
    doc, _ = apply(doc, [], T0 + 61)
    data = encode(doc)
    assert len(data) == doc.size_bytes()
    back = decode(data)
    assert back == doc
    assert b'"format":4' in data
    assert encode(back) == data
    assert next_tick_at(back) == next_tick_at(doc)


def test_a_document_without_schedules_is_written_as_format_4_too() -> None:
    doc, _ = apply(Document.empty(), [], T0)
    assert b'"format":4' in encode(doc)


@pytest.mark.parametrize(
    ("mutate", "path"),
    [
        (lambda s: {**s, "cron": "* * *"}, "$.schedules[0].cron"),
        (lambda s: {**s, "name": "bad name"}, "$.schedules[0].name"),
        (lambda s: {**s, "every_s": None}, "$.schedules[0].cron"),
    ],
)
def test_a_bad_stored_schedule_is_corrupt_naming_its_path(mutate: object, path: str) -> None:
    doc = scheduled(Document.empty(), T0)
    raw = msgspec.json.decode(encode(doc))
    raw["schedules"][0] = mutate(raw["schedules"][0])  # type: ignore[operator]
    with pytest.raises(CorruptDocument) as err:
        decode(msgspec.json.encode(raw))
    assert err.value.path == path


@settings(max_examples=60, deadline=None)
@given(
    st.lists(st.floats(min_value=-200.0, max_value=900.0, allow_nan=False), min_size=1),
    st.sampled_from([7.0, 30.0, 60.0]),
)
def test_each_tick_yields_at_most_one_job_and_every_commit_catches_up(
    steps: list[float], every_s: float
) -> None:
    """Commits at arbitrary times (the clock going back and forth): no id twice, each
    job's tick was due when pushed, and after each commit the schedule has
    recorded the latest tick at or before the latest time seen."""
    doc = scheduled(Document.empty(), T0, every_s=every_s)
    now = T0
    high = T0
    pushed: dict[str, float] = {}
    for delta in steps:
        now = max(T0 - 500, now + delta)
        t = transition(doc, [], now)
        for job in t.doc.jobs.values():
            if job.id not in doc.jobs:
                assert job.id not in pushed
                pushed[job.id] = now
        doc = t.doc
        high = max(high, now)
        s = doc.schedules.get("beat")
        assert s is not None
        if high >= T0 + every_s - (T0 % every_s):
            expected = (high * 1000 // (every_s * 1000)) * every_s
            latest = s.last_at.timestamp() if s.last_at is not None else None
            if now == high:
                assert latest == expected
            assert s.next_at.timestamp() > (latest or T0)
    for job_id, at in pushed.items():
        tick = datetime.strptime(job_id.split(":", 1)[1], "%Y%m%dT%H%M%SZ").replace(tzinfo=UTC)
        assert tick.timestamp() <= at
        assert job_id == tick_job_id("beat", tick.timestamp())


@settings(max_examples=60, deadline=None)
@given(st.lists(st.tuples(st.booleans(), st.integers(0, 6), st.integers(1, 5000)), max_size=40))
def test_the_schedules_size_is_the_length_of_their_section(
    steps: list[tuple[bool, int, int]],
) -> None:
    """Kept as schedules are put and removed, without joining the section each time."""
    doc = scheduled(Document.empty(), T0)
    for put, n, every in steps:
        if put:
            doc = scheduled(doc, T0, name=f"s{n}", every_s=float(every))
        else:
            doc.schedules.remove(f"s{n}")
        assert doc.schedules.size_bytes() == len(doc.schedules.section())
    copied = doc.schedules.copy()
    assert copied.size_bytes() == len(copied.section())
