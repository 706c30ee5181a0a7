"""The simulated processes: broker nodes, producers, workers, and the network between them.

Each is a set of asyncio tasks with its own :class:`~sim.node.Gate`
(pause) and :class:`~sim.node.NodeClock`.  A broker node runs the real
:class:`~osqueue.broker.Broker` over a :class:`~sim.store.NodeStorage`
and restarts it (as a standby) after a crash or a step-down, the way a process
supervisor would.  Clients find the broker the way real clients do: by reading
the document's ``broker`` field, and calling whoever it names.
"""

from __future__ import annotations

import asyncio
import dataclasses
import logging
from collections.abc import Awaitable, Callable
from functools import partial
from typing import TYPE_CHECKING, Any, TypeVar

import msgspec

from osqueue.api import EncodedResult, Job, NewJob
from osqueue.broker import Broker, BrokerConfig, State
from osqueue.broker.inproc.client import LocalClient
from osqueue.errors import (
    BrokerUnavailable,
    DuplicateKey,
    JobNotFound,
    LeaseLost,
    NotFound,
    OsqueueError,
    Retryable,
)
from osqueue.state import BrokerInfo
from sim.history import Kind, Rule, Violation
from sim.node import Gate, NodeClock
from sim.results import sim_result
from sim.store import DOCUMENT_KEY, PAUSED, Call, NodeStorage
from sim.waiting_rules import with_knobs

if TYPE_CHECKING:
    from sim.run import Sim

log = logging.getLogger(__name__)
T = TypeVar("T")


class _Head(msgspec.Struct):
    broker: BrokerInfo | None = None


_head = msgspec.json.Decoder(_Head)


# --------------------------------------------------------------------------- broker nodes


class BrokerNode:
    """A broker process under a supervisor: crashes, pauses, restarts as a standby."""

    def __init__(self, sim: Sim, name: str, *, active: bool) -> None:
        self.sim = sim
        self.name = name
        self.gate = Gate()
        skew = sim.rng.uniform(-sim.cfg.skew_max_s, sim.cfg.skew_max_s)
        # each broker booted at its own time: an hour apart (no draw: seeds stay as they were)
        boot_s = 3600.0 * len(sim.brokers)
        self.clock = NodeClock(self.gate, skew_s=skew, boot_s=boot_s)
        self.active_first = active
        self.incarnation = 0
        self.broker: Broker | None = None
        self.storage: NodeStorage | None = None
        self.alive = False
        self.death: asyncio.Future[None] | None = None
        self.failure: OsqueueError | None = None
        self._life: asyncio.Task[None] | None = None
        self._crashed = False

    @property
    def broker_id(self) -> str:
        return f"{self.name}.{self.incarnation}"

    def config(self) -> BrokerConfig:
        c = self.sim.cfg
        config = BrokerConfig(
            lease_s=c.lease_s,
            heartbeat_timeout_s=c.heartbeat_timeout_s,
            address=self.broker_id,
            drain_timeout_s=c.lease_s,
            inline_payload_max_bytes=self.sim.inline_max,
            max_document_bytes=c.max_document_bytes,
            dedupe_window_s=c.dedupe_window_s,
            max_batch_ops=c.max_batch_ops,
            max_pending_ops=c.max_pending_ops,
            backoff_base_s=0.5,
            backoff_cap_s=8.0,
            clock_skew_margin_s=c.clock_skew_margin_s,
            retry_base_s=0.05,
            retry_cap_s=2.0,
            broker_id=self.broker_id,
            payload_sweep_interval_s=c.payload_sweep_s,
            schedule_grace_s=c.schedule_grace_s,
            # every finish kept an hour unless a push says (with no TTL set only
            # results would be): the result-kept rule judges every completion
            result_ttl_s=3600.0,
        )
        if c.dead_keep_jobs is not None:  # the dead-segments family
            config = dataclasses.replace(
                config, dead_keep_jobs=c.dead_keep_jobs, dead_spill_jobs=c.dead_spill_jobs
            )
        config = with_knobs(config, c)  # waiting children in objects, the sealed record
        if c.delay_spill_above_jobs is not None:  # cold delayed jobs (the delayed-spill family)
            config = dataclasses.replace(
                config,
                delay_spill_above_jobs=c.delay_spill_above_jobs,
                delay_horizon_s=c.delay_horizon_s,
                delay_lead_s=c.delay_lead_s,
                delay_window_s=c.delay_window_s,
                delay_load_jobs=c.delay_load_jobs,
                segment_jobs=c.segment_jobs,
            )
        if c.spill_above_jobs is None:
            return config
        return dataclasses.replace(
            config,
            spill_above_jobs=c.spill_above_jobs,
            segment_jobs=c.segment_jobs,
            head_jobs=c.head_jobs,
            load_jobs=c.load_jobs,
            spill_hold_bytes=c.spill_hold_bytes,
            compact_jobs=c.compact_jobs,
        )

    async def supervise(self) -> None:
        standby = not self.active_first
        while True:
            self.incarnation += 1
            self._crashed = False
            storage = NodeStorage(
                self.sim.store,
                self.broker_id,
                self.sim.rng,
                rates=self.sim.rates,
                gate=self.gate,
                on_crash=partial(self.crash, fault=False),  # counted as crash_<kind>_<phase>
            )
            broker = Broker(storage, self.config(), clock=self.clock, standby=standby)
            self.storage, self.broker = storage, broker
            self.sim.incarnations.append(broker)
            self.death = asyncio.get_running_loop().create_future()
            self.alive = True
            self.sim.nodes_by_id[self.broker_id] = self
            life = asyncio.ensure_future(self._live(broker))
            self._life = life
            await asyncio.wait({life})
            self._bury()
            if not life.cancelled() and life.exception() is not None:
                exc = life.exception()
                self.sim.unexpected(f"broker {self.broker_id} raised {exc!r}", exc)
            if broker.failure is not None and not self._crashed:
                self.failure = broker.failure
                self.sim.broker_failed(self, broker.failure)
                return  # needs an operator: never restart over a document it refused
            standby = True
            await self.clock.sleep(self.sim.rng.uniform(0.2, 3.0) if self._crashed else 0.5)

    async def _live(self, broker: Broker) -> None:
        await broker.start()
        await broker.wait_closed()

    def _bury(self) -> None:
        self.alive = False
        if self.death is not None and not self.death.done():
            self.death.set_result(None)

    def crash(self, *, fault: bool = True) -> None:
        """SIGKILL: every task of this incarnation stops where it is."""
        if not self.alive:
            return
        self._crashed = True
        if fault:
            self.sim.faults["broker_crash"] += 1
        if self.storage is not None:
            self.storage.dead = True
        broker = self.broker
        tasks: list[asyncio.Task[None] | None] = [self._life]
        if broker is not None:
            tasks.extend(broker.tasks())
        self._bury()
        for task in tasks:
            if task is not None and not task.done():
                task.cancel()

    async def stop(self) -> None:
        """SIGTERM: the graceful stop (flush, release the lease)."""
        if self.alive and self.broker is not None and self.broker.state is State.SERVING:
            self.sim.faults["broker_stop"] += 1
            await self.broker.stop()

    async def pause(self, seconds: float) -> None:
        self.sim.faults["broker_pause"] += 1
        self.gate.pause()
        paused, node = self.sim.now(), self.broker_id
        try:
            await asyncio.sleep(seconds)
        finally:
            self.gate.resume()
            self.sim.store.calls.append(Call(node, PAUSED, paused, self.sim.now(), False))


# --------------------------------------------------------------------------- the network


class Client:
    """What producers and workers share: a gate, a clock, and a way to reach the broker."""

    def __init__(self, sim: Sim, name: str) -> None:
        self.sim = sim
        self.name = name
        self.gate = Gate()
        self.clock = NodeClock(self.gate)
        self._target: tuple[BrokerNode, int] | None = None

    async def _discover(self) -> tuple[BrokerNode, int]:
        if self._target is not None:
            node, inc = self._target
            if node.alive and node.incarnation == inc:
                return self._target
        self._target = None
        await self.clock.sleep(self.sim.rng.uniform(0.0, 0.005))
        try:
            blob = await self.sim.store.read(DOCUMENT_KEY)
        except NotFound:
            raise BrokerUnavailable("no queue document yet") from None
        owner = _head.decode(blob.data).broker
        if owner is None or owner.address is None:
            raise BrokerUnavailable("the document names no broker")
        found = self.sim.nodes_by_id.get(owner.id)
        if found is None or not found.alive or found.broker_id != owner.id:
            raise BrokerUnavailable(f"broker {owner.id} does not answer")
        self._target = (found, found.incarnation)
        return self._target

    async def call(
        self, fn: Callable[[LocalClient], Awaitable[T]], *, timeout_s: float = 8.0
    ) -> tuple[T, int]:
        """Call the broker; returns the value and the answer's place in the history."""
        try:
            node, inc = await self._discover()
            sim = self.sim
            await self.clock.sleep(sim.rng.uniform(0.0, sim.cfg.net_max_s))
            if not node.alive or node.incarnation != inc or node.broker is None:
                raise BrokerUnavailable("connection refused")
            client = node.broker.client()
            inner = asyncio.ensure_future(fn(client))
            seq = [0]
            inner.add_done_callback(lambda _: seq.__setitem__(0, sim.history.stamp()))
            inner.add_done_callback(_retrieve)  # the caller may be gone (crashed) by then
            sim.requests.add(inner)  # a request in flight outlives a crashed caller
            inner.add_done_callback(sim.requests.discard)
            assert node.death is not None
            timer = asyncio.ensure_future(asyncio.sleep(timeout_s))
            racers: set[asyncio.Future[Any]] = {inner, node.death, timer}
            try:
                await asyncio.wait(racers, return_when=asyncio.FIRST_COMPLETED)
            finally:
                timer.cancel()
            if not inner.done():
                inner.cancel()
                raise BrokerUnavailable("no answer (connection reset or deadline); may be applied")
            value = inner.result()  # raises the op's error
            await self.clock.sleep(sim.rng.uniform(0.0, sim.cfg.net_max_s))
            if sim.cfg.answer_lost and sim.rng.random() < sim.cfg.answer_lost:
                sim.faults["answer_lost"] += 1
                raise BrokerUnavailable("connection reset after the request was applied")
            return value, seq[0]
        except Retryable:
            self._target = None
            raise

    async def _until_done(self, fn: Callable[[LocalClient], Awaitable[object]]) -> None:
        attempt = 0
        while True:
            try:
                await self.call(fn)
                return
            except Retryable:
                await self.backoff(attempt)
                attempt = min(attempt + 1, 6)

    async def retry_dead(self, label: str) -> None:
        """Retry every dead job (in dead segments too) until a broker answers:
        recorded as sent (the checker allows one revival per retry) and counted."""
        sim = self.sim
        sim.history.add(sim.now(), Kind.DEAD_RETRY_SENT, self.name, label)
        await self._until_done(partial(LocalClient.retry_dead))
        sim.faults["dead_retried"] += 1

    async def backoff(self, attempt: int) -> None:
        await self.clock.sleep(min(2.0, 0.05 * 2**attempt) * (0.5 + self.sim.rng.random()))


def _retrieve(task: asyncio.Future[Any]) -> None:
    if not task.cancelled():
        task.exception()


# --------------------------------------------------------------------------- producers


class Producer(Client):
    """Pushes its jobs in small batches until every one is acknowledged."""

    def __init__(self, sim: Sim, name: str, jobs: list[NewJob]) -> None:
        super().__init__(sim, name)
        self.jobs = jobs
        self.to_cancel: list[str] = []
        self.first_sent: dict[str, float] = {}
        self.done = asyncio.Event()

    async def run(self) -> None:
        sim = self.sim
        pending = list(self.jobs)
        attempt = 0
        while pending:
            self._abandon_stale(pending)
            batch = pending[: sim.rng.randint(1, sim.cfg.push_batch_max)]
            if not batch:
                break
            for job in batch:
                assert job.id is not None
                if job.id not in self.first_sent:
                    self.first_sent[job.id] = sim.now()
                    sim.history.add(
                        sim.now(),
                        Kind.PUSH_SENT,
                        self.name,
                        job.id,
                        delay_s=job.delay_s,
                        after=job.after,
                        on_parent_failure=job.on_parent_failure,
                    )
            try:
                results, seq = await self.call(partial(LocalClient.push_results, jobs=batch))
            except Retryable:
                await self.backoff(attempt)
                attempt += 1
                continue
            attempt = 0
            for job, result in zip(batch, results, strict=True):
                if self._settled(job, result, seq):
                    pending.remove(job)
            await self.clock.sleep(sim.rng.uniform(0.0, sim.cfg.push_interval_max_s))
        await self._cancel_some()
        self.done.set()

    def _abandon_stale(self, pending: list[NewJob]) -> None:
        """The promise: a push retried within the dedupe window is applied once.  A job
        still unacknowledged this long after its first send is given up (never acked).
        The window is measured on broker clocks, which may differ by half a window
        (see ``Sim._jump_clock``): retries stop well inside it."""
        sim = self.sim
        give_up_s = 0.4 * sim.cfg.dedupe_window_s
        for job in list(pending):
            assert job.id is not None
            if sim.now() - self.first_sent.get(job.id, sim.now()) > give_up_s:
                sim.faults["push_abandoned"] += 1
                pending.remove(job)

    def _settled(self, job: NewJob, result: str | OsqueueError, seq: int) -> bool:
        """Record one push's answer; True when the job needs no more sending."""
        sim = self.sim
        assert job.id is not None
        if isinstance(result, str):
            sim.history.add(sim.now(), Kind.PUSH_ACK, self.name, job.id, seq=seq)
            if sim.rng.random() < sim.cfg.cancel_rate:
                self.to_cancel.append(job.id)
            return True
        if isinstance(result, DuplicateKey) or (isinstance(result, JobNotFound) and job.after):
            # another live job holds the key, or a parent is unknown (never created, or it
            # finished before the queue's first push with parents started the record)
            sim.history.add(sim.now(), Kind.PUSH_REFUSED, self.name, job.id)
            return True
        if isinstance(result, Retryable):
            return False
        sim.unexpected(f"push of {job.id} refused: {result!r}", result)
        return True

    async def _cancel_some(self) -> None:
        """Cancel a few acknowledged jobs (each may be running, done or gone by now)."""
        sim = self.sim
        for job_id in self.to_cancel:
            sim.history.add(sim.now(), Kind.CANCEL_SENT, self.name, job_id)
            for attempt in range(8):
                try:
                    _, seq = await self.call(partial(LocalClient.cancel, job_id=job_id))
                except JobNotFound:
                    break  # done (or gone) already
                except Retryable:
                    await self.backoff(attempt)
                    continue
                sim.history.add(sim.now(), Kind.CANCEL_OK, self.name, job_id, seq=seq)
                break


# --------------------------------------------------------------------------- workers


class Worker(Client):
    """Claims, works (heartbeating), then completes or fails; one incarnation of a worker."""

    def __init__(self, sim: Sim, name: str) -> None:
        super().__init__(sim, name)
        self.hb_interval_s = sim.cfg.heartbeat_timeout_s / 3.0

    async def run(self) -> None:
        sim = self.sim
        attempt = 0
        wait_s = sim.rng.choice((0.0, 1.0, 5.0))
        taken: list[Job] = []  # claimed (by a claim or a complete_and_claim): work these next
        while True:
            if taken:
                outcomes = await asyncio.gather(*(self._work(job) for job in taken))
                taken = [job for more in outcomes for job in more]
                continue
            try:
                jobs, seq = await self.call(
                    lambda c: c.claim(
                        self.name, sim.cfg.queues, max_jobs=sim.cfg.claim_max, wait_s=wait_s
                    ),
                    timeout_s=wait_s + 8.0,
                )
            except NotFound as exc:
                self.payload_gone(exc)
                continue
            except Retryable:
                await self.backoff(attempt)
                attempt += 1
                continue
            attempt = 0
            for job in jobs:
                sim.history.add(sim.now(), Kind.CLAIMED, self.name, job.id, job.token, seq=seq)
            if jobs:
                taken = jobs  # worked at the top of the loop
            elif wait_s == 0.0:
                await self.clock.sleep(sim.rng.uniform(0.2, 1.0))

    def payload_gone(self, exc: NotFound) -> None:
        """A claim raised ``NotFound``: a payload object was missing.  The broker leaves
        out a job that left meanwhile (cancelled, its object deleted with it) and
        fails one whose object went while it lived, so no claim raises it, and no
        fault the simulator injects deletes an object: a violation (I1)."""
        self.sim.problems.append(
            Violation(Rule.PAYLOAD_KEPT, f"{self.name}'s claim raised {exc!r}")
        )

    async def _work(self, job: Job) -> list[Job]:
        """Work on ``job`` and settle it; the jobs claimed along with its completion."""
        sim = self.sim
        end = self.clock.monotonic() + sim.rng.uniform(0.0, sim.cfg.work_max_s)
        while (left := end - self.clock.monotonic()) > 0:
            await self.clock.sleep(min(left, self.hb_interval_s))
            if self.clock.monotonic() < end:
                verdict = await self._holder_call(
                    job, Kind.HEARTBEAT_OK, lambda c: c.heartbeat(job)
                )
                if verdict is False:
                    return []
        kind, _, rest = job.payload.partition(b":")
        if kind == b"tick":  # a schedule's job: its payload names the schedule
            if not job.id.startswith(rest.decode() + ":"):
                sim.unexpected(f"job {job.id} was delivered with the payload {job.payload!r}")
        elif not rest.startswith(job.id.encode() + b":"):
            sim.unexpected(f"job {job.id} was delivered with the payload {job.payload[:40]!r}")
        if kind == b"poison":
            await self._holder_call(job, Kind.FAIL_OK, lambda c: c.fail(job, error="poison"))
        elif sim.rng.random() < sim.cfg.release_rate:
            await self._holder_call(job, Kind.RELEASE_OK, lambda c: c.release(job))
        elif sim.rng.random() < sim.cfg.fail_rate:
            retry = sim.rng.choice((None, 0.0, 1.0))
            await self._holder_call(
                job, Kind.FAIL_OK, lambda c: c.fail(job, error="flaky", retry_after_s=retry)
            )
        elif sim.rng.random() < 0.5:  # the worker runtime's way: settle and claim in one commit
            return await self._complete_and_claim(job)
        else:
            result = sim_result(job.id, job.token)
            await self._holder_call(
                job, Kind.COMPLETE_OK, lambda c: c.complete(job, result=result), result
            )
        return []

    async def _complete_and_claim(self, job: Job) -> list[Job]:
        """Complete ``job`` and claim more in one call; retried like a completion."""
        sim = self.sim
        give_up = self.clock.monotonic() + sim.cfg.heartbeat_timeout_s
        attempt = 0
        result = sim_result(job.id, job.token)
        while True:
            try:
                (errors, jobs), seq = await self.call(
                    lambda c: c.complete_and_claim(
                        [job],
                        self.name,
                        sim.cfg.queues,
                        max_jobs=sim.cfg.claim_max,
                        results=[result],
                    )
                )
            except NotFound as exc:
                self.payload_gone(exc)
                return []
            except Retryable:
                if self.clock.monotonic() > give_up:
                    return []
                await self.backoff(attempt)
                attempt += 1
                continue
            break
        (error,) = errors
        if error is None:
            sim.history.add(
                sim.now(), Kind.COMPLETE_OK, self.name, job.id, job.token, seq=seq, result=result
            )
        elif isinstance(error, LeaseLost):
            sim.history.add(sim.now(), Kind.LEASE_LOST, self.name, job.id, job.token)
        elif isinstance(error, Retryable):  # its result object was not stored: not applied
            await self._holder_call(
                job, Kind.COMPLETE_OK, lambda c: c.complete(job, result=result), result
            )
        else:
            sim.unexpected(f"complete_and_claim of {job.id} answered {error!r}")
        for claimed in jobs:
            sim.history.add(sim.now(), Kind.CLAIMED, self.name, claimed.id, claimed.token, seq=seq)
        return jobs

    async def _holder_call(
        self,
        job: Job,
        kind: Kind,
        fn: Callable[[LocalClient], Awaitable[None]],
        result: EncodedResult | None = None,
    ) -> bool | None:
        """True: accepted.  False: LeaseLost.  None: gave up (the job will be reclaimed)."""
        sim = self.sim
        give_up = self.clock.monotonic() + sim.cfg.heartbeat_timeout_s
        attempt = 0
        while True:
            try:
                _, seq = await self.call(fn)
            except LeaseLost:
                sim.history.add(sim.now(), Kind.LEASE_LOST, self.name, job.id, job.token)
                return False
            except Retryable:
                if self.clock.monotonic() > give_up or kind is Kind.HEARTBEAT_OK:
                    return None
                await self.backoff(attempt)
                attempt += 1
                continue
            sim.history.add(sim.now(), kind, self.name, job.id, job.token, seq=seq, result=result)
            return True


# --------------------------------------------------------------------------- the operator


class Operator(Client):
    """Sets the run's schedules and queue settings, then pauses and resumes the
    queues now and then (each call retried until it is answered)."""

    async def run(self) -> None:
        sim, cfg = self.sim, self.sim.cfg
        for name, every_s, catch_up in cfg.schedules:
            await self._until_done(
                partial(
                    LocalClient.schedule,
                    name=name,
                    queue=cfg.queues[0],
                    every_s=every_s,
                    payload=b"tick:" + name.encode(),
                    catch_up=catch_up,  # type: ignore[arg-type]
                )
            )
        limits = (cfg.rate_per_s, cfg.burst, cfg.max_claimed, cfg.max_claimed_per_group)
        if any(v is not None for v in limits):
            for queue in cfg.queues:
                await self._until_done(
                    partial(
                        LocalClient.set_queue,
                        queue=queue,
                        rate_per_s=cfg.rate_per_s,
                        burst=cfg.burst,
                        max_claimed=cfg.max_claimed,
                        max_claimed_per_group=cfg.max_claimed_per_group,
                    )
                )
        for _ in range(cfg.pauses):
            await self.clock.sleep(sim.rng.uniform(1.0, cfg.fault_phase_s / 2))
            queue = sim.rng.choice(cfg.queues)
            await self._until_done(partial(LocalClient.set_queue, queue=queue, paused=True))
            sim.faults["queue_paused"] += 1
            await self.clock.sleep(sim.rng.uniform(0.5, 5.0))
            await self._until_done(partial(LocalClient.set_queue, queue=queue, paused=False))
        for i in range(cfg.dead_retries):  # retry every dead job (in dead segments too)
            await self.clock.sleep(sim.rng.uniform(cfg.fault_phase_s / 4, cfg.fault_phase_s / 3))
            await self.retry_dead(f"retry-{i}")
