"""The blocking twin is derived from the client protocol: every method, its
signature and its docstring, and each call runs the client's own method."""

from __future__ import annotations

import inspect
import pydoc
import uuid
from collections.abc import Iterator

import pytest

import osqueue.client.remote
import osqueue.sync
from osqueue.api import NewJob
from osqueue.client.remote import connect_sync
from osqueue.client.sync import SyncClient, SyncClientProtocol
from osqueue.errors import InvalidInput, JobNotFound
from osqueue.storage import MemoryStorage

LIFECYCLE = {"close"}  # written by hand: it also stops the loop thread


def _protocol_methods() -> list[str]:
    return sorted(
        name
        for name, member in inspect.getmembers(SyncClientProtocol)
        if not name.startswith("_") and inspect.iscoroutinefunction(member)
    )


def test_every_async_method_of_the_protocol_has_a_blocking_twin() -> None:
    methods = _protocol_methods()
    assert {"push", "claim", "complete_and_claim", "push_results", "purge_dead"} <= set(methods)
    for name in methods:
        twin = getattr(SyncClient, name)
        assert not inspect.iscoroutinefunction(twin), name
        if name in LIFECYCLE:
            continue
        source = getattr(SyncClientProtocol, name)
        assert twin.__wrapped__ is source, name
        assert inspect.signature(twin) == inspect.signature(source), name
        assert twin.__doc__ == source.__doc__, name


def test_help_shows_the_async_signature_and_docstring() -> None:
    text = pydoc.render_doc(SyncClient, renderer=pydoc.plaintext)
    assert "push_results(self, jobs: 'Sequence[NewJob]') -> 'list[str | OsqueueError]'" in text
    assert "Push a batch; one result per job" in text
    assert "**options: 'Unpack[PushOptions]'" in text
    # the dead-letter calls take the same filters as the async clients' (queue, error, ...)
    assert (
        "retry_dead(self, ids: 'Sequence[str] | None' = None, **options: 'Unpack[DeadOptions]')"
        in text
    )


def test_the_twin_has_one_name() -> None:
    assert SyncClient is osqueue.sync.SyncClient
    assert connect_sync is osqueue.sync.connect
    assert not hasattr(osqueue.client.remote, "SyncRemoteClient")


@pytest.fixture
def url() -> Iterator[str]:
    name = f"sync-{uuid.uuid4().hex}"
    yield f"memory://{name}"
    MemoryStorage.drop(name)


def test_each_blocking_call_runs_the_clients_method(url: str) -> None:
    with osqueue.sync.connect(url, embedded=True) as q:
        first = q.push(b"a", queue="q", priority=-2)  # ascending: claimed first
        results = q.push_results([NewJob(b"b", queue="q"), NewJob(b"c", queue="")])
        assert isinstance(results[0], str)
        assert isinstance(results[1], InvalidInput)
        assert q.push_many([NewJob(b"d", queue="q")])[0] != first
        [job] = q.claim("w", ["q"])
        assert (job.id, job.payload, job.priority) == (first, b"a", -2)
        q.heartbeat(job)
        errors, claimed = q.complete_and_claim([job], "w", ["q"], max_jobs=5)
        assert errors == [None]
        assert len(claimed) == 2
        q.release(claimed[0])
        q.fail(claimed[1], error="boom", retry_after_s=0)
        with pytest.raises(JobNotFound):  # errors come through as raised
            q.cancel("01ARZ3NDEKTSV4RRFFQ69G5FAV")
        stats = q.stats()
        assert (stats.pushed, stats.completed, stats.depth) == (3, 1, 2)
        assert q.retry_dead() == 0
        assert q.purge_dead() == 0
        info = q.schedule("beat", queue="q", every_s=60, payload=b"tick")
        assert [s.name for s in q.schedules()] == [info.name]
        assert q.unschedule("beat") is True
        assert q.set_queue("q", max_claimed=3).max_claimed == 3
    with pytest.raises(osqueue.ShuttingDown):
        q.stats()  # closed: the loop thread is gone


def test_the_blocking_dead_letter_calls_take_the_filters(url: str) -> None:
    with osqueue.sync.connect(url, embedded=True) as q:
        for queue in ("a", "a", "b"):
            q.push(b"x", queue=queue, max_attempts=1)
        for job in q.claim("w", ["a", "b"], max_jobs=3):
            q.fail(job, error=f"boom in {job.queue}")
        assert q.retry_dead(queue="a") == 2
        assert q.stats().depth == 2
        assert q.purge_dead(error="boom in b") == 1
        assert q.purge_dead() == 0
