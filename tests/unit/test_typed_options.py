"""A typed queue passes every option of a push through, by construction.

The options are one type (:class:`osqueue.api.JobOptions`) shared by ``push``
and ``push_many``; these tests read :class:`osqueue.NewJob`'s fields, so a
field added to a job and not carried by the typed queue fails here.
"""

from __future__ import annotations

import typing
from collections.abc import Sequence
from typing import Any

import msgspec

from osqueue.api import (
    ClaimOptions,
    Job,
    JobOptions,
    NewJob,
    PushOptions,
    ScheduleSpec,
    SettingsChange,
)
from osqueue.client.typed import TypedJob, TypedQueue
from osqueue.state import PutSchedule, SetQueue


class Order(msgspec.Struct):
    sku: str


#: A value other than the default for every option of a push.
OPTIONS: dict[str, Any] = {
    "priority": 4,
    "delay_s": 1.5,
    "key": "k",
    "max_attempts": 7,
    "id": "chosen",
    "group": "g",
    "after": ("p1",),
    "on_parent_failure": "run",
    "result_ttl_s": 30.0,
}


class Recorder:
    """A client that records what it is given."""

    def __init__(self) -> None:
        self.pushed: list[NewJob] = []
        self.completed: list[tuple[Job, object]] = []
        self.claims: list[dict[str, Any]] = []

    async def push(self, payload: bytes, **options: Any) -> str:
        self.pushed.append(NewJob(payload, **options))
        return "id"

    async def push_many(self, jobs: Sequence[NewJob]) -> list[str]:
        self.pushed.extend(jobs)
        return ["id"] * len(jobs)

    async def complete(self, job: Job, *, result: object = None) -> None:
        self.completed.append((job, result))

    async def claim(self, worker: str, queues: Sequence[str], **options: Any) -> list[Job]:
        self.claims.append(options)
        return []


def _fields(cls: type[msgspec.Struct]) -> set[str]:
    return {f.name for f in msgspec.structs.fields(cls)}


def test_the_option_types_name_every_field_of_their_op() -> None:
    assert set(typing.get_type_hints(JobOptions)) == _fields(NewJob) - {"payload", "queue"}
    assert set(typing.get_type_hints(PushOptions)) == _fields(NewJob) - {"payload"}
    assert set(typing.get_type_hints(ScheduleSpec)) == _fields(PutSchedule) - {"name"}
    assert set(typing.get_type_hints(SettingsChange)) == _fields(SetQueue) - {"queue", "remove"}
    assert set(typing.get_type_hints(ClaimOptions)) == {"max_jobs", "wait_s"}


def test_every_option_is_set_in_the_test() -> None:
    defaults = NewJob(b"")
    assert set(OPTIONS) == _fields(NewJob) - {"payload", "queue"}
    assert all(OPTIONS[name] != getattr(defaults, name) for name in OPTIONS)


async def test_push_and_push_many_carry_every_option() -> None:
    client = Recorder()
    orders = TypedQueue(client, Order, queue="orders")  # type: ignore[arg-type]
    await orders.push(Order("a"), **OPTIONS)
    await orders.push_many([Order("b")], **OPTIONS)
    for job in client.pushed:
        assert job.queue == "orders"
        for name, value in OPTIONS.items():
            assert getattr(job, name) == value, name


async def test_complete_carries_the_result_and_claim_its_options() -> None:
    client = Recorder()
    orders = TypedQueue(client, Order, queue="orders")  # type: ignore[arg-type]
    job = Job(id="j", queue="orders", payload=b"{}", attempts=1, max_attempts=5, token=3)
    await orders.complete(TypedJob(job, Order("x")), result={"n": 1})
    assert client.completed == [(job, {"n": 1})]
    await orders.claim("w", max_jobs=3, wait_s=2.0)
    assert client.claims == [{"max_jobs": 3, "wait_s": 2.0}]
