"""Hostile input over gRPC: every request type, fuzzed with Hypothesis.

Each hostile request is refused with INVALID_ARGUMENT naming the field (per
item inside a batch, or for the whole call), nothing is written (the queue
document's version does not move), and the broker keeps serving everyone else
(a well-formed push from another connection succeeds after every example).
"""

from __future__ import annotations

import math
import uuid
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import Any

import grpc
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from remote_helpers import quiet_broker_config, read_document

from osqueue.client.loop_thread import LoopThread
from osqueue.server.limits import Limits
from osqueue.server.runner import BrokerServer
from osqueue.server.server import ServerConfig
from osqueue.state import validate
from osqueue.storage import MemoryStorage
from osqueue.wire._pb import queue_pb2 as pb
from osqueue.wire._pb import queue_pb2_grpc as pb_grpc

LIMITS = Limits(
    max_payload_bytes=1024,
    max_batch=16,
    max_message_bytes=64 * 1024,
    max_error_chars=256,
    max_wait_s=60.0,
    max_queues_per_claim=8,
)
SETTINGS = settings(
    max_examples=40,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
)


@dataclass
class Harness:
    """A broker and its gRPC server on a private loop thread, and a sync stub."""

    loop: LoopThread
    server: BrokerServer
    url: str
    channel: Any
    stub: Any
    bystander: Any
    pushes: int = 0

    def version(self) -> int:
        return self.loop.run(read_document(self.url)).version

    def still_serving(self) -> None:
        """Another connection's ordinary push goes through."""
        self.pushes += 1
        response = self.bystander.Push(
            pb.PushRequest(jobs=[pb.NewJob(id=f"bystander-{self.pushes}", queue="ok", payload=b"")])
        )
        assert response.results[0].status.code == pb.CODE_OK


@pytest.fixture(scope="module")
def harness() -> Iterator[Harness]:
    name = f"hostile-{uuid.uuid4().hex}"
    url = f"memory://{name}"
    loop = LoopThread("hostile-broker")
    server = BrokerServer(
        url, ServerConfig(listen="127.0.0.1:0", limits=LIMITS), quiet_broker_config()
    )
    loop.run(server.start())
    options = [("grpc.use_local_subchannel_pool", 1)]
    hostile = grpc.insecure_channel(server.address, options=options)
    polite = grpc.insecure_channel(server.address, options=options)
    try:
        yield Harness(
            loop, server, url, hostile, pb_grpc.QueueStub(hostile), pb_grpc.QueueStub(polite)
        )
    finally:
        hostile.close()
        polite.close()
        loop.run(server.stop())
        loop.close()
        MemoryStorage.drop(name)


# ---------------------------------------------------------------------- values

good_ids = st.from_regex(r"\A[0-9A-Za-z_.:\-]{1,64}\Z")
good_queues = st.from_regex(r"\A[0-9A-Za-z_.:/\-]{1,128}\Z")
bad_ids = st.one_of(
    st.just(""),
    st.text(min_size=65, max_size=300),
    st.text(min_size=1, max_size=40).filter(lambda s: not validate.ID_RE.match(s)),
)
bad_queues = st.one_of(
    st.just(""),
    st.text(min_size=129, max_size=300),
    st.text(min_size=1, max_size=40).filter(lambda s: not validate.NAME_RE.match(s)),
)
negative_s = st.floats(max_value=-1e-9, allow_infinity=True, allow_nan=False)
bad_seconds = st.one_of(
    negative_s, st.just(math.nan), st.just(math.inf), st.floats(min_value=1e12, max_value=1e300)
)
bad_wait_s = st.one_of(
    negative_s, st.just(math.nan), st.just(math.inf), st.floats(min_value=61.0, max_value=1e300)
)
bad_tokens = st.integers(min_value=-(2**63), max_value=0)
bad_max_attempts = st.one_of(
    st.integers(min_value=-(2**31), max_value=0), st.integers(min_value=1001, max_value=2**31 - 1)
)
bad_keys = st.one_of(st.just(""), st.text(min_size=513, max_size=700))
bad_workers = st.one_of(
    st.just(""),
    st.text(min_size=257, max_size=400),
    st.text(min_size=1, max_size=20).filter(lambda s: not s.isprintable()),
)
oversized_payloads = st.binary(min_size=1025, max_size=1200)


def good_job(i: int) -> pb.NewJob:
    return pb.NewJob(id=f"job-{uuid.uuid4().hex}-{i}", queue="q", payload=b"x")


@st.composite
def corrupt_job(draw: st.DrawFn, i: int) -> tuple[pb.NewJob, str]:
    """A job with one bad field, and that field's name."""
    job = good_job(i)
    which = draw(st.sampled_from(["id", "queue", "payload", "delay_s", "key", "max_attempts"]))
    if which == "id":
        job.id = draw(bad_ids)
    elif which == "queue":
        job.queue = draw(bad_queues)
    elif which == "payload":
        job.payload = draw(oversized_payloads)
    elif which == "delay_s":
        job.delay_s = draw(bad_seconds)
    elif which == "key":
        job.key = draw(bad_keys)
    else:
        job.max_attempts = draw(bad_max_attempts)
    return job, f"jobs[{i}].{which}"


@st.composite
def hostile_pushes(draw: st.DrawFn) -> tuple[pb.PushRequest, list[str]]:
    n = draw(st.integers(min_value=1, max_value=LIMITS.max_batch))
    jobs, fields = zip(*(draw(corrupt_job(i)) for i in range(n)), strict=True)
    return pb.PushRequest(jobs=list(jobs)), list(fields)


@st.composite
def corrupt_ref(draw: st.DrawFn, field: str) -> tuple[pb.JobRef, str]:
    if draw(st.booleans()):
        return pb.JobRef(id=draw(bad_ids), token=1), f"{field}.id"
    return pb.JobRef(id=draw(good_ids), token=draw(bad_tokens)), f"{field}.token"


@st.composite
def hostile_refs(draw: st.DrawFn) -> tuple[pb.JobRefsRequest, list[str]]:
    n = draw(st.integers(min_value=1, max_value=LIMITS.max_batch))
    refs, fields = zip(*(draw(corrupt_ref(f"jobs[{i}]")) for i in range(n)), strict=True)
    return pb.JobRefsRequest(jobs=list(refs)), list(fields)


@st.composite
def hostile_fails(draw: st.DrawFn) -> tuple[pb.FailRequest, list[str]]:
    n = draw(st.integers(min_value=1, max_value=LIMITS.max_batch))
    items, fields = [], []
    for i in range(n):
        where = f"items[{i}]"
        which = draw(st.sampled_from(["job", "ref", "error", "retry_after_s"]))
        item = pb.FailItem(job=pb.JobRef(id=draw(good_ids), token=1))
        if which == "job":
            item.ClearField("job")
            field = f"{where}.job"
        elif which == "ref":
            ref, field = draw(corrupt_ref(f"{where}.job"))
            item.job.CopyFrom(ref)
        elif which == "error":
            item.error = draw(st.text(min_size=257, max_size=400))
            field = f"{where}.error"
        else:
            item.retry_after_s = draw(bad_seconds)
            field = f"{where}.retry_after_s"
        items.append(item)
        fields.append(field)
    return pb.FailRequest(items=items), fields


@st.composite
def hostile_claims(draw: st.DrawFn) -> tuple[pb.ClaimRequest, str]:
    request = pb.ClaimRequest(worker="w", queues=["q"], max_jobs=1, wait_s=0)
    which = draw(
        st.sampled_from(["worker", "no queues", "many queues", "queue", "max_jobs", "wait"])
    )
    if which == "worker":
        request.worker = draw(bad_workers)
        return request, "worker"
    if which == "no queues":
        del request.queues[:]
        return request, "queues"
    if which == "many queues":
        request.queues[:] = [f"q{i}" for i in range(LIMITS.max_queues_per_claim + 1)]
        return request, "queues"
    if which == "queue":
        i = draw(st.integers(min_value=0, max_value=3))
        request.queues[:] = ["q"] * i + [draw(bad_queues)]
        return request, f"queues[{i}]"
    if which == "max_jobs":
        request.max_jobs = draw(
            st.one_of(
                st.integers(min_value=-(2**31), max_value=0),
                st.integers(min_value=LIMITS.max_batch + 1, max_value=2**31 - 1),
            )
        )
        return request, "max_jobs"
    request.wait_s = draw(bad_wait_s)
    return request, "wait_s"


def assert_items_refused(statuses: list[pb.Status], fields: list[str]) -> None:
    assert len(statuses) == len(fields)
    for status, field in zip(statuses, fields, strict=True):
        assert status.code == pb.CODE_INVALID_ARGUMENT, (field, status)
        assert status.reason == pb.REASON_INVALID_INPUT
        assert status.field == field
        assert status.message.startswith(f"{field}: ")


def assert_call_refused(call: Callable[[], object], field: str) -> None:
    with pytest.raises(grpc.RpcError) as caught:
        call()
    error: Any = caught.value
    assert error.code() == grpc.StatusCode.INVALID_ARGUMENT
    assert error.details().startswith(f"{field}: "), error.details()


class Unchanged:
    """Call after a hostile request: nothing was written, and others are still served."""

    def __init__(self, harness: Harness) -> None:
        self.harness = harness
        self.version = harness.version()

    def __call__(self) -> None:
        assert self.harness.version() == self.version, "a refused request changed the document"
        self.harness.still_serving()
        self.version = self.harness.version()


@pytest.fixture
def unchanged(harness: Harness) -> Unchanged:
    return Unchanged(harness)


# ---------------------------------------------------------------------- the properties

SHARED_FIXTURES = settings(
    SETTINGS,
    suppress_health_check=[*SETTINGS.suppress_health_check, HealthCheck.function_scoped_fixture],
)


@SHARED_FIXTURES
@given(case=hostile_pushes())
def test_hostile_pushes(
    harness: Harness, unchanged: Unchanged, case: tuple[pb.PushRequest, list[str]]
) -> None:
    request, fields = case
    response = harness.stub.Push(request)
    assert_items_refused([r.status for r in response.results], fields)
    assert [r.id for r in response.results] == [job.id for job in request.jobs]
    unchanged()


@SHARED_FIXTURES
@given(case=hostile_refs(), method=st.sampled_from(["Heartbeat", "Complete", "Release"]))
def test_hostile_job_refs(
    harness: Harness,
    unchanged: Unchanged,
    case: tuple[pb.JobRefsRequest, list[str]],
    method: str,
) -> None:
    request, fields = case
    response = getattr(harness.stub, method)(request)
    assert_items_refused(list(response.results), fields)
    unchanged()


@SHARED_FIXTURES
@given(case=hostile_fails())
def test_hostile_fails(
    harness: Harness, unchanged: Unchanged, case: tuple[pb.FailRequest, list[str]]
) -> None:
    request, fields = case
    assert_items_refused(list(harness.stub.Fail(request).results), fields)
    unchanged()


@SHARED_FIXTURES
@given(ids=st.lists(bad_ids, min_size=1, max_size=LIMITS.max_batch))
def test_hostile_cancels(harness: Harness, unchanged: Unchanged, ids: list[str]) -> None:
    response = harness.stub.Cancel(pb.CancelRequest(ids=ids))
    assert_items_refused(list(response.results), [f"ids[{i}]" for i in range(len(ids))])
    unchanged()


@SHARED_FIXTURES
@given(case=hostile_claims(), stream=st.booleans())
def test_hostile_claims(
    harness: Harness,
    unchanged: Unchanged,
    case: tuple[pb.ClaimRequest, str],
    stream: bool,
) -> None:
    request, field = case
    if stream:
        assert_call_refused(lambda: list(harness.stub.ClaimStream(request)), field)
    else:
        assert_call_refused(lambda: harness.stub.Claim(request), field)
    unchanged()


@SHARED_FIXTURES
@given(
    ids=st.lists(bad_ids, min_size=1, max_size=4),
    method=st.sampled_from(["RetryDead", "PurgeDead"]),
)
def test_hostile_dead_letter_requests(
    harness: Harness, unchanged: Unchanged, ids: list[str], method: str
) -> None:
    call = getattr(harness.stub, method)
    assert_call_refused(lambda: call(pb.DeadRequest(ids=ids)), "ids[0]")
    assert_call_refused(lambda: call(pb.DeadRequest(ids=["a"], all=True)), "ids")
    unchanged()


METHODS = [
    "Push",
    "Claim",
    "ClaimStream",
    "Heartbeat",
    "Complete",
    "Fail",
    "Release",
    "Cancel",
    "Stats",
    "RetryDead",
    "PurgeDead",
]


@SHARED_FIXTURES
@given(method=st.sampled_from(METHODS), tail=st.binary(max_size=64))
def test_garbage_bytes_are_refused_naming_the_request(
    harness: Harness, unchanged: Unchanged, method: str, tail: bytes
) -> None:
    # Field 1, length-delimited, claiming ~268 MB: never a valid message.
    garbage = b"\x0a\xff\xff\xff\x7f" + tail
    channel = harness.channel
    path = f"/osqueue.v1.Queue/{method}"
    if method == "ClaimStream":
        call = channel.unary_stream(path)
        assert_call_refused(lambda: list(call(garbage)), "request")
    else:
        call = channel.unary_unary(path)
        assert_call_refused(lambda: call(garbage), "request")
    unchanged()


def test_batches_out_of_bounds_are_refused_whole(harness: Harness, unchanged: Unchanged) -> None:
    too_many = [good_job(i) for i in range(LIMITS.max_batch + 1)]
    assert_call_refused(lambda: harness.stub.Push(pb.PushRequest(jobs=too_many)), "jobs")
    assert_call_refused(lambda: harness.stub.Push(pb.PushRequest()), "jobs")
    refs = [pb.JobRef(id="a", token=1)] * (LIMITS.max_batch + 1)
    assert_call_refused(lambda: harness.stub.Complete(pb.JobRefsRequest(jobs=refs)), "jobs")
    assert_call_refused(lambda: harness.stub.Cancel(pb.CancelRequest()), "ids")
    unchanged()


def test_a_message_above_the_size_limit_is_refused_by_grpc(
    harness: Harness, unchanged: Unchanged
) -> None:
    huge = pb.PushRequest(jobs=[pb.NewJob(id="huge", queue="q", payload=b"x" * (80 * 1024))])
    with pytest.raises(grpc.RpcError) as caught:
        harness.stub.Push(huge)
    assert caught.value.code() == grpc.StatusCode.RESOURCE_EXHAUSTED  # type: ignore[attr-defined]
    unchanged()
