"""Clients find the broker through the document and follow it when it moves.

Also: a push (or completion) whose answer was lost is retried and applied once.
"""

from __future__ import annotations

import asyncio
from collections.abc import Sequence
from typing import Any

import pytest
from remote_helpers import Parkings, fast_config, quiet_broker_config, read_document

from osqueue.api import Job
from osqueue.broker import BrokerConfig
from osqueue.broker.inproc.calls import BrokerCalls
from osqueue.client.remote import RemoteClient, connect
from osqueue.errors import NotBroker, OsqueueError, StorageError
from osqueue.server.runner import BrokerServer, run_broker
from osqueue.server.server import ServerConfig
from osqueue.state import Push
from osqueue.storage import from_url


async def test_client_follows_a_changed_address_in_the_document(queue_url: str) -> None:
    first = BrokerServer(queue_url, ServerConfig(listen="127.0.0.1:0"), quiet_broker_config())
    await first.start()
    client = await connect(queue_url, config=fast_config())
    assert isinstance(client, RemoteClient)
    try:
        await client.push(b"before", id="before")
        assert client.address == first.address
        await first.stop()  # drains: the document's address is cleared
        doc = await read_document(queue_url)
        assert doc.broker is not None
        assert doc.broker.address is None
        async with BrokerServer(
            queue_url, ServerConfig(listen="127.0.0.1:0"), quiet_broker_config()
        ) as second:
            assert second.address != first.address
            await client.push(b"after", id="after")
            assert client.address == second.address
            assert client.connects == 2
            jobs = await client.claim("w", max_jobs=10)
            assert sorted(job.id for job in jobs) == ["after", "before"]
    finally:
        await client.close()


async def test_a_broker_that_was_taken_over_points_clients_to_the_new_one(
    queue_url: str,
) -> None:
    stop = asyncio.Event()
    serving = asyncio.Event()
    old = asyncio.create_task(
        run_broker(
            queue_url,
            ServerConfig(listen="127.0.0.1:0"),
            quiet_broker_config(),
            stop=stop,
            on_serving=serving,
            handle_signals=False,
        )
    )
    await serving.wait()
    client = await connect(queue_url, config=fast_config())
    assert isinstance(client, RemoteClient)
    try:
        await client.push(b"1", id="one")
        old_address = client.address
        async with BrokerServer(
            queue_url, ServerConfig(listen="127.0.0.1:0"), quiet_broker_config()
        ) as new:
            # The old broker learns it lost the queue on its next write, answers
            # NotBroker with the new address, and the client follows it.
            await client.push(b"2", id="two")
            assert client.address == new.address != old_address
            with pytest.raises(NotBroker) as caught:
                await asyncio.wait_for(old, 20)
            assert caught.value.address == new.address
            doc = await read_document(queue_url)
            assert sorted(doc.jobs) == ["one", "two"]
    finally:
        stop.set()
        await client.close()


async def test_standby_takes_over_when_the_active_broker_stops(queue_url: str) -> None:
    config = BrokerConfig(lease_s=1.0, heartbeat_timeout_s=60.0, clock_skew_margin_s=0.1)
    stop_active, stop_standby = asyncio.Event(), asyncio.Event()
    active_serving, standby_serving = asyncio.Event(), asyncio.Event()
    common: dict[str, Any] = {
        "server": ServerConfig(listen="127.0.0.1:0"),
        "broker": config,
        "handle_signals": False,
    }
    active = asyncio.create_task(
        run_broker(queue_url, stop=stop_active, on_serving=active_serving, **common)
    )
    await active_serving.wait()
    standby = asyncio.create_task(
        run_broker(queue_url, standby=True, stop=stop_standby, on_serving=standby_serving, **common)
    )
    client = await connect(queue_url, config=fast_config())
    try:
        await client.push(b"1", id="one")
        assert not standby_serving.is_set()
        stop_active.set()
        await active  # a graceful stop returns normally
        await asyncio.wait_for(standby_serving.wait(), 20)
        await client.push(b"2", id="two")
        jobs = await client.claim("w", max_jobs=10)
        assert sorted(job.id for job in jobs) == ["one", "two"]
        doc = await read_document(queue_url)
        assert doc.broker is not None
        assert doc.broker.epoch == 2
    finally:
        stop_active.set()
        stop_standby.set()
        await client.close()
        await standby


class LosesFirstAnswer:
    """Wraps the broker's calls: the first push/complete commits, then never answers."""

    def __init__(self, inner: Any) -> None:
        self.inner = inner
        self.lost: list[str] = []
        self.never = asyncio.Event()

    def __getattr__(self, name: str) -> Any:
        return getattr(self.inner, name)

    async def push_many(self, ops: Sequence[Push]) -> list[str | OsqueueError]:
        results = await self.inner.push_many(ops)
        if "push" not in self.lost:
            self.lost.append("push")
            await self.never.wait()  # the client's deadline passes; the answer is lost
        return list(results)

    async def complete(self, jobs: Sequence[Job], results: object = None) -> list[object]:
        answers = await self.inner.complete(jobs, results)
        if "complete" not in self.lost:
            self.lost.append("complete")
            await self.never.wait()
        return list(answers)


async def test_a_retried_push_after_a_lost_answer_exists_once(queue_url: str) -> None:
    async with BrokerServer(
        queue_url, ServerConfig(listen="127.0.0.1:0"), quiet_broker_config()
    ) as server:
        assert server.server is not None
        assert server.broker is not None
        losing = LosesFirstAnswer(BrokerCalls(server.broker))
        server.server.service.attach(losing)  # type: ignore[arg-type]
        # A lost answer is noticed by its attempt's timeout: a short one for the
        # client whose push and completion lose theirs (retrying them is safe).  The
        # claim goes through a client with the usual timeout: a claim whose answer
        # came later than that (a loaded machine) would leave its job to the lost
        # attempt, and the retry would find none.
        async with (
            connect(queue_url, config=fast_config(rpc_timeout_s=0.5)) as client,
            connect(queue_url, config=fast_config()) as worker,
        ):
            job_id = await client.push(b"once")
            assert losing.lost == ["push"]
            doc = await read_document(queue_url)
            assert list(doc.jobs) == [job_id]
            assert doc.stats.pushed == 1
            [job] = await worker.claim("w")
            await client.complete(job)  # its answer is lost too; the retry is accepted
            assert losing.lost == ["push", "complete"]
            doc = await read_document(queue_url)
            assert doc.stats.completed == 1


BROKER_PROCESS = """
import asyncio, sys
from osqueue.broker import BrokerConfig
from osqueue.server.runner import run_broker
from osqueue.server.server import ServerConfig

async def main() -> None:
    serving = asyncio.Event()
    config = BrokerConfig(lease_s=2.0, heartbeat_timeout_s=60.0, clock_skew_margin_s=0.2)
    task = asyncio.create_task(run_broker(
        sys.argv[1], ServerConfig(listen="127.0.0.1:0"), config,
        standby=sys.argv[2] == "standby", on_serving=serving))
    await serving.wait()
    print("serving", flush=True)
    await task

asyncio.run(main())
"""


async def _broker_process(url: str, role: str) -> asyncio.subprocess.Process:
    import sys

    return await asyncio.create_subprocess_exec(
        sys.executable, "-c", BROKER_PROCESS, url, role, stdout=asyncio.subprocess.PIPE
    )


@pytest.mark.slow
async def test_a_paused_broker_is_left_for_the_standby(tmp_path: Any) -> None:
    """SIGSTOP the active broker: keepalive pings fail the open calls, the
    standby takes over when the lease runs out, and the calls land there."""
    import signal

    url = (tmp_path / "queue").as_uri()
    (tmp_path / "queue").mkdir()
    active = await _broker_process(url, "active")
    standby: asyncio.subprocess.Process | None = None
    try:
        assert active.stdout is not None
        assert (await active.stdout.readline()).strip() == b"serving"
        standby = await _broker_process(url, "standby")
        # Attempts may wait a minute: only the pings can notice the pause in time.
        config = fast_config(timeout_s=60.0, rpc_timeout_s=60.0, keepalive_s=1.0)
        async with connect(url, config=config) as client, connect(url, config=config) as worker:
            await client.push(b"before", id="before")
            [first] = await worker.claim("w")
            long_poll = asyncio.ensure_future(worker.claim("w", ["later"], wait_s=60))
            active.send_signal(signal.SIGSTOP)
            await asyncio.wait_for(client.push(b"after", id="after", queue="later"), 20)
            [job] = await asyncio.wait_for(long_poll, 20)
            assert job.id == "after"
            await worker.complete(first)  # the takeover kept the claim alive
            doc = await read_document(url)
            assert doc.broker is not None
            assert doc.broker.epoch == 2
            assert doc.stats.completed == 1
    finally:
        active.kill()
        await active.wait()
        if standby is not None:
            standby.terminate()
            await standby.wait()


class _FlakyReads:
    """A storage view whose first ``failures`` reads fail like a dropped connection."""

    def __init__(self, inner: Any, failures: int) -> None:
        self.inner = inner
        self.failures = failures

    def __getattr__(self, name: str) -> Any:
        return getattr(self.inner, name)

    async def read(self, key: str) -> Any:
        if self.failures > 0:
            self.failures -= 1
            raise StorageError("injected: response body cut off")
        return await self.inner.read(key)


async def test_a_storage_error_while_discovering_is_retried_not_fatal(queue_url: str) -> None:
    async with BrokerServer(
        queue_url, ServerConfig(listen="127.0.0.1:0"), quiet_broker_config()
    ) as server:
        flaky = _FlakyReads(from_url(queue_url), failures=2)
        client = RemoteClient(flaky, fast_config())  # type: ignore[arg-type]
        try:
            await client.connect_now()  # the first read fails: not fatal
            assert client.address is None
            job_id = await client.push(b"x")  # the call rediscovers, with backoff
            assert client.address == server.address
            assert job_id in (await read_document(queue_url)).jobs
        finally:
            await client.close()


async def test_a_call_cut_off_by_the_close_of_its_dropped_channel_is_retried(
    memory_url: str,
) -> None:
    """A call still open on a channel the client dropped (another call on it
    failed over) is cancelled by gRPC when the close's grace (``rpc_timeout_s``)
    runs out, as a long poll waiting longer is.  That is a lost answer, retried
    on a new channel, not a ``CancelledError`` in a task nobody cancelled (a
    Worker's claim loop would take a claim ended so for its own stop); the
    caller's own cancellation still propagates."""
    async with (
        BrokerServer(
            memory_url, ServerConfig(listen="127.0.0.1:0"), quiet_broker_config()
        ) as server,
        connect(memory_url, config=fast_config()) as helper,
    ):
        # ``client`` (its grace of 0.5 s) makes the long polls only: a claim or a
        # push of its own that answered later than that (a loaded machine) would
        # fail over (one more connection) and a claim would lose its job.
        client = await connect(memory_url, config=fast_config(rpc_timeout_s=0.5))
        assert isinstance(client, RemoteClient)
        try:
            job_id = await helper.push(b"p", result_ttl_s=600.0)
            (job,) = await helper.claim("w")
            parkings = Parkings(server)
            waiting = asyncio.ensure_future(client.result(job_id, wait_s=30.0))
            await parkings.wait(1)
            conn = client.connection.current
            assert conn is not None
            client.connection.drop(conn)  # what a failed call on it does
            parked_again = asyncio.ensure_future(parkings.wait(2))
            await asyncio.wait({waiting, parked_again}, return_when=asyncio.FIRST_COMPLETED)
            assert not waiting.done(), "the cut-off long poll ended instead of being retried"
            assert client.connects == 2
            await helper.complete(job, result="after the cut")
            assert (await asyncio.wait_for(waiting, 10.0)).value == "after the cut"

            other = await helper.push(b"q", result_ttl_s=600.0)
            mine = asyncio.ensure_future(client.result(other, wait_s=30.0))
            await parkings.wait(3)
            mine.cancel()
            with pytest.raises(asyncio.CancelledError):
                await mine
        finally:
            await client.close()
