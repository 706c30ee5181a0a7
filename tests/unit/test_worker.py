"""The worker runtime against an in-process broker on memory:// with manual clocks.

The broker and the worker each get their own ManualClock: advancing the
worker's clock fires its heartbeat timer, advancing the broker's clock ages
leases.  Tests wait on conditions (a recording client, events set by
handlers), never on sleeps.
"""

from __future__ import annotations

import asyncio
import threading
from collections.abc import AsyncIterator, Callable, Sequence
from dataclasses import dataclass
from typing import Any

import msgspec
import pytest

from osqueue.api import (
    EncodedResult,
    Job,
    JobResult,
    NewJob,
    QueueClient,
    Stats,
)
from osqueue.broker import Broker, BrokerConfig
from osqueue.client.worker import (
    JobContext,
    NoJobContext,
    Retry,
    Worker,
    WorkerConfig,
    batch,
    current_context,
    current_job_lost,
    error_line,
)
from osqueue.client.worker.settle import RIDE_MAX_RESULT_BYTES
from osqueue.clock import ManualClock
from osqueue.errors import BrokerUnavailable, InvalidInput, LeaseLost
from osqueue.ids import new_id
from osqueue.state import StoredJob
from osqueue.state.validate import MAX_CLAIM

HEARTBEAT_TIMEOUT_S = 30.0
BACKOFF_CAP_S = 60.0


# --------------------------------------------------------------------------- test doubles


class WatchedClock(ManualClock):
    """A ManualClock that lets a test wait until someone is sleeping on it."""

    def __init__(self) -> None:
        super().__init__()
        self._changed = asyncio.Event()

    async def sleep(self, seconds: float) -> None:
        self._changed.set()
        await super().sleep(seconds)

    async def wait_sleepers(self, count: int) -> None:
        while self.sleepers < count:
            self._changed.clear()
            await self._changed.wait()


@dataclass(frozen=True)
class Call:
    name: str
    args: tuple[Any, ...]
    kwargs: dict[str, Any]
    error: BaseException | None
    result: Any = None


class Recorder:
    """Wraps a QueueClient, records every finished call, and lets tests wait on them."""

    def __init__(self, inner: Any) -> None:
        self.inner = inner
        self.heartbeat_timeout_s = inner.broker.config.heartbeat_timeout_s
        self.calls: list[Call] = []
        #: names of the calls begun (finished or not), in order
        self.begun: list[str] = []
        self.fail_next: dict[str, BaseException] = {}
        self._cond = asyncio.Condition()

    async def _call(self, name: str, *args: Any, **kwargs: Any) -> Any:
        error: BaseException | None = self.fail_next.pop(name, None)
        result: Any = None
        async with self._cond:
            self.begun.append(name)
            self._cond.notify_all()
        try:
            if error is not None:
                raise error
            result = await getattr(self.inner, name)(*args, **kwargs)
        except Exception as exc:
            error = exc
            raise
        finally:
            async with self._cond:
                self.calls.append(Call(name, args, kwargs, error, result))
                self._cond.notify_all()
        return result

    async def wait_for(self, predicate: Callable[[], bool]) -> None:
        async with self._cond:
            await self._cond.wait_for(predicate)

    def named(self, name: str) -> list[Call]:
        return [c for c in self.calls if c.name == name]

    def count(self, name: str, *, ok: bool | None = None) -> int:
        return sum(1 for c in self.named(name) if ok is None or (c.error is None) == ok)

    def completions(self) -> list[str]:
        """Ids of the jobs this client was asked to complete, by either call, in order."""
        out: list[str] = []
        for c in self.calls:
            if c.name == "complete":
                out.append(c.args[0].id)
            elif c.name == "complete_and_claim":
                out.extend(job.id for job in c.args[0])
        return out

    def completed(self) -> int:
        """Completions the broker accepted, by either call."""
        n = 0
        for c in self.calls:
            if c.error is None and c.name == "complete":
                n += 1
            elif c.error is None and c.name == "complete_and_claim":
                n += sum(error is None for error in c.result[0])
        return n

    async def push(self, payload: bytes, **kwargs: Any) -> str:
        result: str = await self._call("push", payload, **kwargs)
        return result

    async def push_many(self, jobs: Sequence[NewJob]) -> list[str]:
        result: list[str] = await self._call("push_many", jobs)
        return result

    async def claim(self, worker: str, queues: Sequence[str] = ("default",), **kw: Any) -> Any:
        return await self._call("claim", worker, queues, **kw)

    async def heartbeat(self, job: Job) -> None:
        await self._call("heartbeat", job)

    async def complete(self, job: Job, **kwargs: Any) -> None:
        await self._call("complete", job, **kwargs)

    async def complete_and_claim(
        self, jobs: Sequence[Job], worker: str, queues: Sequence[str] = ("default",), **kw: Any
    ) -> tuple[list[Any], list[Job]]:
        result: tuple[list[Any], list[Job]] = await self._call(
            "complete_and_claim", jobs, worker, queues, **kw
        )
        return result

    async def fail(self, job: Job, **kwargs: Any) -> None:
        await self._call("fail", job, **kwargs)

    async def release(self, job: Job) -> None:
        await self._call("release", job)

    async def cancel(self, job_id: str) -> None:
        await self._call("cancel", job_id)

    async def result(self, job_id: str, **kwargs: Any) -> Any:
        return await self._call("result", job_id, **kwargs)

    async def stats(self) -> Stats:
        result: Stats = await self._call("stats")
        return result

    async def close(self) -> None:
        await self.inner.close()


@dataclass
class Env:
    broker: Broker
    client: Recorder
    clock: WatchedClock  # the worker's clock: heartbeat timer, grace period, backoff
    broker_clock: ManualClock  # the broker's clock: leases, heartbeat expiry, delays

    def worker(self, handlers: Any, **kwargs: Any) -> Worker:
        kwargs.setdefault("wait_s", 5.0)
        return Worker(self.client, handlers, clock=self.clock, **kwargs)

    async def push(self, count: int, queue: str = "default") -> list[str]:
        jobs = [NewJob(f"p{i}".encode(), queue=queue) for i in range(count)]
        return await self.broker.client().push_many(jobs)

    async def claim(self, worker: str) -> list[Job]:
        """Claim as another worker would, bypassing the recorder."""
        return await self.broker.client().claim(worker, ["default"], max_jobs=1, wait_s=0)

    async def steal(self) -> Job:
        """Let the held job's heartbeat expire and claim it as another worker."""
        self.age_leases(HEARTBEAT_TIMEOUT_S + 1)
        # The sweep runs after a commit's ops; the reclaimed job waits out a backoff.
        assert await self.claim("thief") == []
        self.age_leases(BACKOFF_CAP_S)
        (job,) = await self.claim("thief")
        return job

    def stored(self, job_id: str) -> StoredJob | None:
        return self.broker.document.jobs.get(job_id)

    def status(self, job_id: str) -> str:
        """The job's status; "done" also once it has been archived and pruned."""
        job = self.stored(job_id)
        return job.status if job is not None else "done"

    def last_error(self, job_id: str) -> str | None:
        job = self.stored(job_id)
        assert job is not None
        return job.last_error

    def attempts(self, job_id: str) -> int:
        job = self.stored(job_id)
        assert job is not None
        return job.attempts

    async def archived(self) -> set[str]:
        ids: set[str] = set()
        for key in await self.broker.storage.list("archive/"):
            for line in (await self.broker.storage.get(key)).splitlines():
                ids.add(msgspec.json.decode(line)["id"])
        return ids

    def age_leases(self, seconds: float) -> None:
        self.broker_clock.advance(seconds)

    async def hold_one(self) -> tuple[str, Worker, asyncio.Task[None], asyncio.Event]:
        """Push one job and start a worker whose handler holds it until ``finish`` is set.

        Returns ``(job_id, worker, task, finish)`` once the handler has started.
        """
        (job_id,) = await self.push(1)
        started = asyncio.Event()
        finish = asyncio.Event()

        async def handler(job: Job) -> None:
            started.set()
            await finish.wait()

        worker = self.worker(handler)
        task = start(worker)
        await started.wait()
        return job_id, worker, task, finish

    async def beat(self) -> None:
        """Fire one heartbeat round and wait until its heartbeats have been answered."""
        await self.clock.wait_sleepers(1)
        before = self.client.count("heartbeat")
        held = sum(1 for j in self.broker.document.jobs.values() if j.status == "claimed")
        self.clock.advance(HEARTBEAT_TIMEOUT_S / 3)
        await self.client.wait_for(lambda: self.client.count("heartbeat") >= before + held)


@pytest.fixture
async def env() -> AsyncIterator[Env]:
    broker_clock = ManualClock()
    config = BrokerConfig(
        heartbeat_timeout_s=HEARTBEAT_TIMEOUT_S,
        lease_s=1000.0,
        backoff_cap_s=BACKOFF_CAP_S,
        result_ttl_s=600.0,  # the handlers' results are read back
    )
    async with Broker(f"memory://test-worker-{new_id()}", config, clock=broker_clock) as broker:
        yield Env(broker, Recorder(broker.client()), WatchedClock(), broker_clock)


def start(worker: Worker) -> asyncio.Task[None]:
    return asyncio.create_task(worker.run(), name="test-worker")


# --------------------------------------------------------------------------- tests


def test_recorder_satisfies_the_client_protocol(env: Env) -> None:
    assert isinstance(env.client, QueueClient)
    assert isinstance(env.broker.client(), QueueClient)


async def test_concurrency_limit_is_respected(env: Env) -> None:
    ids = await env.push(10)
    gate = asyncio.Event()
    running: set[str] = set()
    peak = 0
    changed = asyncio.Condition()

    async def handler(job: Job) -> None:
        nonlocal peak
        async with changed:
            running.add(job.id)
            peak = max(peak, len(running))
            changed.notify_all()
        await gate.wait()
        running.discard(job.id)

    worker = env.worker(handler, concurrency=3, burst=True)
    task = start(worker)
    async with changed:
        await changed.wait_for(lambda: len(running) == 3)
    # The worker asked for no more than its free slots, and holds exactly three.
    assert all(c.kwargs["max_jobs"] <= 3 for c in env.client.named("claim"))
    assert sum(env.status(i) == "claimed" for i in ids) == 3
    gate.set()
    await task
    assert peak == 3
    assert worker.counters.processed == 10
    assert all(env.status(i) == "done" for i in ids)


async def test_a_slot_frees_when_its_handler_returns_not_when_the_completion_lands(
    env: Env,
) -> None:
    ids = await env.push(2)
    let_complete = asyncio.Event()

    class HeldCompletions(Recorder):
        async def complete(self, job: Job, *, result: object = None) -> None:
            await let_complete.wait()
            await super().complete(job, result=result)

    client = HeldCompletions(env.broker.client())
    ran: list[str] = []
    second_ran = asyncio.Event()

    async def handler(job: Job) -> bytes:
        ran.append(job.id)
        if len(ran) == 2:
            second_ran.set()
        return b"L" * (RIDE_MAX_RESULT_BYTES + 1)  # too large to ride: sent alone

    worker = Worker(client, handler, concurrency=1, burst=True, clock=env.clock)
    task = start(worker)
    # One slot, and the first job's completion (sent alone) is held back: the
    # second job is claimed and run anyway (the claim goes out beside the completion).
    await asyncio.wait_for(second_ran.wait(), timeout=30)
    assert ran == ids
    assert client.count("complete") == 0
    assert [env.status(i) for i in ids] == ["claimed", "claimed"]
    assert worker.running == 2  # both settling, neither holding a slot
    let_complete.set()
    await task
    assert [env.status(i) for i in ids] == ["done", "done"]
    assert worker.counters.processed == 2


async def test_each_completion_rides_with_the_next_claim_in_one_commit(env: Env) -> None:
    ids = await env.push(5)
    worker = env.worker(lambda job: None, concurrency=1, burst=True)
    before = env.broker.commits
    await worker.run()
    assert [env.status(i) for i in ids] == ["done"] * 5
    assert worker.counters.processed == 5
    assert env.client.count("complete") == 0
    assert env.client.count("complete_and_claim", ok=True) == 5
    # One commit per job (its claim and the last job's completion), plus the
    # first claim and the empty ones that end the burst.
    assert env.broker.commits - before <= 5 + 3


async def test_a_completion_does_not_wait_for_a_parked_long_poll(env: Env) -> None:
    (job_id,) = await env.push(1)
    finish = asyncio.Event()

    async def handler(job: Job) -> None:
        await finish.wait()

    worker = env.worker(handler, concurrency=2, wait_s=600.0)
    task = start(worker)
    # The first claim took the job; the second waits in a long poll (nothing queued).
    await env.client.wait_for(lambda: env.client.begun.count("claim") == 2)
    finish.set()
    await env.client.wait_for(lambda: env.client.completed() == 1)
    assert env.status(job_id) == "done"
    assert env.client.count("claim") == 1  # the long poll is still parked
    assert env.client.count("complete_and_claim") == 0
    worker.stop()
    await task


async def test_a_concurrency_above_the_claim_limit_claims_within_it(env: Env) -> None:
    ids = await env.push(3)
    worker = env.worker(lambda job: None, concurrency=MAX_CLAIM + 5, burst=True)
    await worker.run()
    assert [env.status(i) for i in ids] == ["done"] * 3
    assert all(c.kwargs["max_jobs"] <= MAX_CLAIM for c in env.client.named("claim"))


async def test_sync_handlers_run_in_threads_with_their_context(env: Env) -> None:
    (job_id,) = await env.push(1)
    seen: list[tuple[int, str, bool]] = []

    def handler(job: Job) -> None:
        ctx = current_context()
        seen.append((threading.get_ident(), ctx.job.id, current_job_lost()))

    worker = env.worker(handler, burst=True)
    await worker.run()
    assert seen == [(seen[0][0], job_id, False)]
    assert seen[0][0] != threading.get_ident()
    assert env.status(job_id) == "done"


async def test_handler_exception_fails_the_job_with_the_last_traceback_line(env: Env) -> None:
    (job_id,) = await env.push(1)

    def parse(data: bytes) -> int:
        return int(data)

    async def handler(job: Job) -> None:
        parse(b"not a number")

    worker = env.worker(handler, burst=True)
    await worker.run()
    expected = "ValueError: invalid literal for int() with base 10: b'not a number'"
    assert env.last_error(job_id) == expected
    assert env.attempts(job_id) == 1
    (call,) = env.client.named("fail")
    assert call.kwargs == {"error": expected}
    assert worker.counters.failed == 1
    assert worker.counters.processed == 0


async def test_retry_after_is_honoured(env: Env) -> None:
    (job_id,) = await env.push(1)

    async def handler(job: Job) -> None:
        raise Retry(after_s=120.0)

    worker = env.worker(handler, burst=True)
    await worker.run()
    (call,) = env.client.named("fail")
    assert call.kwargs["retry_after_s"] == 120.0
    assert worker.counters.retried == 1
    assert env.status(job_id) == "queued"
    # Not claimable before the delay, claimable after it.
    assert await env.claim("probe") == []
    env.age_leases(120.0)
    assert [j.id for j in await env.claim("probe")] == [job_id]


async def test_heartbeats_keep_a_long_job_alive_past_the_timeout(env: Env) -> None:
    job_id, worker, task, finish = await env.hold_one()
    for _ in range(12):  # four heartbeat timeouts
        await env.beat()
        env.age_leases(HEARTBEAT_TIMEOUT_S / 3)
    assert env.status(job_id) == "claimed"
    assert await env.claim("thief") == []
    finish.set()
    await env.client.wait_for(lambda: env.client.completed() == 1)
    worker.stop()
    await task
    assert env.status(job_id) == "done"
    assert worker.counters.lost == 0
    assert env.client.count("heartbeat", ok=True) >= 12


async def test_lease_lost_cancels_the_async_handler_and_never_completes(env: Env) -> None:
    (job_id,) = await env.push(1)
    started = asyncio.Event()
    cancelled = asyncio.Event()
    callbacks: list[str] = []

    async def handler(job: Job) -> None:
        current_context().on_cancel(lambda: callbacks.append("cancelled"))
        started.set()
        try:
            await asyncio.Event().wait()
        except asyncio.CancelledError:
            cancelled.set()
            raise

    worker = env.worker(handler)
    task = start(worker)
    await started.wait()
    stolen = await env.steal()
    await env.beat()
    await cancelled.wait()
    assert callbacks == ["cancelled"]
    assert env.client.count("heartbeat", ok=False) == 1
    worker.stop()
    await task
    assert worker.counters.lost == 1
    assert env.client.completions() == []
    assert env.client.named("fail") == []
    assert env.client.named("release") == []
    assert env.status(job_id) == "claimed"  # still the thief's
    await env.broker.client().complete(stolen)


async def test_lease_lost_marks_a_sync_handler_lost_and_drops_its_result(env: Env) -> None:
    (job_id,) = await env.push(1)
    loop = asyncio.get_running_loop()
    started = asyncio.Event()
    contexts: list[JobContext] = []
    saw_lost = threading.Event()
    callback_ran = asyncio.Event()

    def handler(job: Job) -> None:
        ctx = current_context()
        contexts.append(ctx)
        ctx.on_cancel(callback_ran.set)
        loop.call_soon_threadsafe(started.set)
        if ctx.wait_lost(timeout_s=60):
            saw_lost.set()

    worker = env.worker(handler, burst=True)
    task = start(worker)
    await started.wait()
    await env.steal()
    await env.beat()
    await callback_ran.wait()
    await task  # burst: the thread returns, nothing left to claim
    assert saw_lost.is_set()
    assert contexts[0].lost
    assert contexts[0].cancel_reason == "lease_lost"
    assert worker.counters.lost == 1
    assert env.client.completions() == []
    assert env.client.named("fail") == []
    assert env.status(job_id) == "claimed"


async def held_until_stolen(
    env: Env, client: Recorder, *, stop_first: bool = False
) -> tuple[Worker, asyncio.Task[None], Job]:
    """A worker (concurrency 1) on ``client`` whose handler returns only once its job
    was taken back and claimed by another worker, before any heartbeat of ours went
    out (a worker frozen past the heartbeat timeout, resumed just as it finishes).
    ``stop_first``: the worker is stopped before the handler returns, so its
    completion goes out alone (no claim to ride)."""
    started = asyncio.Event()
    finish = asyncio.Event()

    async def handler(job: Job) -> None:
        started.set()
        await finish.wait()

    worker = Worker(client, handler, clock=env.clock, concurrency=1, wait_s=5.0)
    task = start(worker)
    await started.wait()
    stolen = await env.steal()
    if stop_first:
        worker.stop()
    finish.set()
    return worker, task, stolen


async def test_a_completion_sent_alone_after_the_claim_was_taken_back_hears_lease_lost(
    env: Env,
) -> None:
    (job_id,) = await env.push(1)
    worker, task, stolen = await held_until_stolen(env, env.client, stop_first=True)
    await task
    (call,) = env.client.named("complete")
    assert isinstance(call.error, LeaseLost)
    assert env.client.count("complete_and_claim") == 0  # stopping: nothing to ride
    assert worker.counters.lost == 1
    assert env.client.completed() == 0
    assert env.status(job_id) == "claimed"  # still the thief's
    await env.broker.client().complete(stolen)


async def test_a_completion_relayed_on_a_claim_after_the_claim_was_taken_back_hears_lease_lost(
    env: Env,
) -> None:
    (job_id,) = await env.push(1)
    worker, task, stolen = await held_until_stolen(env, env.client)
    await env.client.wait_for(lambda: env.client.count("complete_and_claim") == 1)
    worker.stop()
    await task
    (call,) = env.client.named("complete_and_claim")
    errors, _ = call.result
    assert [type(e) for e in errors] == [LeaseLost]
    assert env.client.count("complete") == 0  # it rode the claim, not sent again alone
    assert worker.counters.lost == 1
    assert env.client.completed() == 0
    assert env.status(job_id) == "claimed"
    await env.broker.client().complete(stolen)


async def test_graceful_stop_finishes_quick_jobs_and_releases_the_rest(env: Env) -> None:
    quick, stuck = await env.push(2)
    started: dict[str, asyncio.Event] = {quick: asyncio.Event(), stuck: asyncio.Event()}
    finish_quick = asyncio.Event()
    stuck_cancelled = asyncio.Event()

    async def handler(job: Job) -> None:
        started[job.id].set()
        if job.id == quick:
            await finish_quick.wait()
            return
        try:
            await asyncio.Event().wait()
        except asyncio.CancelledError:
            stuck_cancelled.set()
            raise

    worker = env.worker(handler, concurrency=2, shutdown_grace_period_s=20.0)
    task = start(worker)
    await started[quick].wait()
    await started[stuck].wait()
    worker.stop()
    finish_quick.set()
    await env.client.wait_for(lambda: env.client.completed() == 1)
    assert not task.done()  # the stuck job still has its grace period
    await env.clock.wait_sleepers(2)  # heartbeat timer and grace period
    env.clock.advance(20.0)
    await task
    assert stuck_cancelled.is_set()
    assert env.status(quick) == "done"
    assert env.status(stuck) == "queued"
    assert env.attempts(stuck) == 0  # released, not failed
    assert worker.counters.released == 1
    assert [c.args[0].id for c in env.client.named("release")] == [stuck]


async def test_outside_cancellation_is_a_graceful_stop(env: Env) -> None:
    job_id, worker, task, finish = await env.hold_one()
    task.cancel()
    await env.clock.wait_sleepers(2)  # stopping: grace period started
    assert worker.stopping
    finish.set()
    with pytest.raises(asyncio.CancelledError):
        await task
    assert env.status(job_id) == "done"
    assert env.client.named("release") == []


async def test_second_cancellation_skips_the_grace_period(env: Env) -> None:
    (job_id,) = await env.push(1)
    started = asyncio.Event()

    async def handler(job: Job) -> None:
        started.set()
        await asyncio.Event().wait()

    worker = env.worker(handler)
    task = start(worker)
    await started.wait()
    task.cancel()
    await env.clock.wait_sleepers(2)
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task
    assert env.status(job_id) == "queued"
    assert worker.counters.released == 1


async def test_burst_exits_when_nothing_is_left(env: Env) -> None:
    ids = await env.push(5)
    handled: list[str] = []

    async def handler(job: Job) -> None:
        handled.append(job.id)

    worker = env.worker(handler, concurrency=2, burst=True)
    await worker.run()
    assert sorted(handled) == sorted(ids)
    claims = env.client.named("claim")
    assert claims[-1].kwargs["wait_s"] == 0.0  # burst never long-polls
    assert worker.counters.processed == 5


async def test_burst_with_an_empty_queue_exits_at_once(env: Env) -> None:
    worker = env.worker(lambda job: None, burst=True)
    await worker.run()
    assert env.client.count("claim") == 1


async def test_batch_handler_gets_batches_and_reports_individual_failures(env: Env) -> None:
    ids = await env.push(5, queue="index")
    batches: list[list[str]] = []

    @batch
    async def handle(jobs: list[Job]) -> dict[str, BaseException]:
        batches.append([j.id for j in jobs])
        return {jobs[0].id: ValueError("bad segment")}

    worker = env.worker({"index": handle}, concurrency=4, batch_size=2, burst=True)
    await worker.run()
    assert all(1 <= len(b) <= 2 for b in batches)
    assert sorted(i for b in batches for i in b) == sorted(ids)
    failed = {b[0] for b in batches}
    for job_id in ids:
        expected = "queued" if job_id in failed else "done"
        assert env.status(job_id) == expected
    assert {env.last_error(i) for i in failed} == {"ValueError: bad segment"}
    assert worker.counters.failed == len(batches)


async def test_sync_batch_handler_that_raises_fails_every_job(env: Env) -> None:
    ids = await env.push(3)

    @batch
    def handle(jobs: list[Job]) -> None:
        raise RuntimeError("downstream is down")

    worker = env.worker(handle, concurrency=3, batch_size=3, burst=True)
    await worker.run()
    assert [env.last_error(i) for i in ids] == ["RuntimeError: downstream is down"] * 3


async def test_transient_claim_errors_back_off_and_recover(env: Env) -> None:
    (job_id,) = await env.push(1)
    env.client.fail_next["claim"] = BrokerUnavailable()
    done = asyncio.Event()

    async def handler(job: Job) -> None:
        done.set()

    worker = env.worker(handler, burst=True)
    task = start(worker)
    await env.clock.wait_sleepers(2)  # heartbeat timer and the claim backoff
    env.clock.advance(1.0)
    await task
    assert done.is_set()
    assert env.status(job_id) == "done"


async def test_a_stop_during_complete_and_claim_completes_and_gives_back_what_it_claimed(
    env: Env,
) -> None:
    first, second = await env.push(2)
    let_through = asyncio.Event()
    sent = asyncio.Event()

    class Held(Recorder):
        async def complete_and_claim(
            self, jobs: Sequence[Job], worker: str, queues: Sequence[str] = ("default",), **kw: Any
        ) -> tuple[list[Any], list[Job]]:
            sent.set()
            await let_through.wait()
            return await super().complete_and_claim(jobs, worker, queues, **kw)

    client = Held(env.broker.client())
    worker = Worker(client, lambda job: None, concurrency=1, clock=env.clock)
    task = start(worker)
    await sent.wait()  # the first job's completion is on its way with the next claim
    worker.stop()
    let_through.set()
    await task
    assert env.status(first) == "done"
    assert env.status(second) == "queued"  # claimed during the stop, given back
    assert env.attempts(second) == 0
    assert (worker.counters.processed, worker.counters.released) == (1, 1)


async def test_a_failed_complete_and_claim_backs_off_and_the_job_comes_back(env: Env) -> None:
    first, second = await env.push(2)
    env.client.fail_next["complete_and_claim"] = BrokerUnavailable()
    ran: list[str] = []

    async def handler(job: Job) -> None:
        ran.append(job.id)

    worker = env.worker(handler, burst=True)
    task = start(worker)
    await env.clock.wait_sleepers(2)  # heartbeat timer and the claim backoff
    # The completion rode with the failed call: it is reported, not lost in the worker.
    assert env.status(first) == "claimed"
    env.clock.advance(1.0)
    await task
    assert ran == [first, second]
    assert env.status(second) == "done"
    assert env.status(first) == "claimed"  # back to the queue after the heartbeat timeout
    assert worker.counters.processed == 1


async def test_a_dying_side_task_stops_the_worker_and_raises(env: Env) -> None:
    (job_id,) = await env.push(1)
    started = asyncio.Event()

    async def handler(job: Job) -> None:
        started.set()
        await asyncio.Event().wait()

    worker = env.worker(handler)
    task = start(worker)
    await started.wait()
    env.client.fail_next["heartbeat"] = RuntimeError("client bug")
    await env.clock.wait_sleepers(1)
    env.clock.advance(HEARTBEAT_TIMEOUT_S / 3)
    with pytest.raises(RuntimeError, match="client bug"):
        await task
    assert env.status(job_id) == "queued"  # released on the way out
    assert worker.counters.released == 1


async def test_handlers_by_queue(env: Env) -> None:
    (a,) = await env.push(1, queue="a")
    (b,) = await env.push(1, queue="b")
    seen: dict[str, str] = {}

    worker = env.worker(
        {
            "a": lambda job: seen.__setitem__("a", job.id),
            "b": lambda job: seen.__setitem__("b", job.id),
        },
        concurrency=2,
        burst=True,
    )
    assert worker.queues == ("a", "b")
    await worker.run()
    assert seen == {"a": a, "b": b}


def test_default_heartbeat_interval_is_a_third_of_the_broker_timeout(env: Env) -> None:
    worker = env.worker(lambda job: None)
    assert worker.heartbeat_interval_s == pytest.approx(HEARTBEAT_TIMEOUT_S / 3)
    assert env.worker(lambda job: None, heartbeat_interval_s=2.5).heartbeat_interval_s == 2.5


@pytest.mark.parametrize(
    ("kwargs", "field"),
    [
        ({"concurrency": 0}, "concurrency"),
        ({"batch_size": 0}, "batch_size"),
        ({"batch_size": 3, "concurrency": 2}, "batch_size"),
        ({"wait_s": -1.0}, "wait_s"),
        ({"heartbeat_interval_s": 0.0}, "heartbeat_interval_s"),
        ({"shutdown_grace_period_s": float("nan")}, "shutdown_grace_period_s"),
        ({"queues": []}, "queues"),
        ({"queues": "default"}, "queues"),
    ],
)
def test_bad_config_names_the_field(kwargs: dict[str, Any], field: str) -> None:
    with pytest.raises(InvalidInput) as info:
        WorkerConfig(**kwargs)
    assert info.value.field == field
    assert field in str(info.value)


def test_missing_handler_for_a_queue_is_refused(env: Env) -> None:
    with pytest.raises(InvalidInput, match="no handler for queue"):
        env.worker({"a": lambda job: None}, queues=["a", "b"])
    with pytest.raises(InvalidInput, match="handlers"):
        env.worker(42)


def test_retry_rejects_negative_delay() -> None:
    with pytest.raises(InvalidInput, match="after_s"):
        Retry(after_s=-1)


def test_current_context_outside_a_handler() -> None:
    with pytest.raises(NoJobContext):
        current_context()


def test_error_line_is_the_last_traceback_line() -> None:
    class Custom(Exception):
        pass

    exc = Custom("first\nsecond")
    exc.add_note("a note")
    assert error_line(exc).endswith("<locals>.Custom: first | second")
    assert error_line(KeyError("k")) == "KeyError: 'k'"
    assert error_line(RuntimeError()) == "RuntimeError"
    assert len(error_line(ValueError("x" * 5000))) == 1000


async def test_hard_stop_releases_a_stuck_sync_handler_and_reports_its_thread(env: Env) -> None:
    (job_id,) = await env.push(1)
    loop = asyncio.get_running_loop()
    started = asyncio.Event()
    unblock = threading.Event()
    returned = threading.Event()

    def handler(job: Job) -> None:
        loop.call_soon_threadsafe(started.set)
        unblock.wait(timeout=60)
        returned.set()

    worker = env.worker(handler)
    task = start(worker)
    await started.wait()
    worker.stop(hard=True)
    await task
    assert env.status(job_id) == "queued"
    assert worker.counters.released == 1
    assert worker.busy_threads == 1  # a thread cannot be killed; the CLI exits around it
    unblock.set()
    await asyncio.to_thread(returned.wait, 60)
    assert env.client.completions() == []


async def test_default_heartbeat_interval_follows_the_in_process_broker() -> None:
    config = BrokerConfig(heartbeat_timeout_s=12.0)
    async with Broker(f"memory://test-worker-{new_id()}", config, clock=ManualClock()) as broker:
        worker = Worker(broker.client(), lambda job: None)
        assert worker.heartbeat_interval_s == pytest.approx(4.0)


async def test_a_transient_heartbeat_error_is_not_a_lost_lease(env: Env) -> None:
    job_id, worker, task, finish = await env.hold_one()
    env.client.fail_next["heartbeat"] = BrokerUnavailable("failing over")
    await env.beat()
    await env.beat()
    assert [c.error is None for c in env.client.named("heartbeat")] == [False, True]
    finish.set()
    await env.client.wait_for(lambda: env.client.completed() == 1)
    worker.stop()
    await task
    assert worker.counters.lost == 0
    assert env.status(job_id) == "done"


# --------------------------------------------------------------------------- results


async def test_a_handlers_return_value_is_its_jobs_result(env: Env) -> None:
    ids = await env.push(4)
    values: dict[str, object] = dict(zip(ids, [b"raw", "text", {"n": 1}, None], strict=True))

    async def handler(job: Job) -> object:
        return values[job.id]

    worker = env.worker(handler, concurrency=2, burst=True)
    await worker.run()
    q = env.broker.client()
    assert {i: (await q.result(i)).value for i in ids} == values
    rides = env.client.named("complete_and_claim")
    assert any(c.kwargs.get("results") for c in rides)  # results ride with claims too
    assert worker.counters.processed == 4


async def test_a_value_that_cannot_be_a_result_is_dropped_and_the_job_completes(
    env: Env, caplog: pytest.LogCaptureFixture
) -> None:
    (job_id,) = await env.push(1)
    worker = env.worker(lambda job: object(), burst=True)
    with caplog.at_level("WARNING"):
        await worker.run()
    answer = await env.broker.client().result(job_id)
    assert (answer.status, answer.value) == ("done", None)
    assert any(getattr(r, "action", None) == "result_dropped" for r in caplog.records)


async def test_a_result_the_broker_refuses_for_its_size_is_dropped_alone(
    caplog: pytest.LogCaptureFixture,
) -> None:
    config = BrokerConfig(max_result_bytes=100, result_inline_max_bytes=10, result_ttl_s=600.0)
    async with Broker(f"memory://test-worker-{new_id()}", config) as broker:
        ids = await broker.client().push_many([NewJob(b"big"), NewJob(b"small")])
        client = Recorder(broker.client())

        def handler(job: Job) -> object:
            return "x" * 500 if job.payload == b"big" else "fine"

        with caplog.at_level("WARNING"):
            await Worker(client, handler, concurrency=2, burst=True).run()
        q = broker.client()
        assert (await q.result(ids[0])).value is None
        assert (await q.result(ids[1])).value == "fine"
        assert any(getattr(r, "action", None) == "result_dropped" for r in caplog.records)


async def test_a_large_result_goes_out_on_its_own(env: Env) -> None:
    (job_id,) = await env.push(1)
    worker = env.worker(lambda job: b"L" * (RIDE_MAX_RESULT_BYTES + 1), burst=True)
    await worker.run()
    (alone,) = env.client.named("complete")
    assert alone.kwargs["result"] == EncodedResult("bytes", b"L" * (RIDE_MAX_RESULT_BYTES + 1))
    assert (await env.broker.client().result(job_id)).value == b"L" * (RIDE_MAX_RESULT_BYTES + 1)


async def test_batch_jobs_complete_without_results(env: Env) -> None:
    ids = await env.push(2)

    @batch
    def handle(jobs: list[Job]) -> None:
        return None

    await env.worker(handle, concurrency=2, batch_size=2, burst=True).run()
    for job_id in ids:
        assert await env.broker.client().result(job_id) == JobResult(
            "done", None, None, 1, (await env.broker.client().result(job_id)).finished_at
        )
