"""A call is made into its op, and checked, once: by :mod:`osqueue.state.make`.

The in-process client, the remote client and the gRPC server all call these
functions; a bad field is ``InvalidInput`` naming it (under the item's place
when the server gives one), and a push made here is not checked again at
commit.
"""

from __future__ import annotations

from typing import Any

import msgspec
import pytest

from osqueue.api import Job, NewJob
from osqueue.errors import InvalidInput
from osqueue.state import Document, Pushed, apply, make

LIMIT = 1000


@pytest.mark.parametrize(
    ("options", "field"),
    [
        ({"id": "x" * 65}, "id"),
        ({"id": "has space"}, "id"),
        ({"queue": ""}, "queue"),
        ({"priority": 2**40}, "priority"),
        ({"delay_s": -1.0}, "delay_s"),
        ({"delay_s": float("nan")}, "delay_s"),
        ({"max_attempts": 0}, "max_attempts"),
        ({"key": ""}, "key"),
        ({"group": ""}, "group"),
        ({"after": ("ok", "bad id")}, "after[1]"),
        ({"id": "me", "after": ("me",)}, "after[0]"),
        ({"on_parent_failure": "maybe"}, "on_parent_failure"),
        ({"result_ttl_s": -5.0}, "result_ttl_s"),
        ({"payload": b"x" * (LIMIT + 1)}, "payload"),
        ({"payload": "text"}, "payload"),
    ],
)
def test_a_bad_push_names_its_field(options: dict[str, Any], field: str) -> None:
    payload = options.pop("payload", b"p")
    job = NewJob(payload, **options)
    with pytest.raises(InvalidInput) as info:
        make.push(job, LIMIT)
    assert info.value.field == field
    with pytest.raises(InvalidInput) as placed:  # as the server reports an item of a batch
        make.push(job, LIMIT, "jobs[3]")
    assert placed.value.field == f"jobs[3].{field}"


def test_a_push_made_here_commits_without_a_second_check() -> None:
    op = make.push(NewJob(b"p", queue="q", delay_s=1, id="chosen"), LIMIT)
    assert op.delay_s == 1.0
    assert type(op.delay_s) is float
    assert op.dedupe is True  # a caller's id may be sent again
    _, (answer,) = apply(Document.empty(), [op], 1_700_000_000.0)
    assert answer == Pushed("chosen", True)
    made_up = make.push(NewJob(bytearray(b"p")), LIMIT)  # type: ignore[arg-type]
    assert made_up.dedupe is False
    assert type(made_up.payload) is bytes


def test_the_holders_calls_and_a_claim_name_their_fields() -> None:
    with pytest.raises(InvalidInput) as info:
        make.claim("w", ("ok", "bad queue"), 1)
    assert info.value.field == "queues[1]"
    with pytest.raises(InvalidInput) as info:
        make.claim("w", "q", 0)
    assert info.value.field == "max_jobs"
    assert make.claim("w", "q", 2).queues == ("q",)
    with pytest.raises(InvalidInput) as info:
        make.heartbeat("job-1")  # type: ignore[arg-type]
    assert info.value.field == "job"
    job = Job(id="j", queue="q", payload=b"", attempts=1, max_attempts=5, token=4)
    assert make.fail(job, "e" * 10, None, 3).error == "eee"
    with pytest.raises(InvalidInput) as info:
        make.ref("j", 0, "jobs[2]")
    assert info.value.field == "jobs[2].token"
    with pytest.raises(InvalidInput) as info:
        make.wait(-1.0)
    assert info.value.field == "wait_s"


def test_every_field_of_a_new_job_reaches_its_push() -> None:
    # read from NewJob's fields: a field added to a job and not carried shows here
    values: dict[str, Any] = {
        "payload": b"body",
        "queue": "q1",
        "priority": 7,
        "delay_s": 2.5,
        "key": "k1",
        "max_attempts": 9,
        "id": "chosen-1",
        "group": "g1",
        "after": ("parent-1",),
        "on_parent_failure": "run",
        "result_ttl_s": 60.0,
    }
    fields = [f.name for f in msgspec.structs.fields(NewJob)]
    assert set(values) == set(fields)
    defaults = NewJob(b"")
    assert all(values[name] != getattr(defaults, name) for name in fields)
    op = make.push(NewJob(**values), LIMIT)
    for name in fields:
        assert getattr(op, name) == values[name], name
