"""The remote client's paged retry and purge of dead jobs (``dead_run``), against a
scripted broker: pages until none is left, sending back what earlier pages left
in place; one call when the caller pages or the broker knows no pages."""

from __future__ import annotations

from osqueue.client.remote.dead import PAGE_SEGMENTS, dead_run
from osqueue.wire._pb import queue_pb2 as pb


class Broker:
    """Answers each call with the next scripted response, recording the requests."""

    def __init__(self, *responses: pb.DeadResponse) -> None:
        self.responses = list(responses)
        self.requests: list[pb.DeadRequest] = []

    async def __call__(self, request: pb.DeadRequest) -> pb.DeadResponse:
        sent = pb.DeadRequest()
        sent.CopyFrom(request)
        self.requests.append(sent)
        return self.responses.pop(0)


async def test_pages_until_none_is_left_passing_back_the_kept_segments() -> None:
    broker = Broker(
        pb.DeadResponse(count=3, passed=["dead/a/1"], segments_left=5),
        pb.DeadResponse(count=2, passed=["dead/a/2", "dead/a/3"], segments_left=1),
        pb.DeadResponse(count=1, segments_left=0),
    )
    heard: list[tuple[int, int]] = []
    n = await dead_run(broker, None, {"error": "boom", "progress": lambda *a: heard.append(a)})
    assert n == 6
    assert heard == [(3, 5), (5, 1), (6, 0)]
    assert [list(r.passed) for r in broker.requests] == [
        [],
        ["dead/a/1"],
        ["dead/a/1", "dead/a/2", "dead/a/3"],
    ]
    assert all(r.max_segments == PAGE_SEGMENTS and r.error == "boom" for r in broker.requests)
    assert not any(r.all for r in broker.requests)  # a filter: never "all"


async def test_a_broker_that_knows_no_pages_did_the_whole_run_in_one_call() -> None:
    broker = Broker(pb.DeadResponse(count=7))  # no segments_left
    assert await dead_run(broker, None, {}) == 7
    (request,) = broker.requests
    assert request.all


async def test_a_page_the_caller_asks_for_is_one_call() -> None:
    broker = Broker(pb.DeadResponse(count=2, segments_left=9))
    assert await dead_run(broker, None, {"max_segments": 3}) == 2
    (request,) = broker.requests
    assert request.max_segments == 3
