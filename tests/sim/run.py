"""One simulation run: build the cluster a seed describes, inject faults, heal, check.

A run has three phases on virtual time:

1. **faults**: brokers, producers and workers run while the storage injects
   faults and the nemesis crashes, pauses, stops and skews processes;
2. **heal**: faults stop, paused processes resume, crashed ones restart;
3. **drain**: the run waits (bounded) until every acknowledged job is archived
   or dead, then stops everything and checks the history (I1 to I9, :mod:`sim.checker`).

``run_seed(seed)`` is the whole API; the report prints the one command that
replays the seed exactly.
"""

from __future__ import annotations

import asyncio
import contextlib
import hashlib
import itertools
import json
import logging
import os
import random
import traceback
from collections import Counter
from collections.abc import Callable, Coroutine, Iterator
from dataclasses import dataclass, field
from functools import partial
from pathlib import Path
from typing import Any

from osqueue.api import NewJob
from osqueue.broker import Broker
from osqueue.errors import OsqueueError
from osqueue.ids import deterministic_ids
from osqueue.state import DOCUMENT_KEY, Document, decode
from sim import realstore
from sim.actors import BrokerNode, Operator, Producer, Worker
from sim.checker import judge
from sim.config import SimConfig, config_for
from sim.damage import Damager
from sim.history import History, Kind, Outcome, Problem, Violation, parse_archive
from sim.loop import SimulationStuck, run_virtual
from sim.node import EPOCH_S
from sim.realstore import RealServer
from sim.resend import Resender
from sim.results import sim_ttl
from sim.store import PAUSED, Call, CrashTrigger, FaultRates, Phase, SharedStore

_runs = itertools.count(1)

REPLAY = ".venv/bin/pytest tests/simulation -k replay --seed {seed}"
#: the folder that holds this package (``tests/``): on PYTHONPATH, ``python -m sim`` runs
TESTS_DIR = str(Path(__file__).resolve().parents[1])


def sim_env() -> dict[str, str]:
    """The environment of a ``python -m sim`` subprocess: fixed string hashing, and
    ``tests/`` on the path (the simulator lives with the tests, not in the package)."""
    path = os.environ.get("PYTHONPATH")
    return dict(
        os.environ,
        PYTHONHASHSEED="0",
        PYTHONPATH=TESTS_DIR if not path else os.pathsep.join((TESTS_DIR, path)),
    )


@dataclass
class Report:
    """What a run did and what it broke."""

    seed: int
    family: str
    #: where the shared store was: ``memory``, or a real server (``moto``, ``azurite``)
    storage: str = "memory"
    violations: list[Violation] = field(default_factory=list)
    faults: Counter[str] = field(default_factory=Counter)
    acknowledged: int = 0
    completed: int = 0
    dead: int = 0
    deliveries: int = 0
    versions: int = 0
    #: payload objects the brokers' sweeps deleted
    payloads_swept: int = 0
    #: what the checker's rules looked at (versions, claims, delayed claims...)
    checked: Counter[str] = field(default_factory=Counter)
    #: a real server's answers to document writes (see ``SharedStore.answers``)
    answers: Counter[str] = field(default_factory=Counter)
    virtual_s: float = 0.0
    fingerprint: str = ""

    @property
    def ok(self) -> bool:
        return not self.violations

    @property
    def fault_count(self) -> int:
        return sum(self.faults.values())

    @property
    def replay(self) -> str:
        return REPLAY.format(seed=self.seed)

    def as_json(self) -> str:
        """One JSON line: what ``python -m sim sweep`` prints for each seed."""
        return json.dumps(
            {
                "seed": self.seed,
                "family": self.family,
                "storage": self.storage,
                "ok": self.ok,
                "violations": [str(v) for v in self.violations],
                "faults": dict(self.faults),
                "acknowledged": self.acknowledged,
                "completed": self.completed,
                "dead": self.dead,
                "deliveries": self.deliveries,
                "versions": self.versions,
                "checked": dict(self.checked),
                "answers": dict(self.answers),
                "virtual_s": round(self.virtual_s, 3),
                "fingerprint": self.fingerprint,
                "summary": self.summary(),
            },
            sort_keys=True,
        )

    def summary(self) -> str:
        faults = ", ".join(f"{k}={v}" for k, v in sorted(self.faults.items())) or "none"
        lines = [
            f"seed {self.seed} ({self.family}): {len(self.violations)} violation(s); "
            f"{self.acknowledged} pushes acknowledged, {self.completed} completed, "
            f"{self.dead} dead, {self.deliveries} deliveries, {self.versions} versions, "
            f"{self.virtual_s:.1f}s virtual",
            f"  faults: {faults}",
        ]
        lines += [f"  {v}" for v in self.violations[:20]]
        if len(self.violations) > 20:
            lines.append(f"  ... and {len(self.violations) - 20} more")
        if self.violations:
            lines.append(f"  replay: {self.replay}")
        return "\n".join(lines)


class Sim:
    """The cluster of one run (see the module docstring)."""

    def __init__(
        self,
        cfg: SimConfig,
        rng: random.Random,
        *,
        real: realstore.Backend | None = None,
    ) -> None:
        self.cfg = cfg
        self.rng = rng
        self.history = History()
        self.store = SharedStore(
            f"sim-{cfg.seed}-{next(_runs)}",
            etag_mode=cfg.etag_mode,
            min_write_interval_s=cfg.min_write_interval_s,
            backend=real.proxied if real else None,
            observer=real.direct if real else None,
        )
        #: a real server's faulty network (the simulation over real storage)
        self.network = real.network if real else None
        self.faults = self.store.faults
        self.rates: FaultRates = cfg.rates
        self.inline_max = rng.choice((64, 4096))
        if cfg.inline_max is not None:  # the family's choice (the draw above stays)
            self.inline_max = cfg.inline_max
        self.nodes_by_id: dict[str, BrokerNode] = {}
        self.brokers: list[BrokerNode] = []
        #: every broker incarnation of the run (for their counters)
        self.incarnations: list[Broker] = []
        self.producers: list[Producer] = []
        self.workers: dict[int, Worker] = {}
        self.problems: list[Violation] = []
        self.requests: set[asyncio.Future[Any]] = set()
        self._worker_tasks: dict[int, asyncio.Task[None]] = {}
        self._tasks: list[asyncio.Task[None]] = []
        self._nemesis_tasks: set[asyncio.Task[None]] = set()
        self._settled_at: tuple[int, bool] = (-1, False)

    # -- hooks for the actors ---------------------------------------------------------

    def now(self) -> float:
        return asyncio.get_running_loop().time()

    def unexpected(self, what: str, exc: BaseException | None = None) -> None:
        detail = ""
        if exc is not None and not isinstance(exc, OsqueueError):
            detail = "\n" + "".join(traceback.format_exception(exc)).rstrip()
        self.problems.append(Violation(Problem.UNEXPECTED, what + detail))

    def broker_failed(self, node: BrokerNode, exc: OsqueueError) -> None:
        self.problems.append(Violation(Problem.BROKER_FAILED, f"{node.broker_id} stopped: {exc!r}"))

    # -- building ---------------------------------------------------------------------

    def _spawn(self, coro: Callable[[], Coroutine[Any, Any, None]], name: str) -> None:
        task = asyncio.ensure_future(coro())
        task.set_name(name)
        self._tasks.append(task)

    def _jobs(self, producer: int) -> list[NewJob]:
        cfg, rng = self.cfg, self.rng
        jobs = []
        for i in range(cfg.jobs_per_producer):
            poison = rng.random() < cfg.poison_rate
            job_id = f"p{producer}-{i}"
            body = f"{'poison' if poison else 'job'}:{job_id}:".encode() + b"." * rng.randint(
                0, 120
            )
            key = None
            if rng.random() < cfg.key_rate:
                key = f"k-{rng.randrange(cfg.key_pool)}"
            group: str | None = None
            after: tuple[str, ...] = ()
            if cfg.group_rate and rng.random() < cfg.group_rate:
                group = f"g{rng.randrange(cfg.group_pool)}"
            if cfg.after_rate and i and rng.random() < cfg.after_rate:
                after = tuple(sorted({f"p{producer}-{rng.randrange(i)}" for _ in range(2)}))
            jobs.append(
                NewJob(
                    body,
                    queue=rng.choice(cfg.queues),
                    priority=rng.choice((0, 0, 0, 1, -1)),
                    delay_s=rng.uniform(0.0, cfg.delay_max_s)
                    if rng.random() < cfg.delay_rate
                    else 0.0,
                    key=key,
                    max_attempts=4 if poison else cfg.max_attempts,
                    id=job_id,
                    result_ttl_s=sim_ttl(job_id),
                    group=group,
                    after=after,
                    on_parent_failure=rng.choice(("cancel", "run")) if after else "cancel",
                )
            )
        return jobs

    async def run(self) -> None:
        cfg = self.cfg
        for i in range(cfg.brokers):
            node = BrokerNode(self, f"b{i}", active=i == 0 or cfg.all_start_active)
            self.brokers.append(node)
            self._spawn(node.supervise, f"broker-{i}")
        for i in range(cfg.producers):
            producer = Producer(self, f"p{i}", self._jobs(i))
            self.producers.append(producer)
            self._spawn(producer.run, f"producer-{i}")
        for i in range(cfg.workers):
            self._spawn(partial(self._worker_slot, i), f"worker-{i}")
        if (
            cfg.schedules
            or cfg.pauses
            or cfg.rate_per_s
            or cfg.max_claimed
            or cfg.burst
            or cfg.max_claimed_per_group is not None
            or cfg.dead_retries
        ):
            self._spawn(Operator(self, "operator").run, "operator")
        if cfg.damages and cfg.damage:  # cold objects lost or corrupted (sim.damage)
            self._spawn(Damager(self, "damager").run, "damager")
        if cfg.resends:  # acknowledged pushes sent again (sim.resend)
            self._spawn(Resender(self, "resender").run, "resender")
        self._spawn(self._nemesis, "nemesis")
        await asyncio.sleep(cfg.fault_phase_s)
        self._heal()
        await self._drain()
        self._stop()
        await self._collect()

    async def _worker_slot(self, index: int) -> None:
        for incarnation in itertools.count(1):
            worker = Worker(self, f"w{index}.{incarnation}")
            self.workers[index] = worker
            task = asyncio.ensure_future(worker.run())
            self._worker_tasks[index] = task
            await asyncio.wait({task})
            if not task.cancelled() and task.exception() is not None:
                self.unexpected(
                    f"worker {worker.name} raised {task.exception()!r}", task.exception()
                )
            await asyncio.sleep(self.rng.uniform(0.5, 5.0))

    # -- the nemesis ------------------------------------------------------------------

    def _active(self) -> BrokerNode | None:
        landed = self.store.landed
        if not landed:
            return None
        owner = decode(landed[-1].data).broker
        node = self.nodes_by_id.get(owner.id) if owner else None
        return node if node is not None and node.alive else None

    def _target_broker(self) -> BrokerNode | None:
        active = self._active()
        if active is not None and self.rng.random() < 0.8:
            return active
        alive = [b for b in self.brokers if b.alive]
        return self.rng.choice(alive) if alive else None

    def _background(self, coro: Coroutine[Any, Any, None]) -> None:
        task = asyncio.ensure_future(coro)
        self._nemesis_tasks.add(task)
        task.add_done_callback(self._nemesis_tasks.discard)

    async def _nemesis(self) -> None:
        n = self.cfg.nemesis
        actions: list[tuple[float, Callable[[], None]]] = [
            (n.broker_crash, self._crash_broker),
            (n.broker_crash_in_commit, lambda: self._arm("document")),
            (n.archive_crash, lambda: self._arm("archive")),
            (n.broker_pause, self._pause_broker),
            (n.broker_stop, self._stop_broker),
            (n.worker_crash, self._crash_worker),
            (n.worker_pause, self._pause_worker),
            (n.clock_jump, self._jump_clock),
            (n.segment_crash, lambda: self._arm("segments")),
            (n.waiting_crash, lambda: self._arm("waiting")),
            (n.finished_crash, lambda: self._arm("finished")),
        ]
        actions = [(rate, act) for rate, act in actions if rate > 0]
        total = sum(rate for rate, _ in actions)
        if total <= 0:
            return
        end = self.now() + self.cfg.fault_phase_s
        while True:
            await asyncio.sleep(self.rng.expovariate(total))
            if self.now() >= end:
                return
            pick = self.rng.uniform(0.0, total)
            for rate, act in actions:
                pick -= rate
                if pick <= 0:
                    act()
                    break

    def _crash_broker(self) -> None:
        node = self._target_broker()
        if node is not None:
            node.crash()

    def _arm(self, prefix: str) -> None:
        node = self._active()
        if node is None or node.storage is None:
            return
        storage = node.storage
        # (a seal is rarer than a segment write: its crash comes at the next one)
        ahead = 1 if prefix in ("archive", "finished") else self.rng.randint(1, 3)
        nth = storage.writes(prefix) + ahead
        storage.triggers.append(CrashTrigger(prefix, nth, self.rng.choice(list(Phase))))

    def _pause_broker(self) -> None:
        node = self._target_broker()
        if node is not None and not node.gate.paused:
            seconds = self.rng.uniform(0.2, self.cfg.nemesis.pause_leases * self.cfg.lease_s)
            self._background(node.pause(seconds))

    def _stop_broker(self) -> None:
        node = self._active()
        if node is not None:
            self._background(node.stop())

    def _crash_worker(self) -> None:
        if not self._worker_tasks:
            return
        index = self.rng.choice(sorted(self._worker_tasks))
        task = self._worker_tasks[index]
        if not task.done():
            self.faults["worker_crash"] += 1
            task.cancel()

    def _pause_worker(self) -> None:
        if not self.workers:
            return
        worker = self.workers[self.rng.choice(sorted(self.workers))]
        if worker.gate.paused:
            return
        self.faults["worker_pause"] += 1
        seconds = self.rng.uniform(0.5, 3.0 * self.cfg.heartbeat_timeout_s)

        async def pause() -> None:
            worker.gate.pause()
            try:
                await asyncio.sleep(seconds)
            finally:
                worker.gate.resume()

        self._background(pause())

    def _jump_clock(self) -> None:
        """Step one broker's clock; no two brokers drift apart by half a dedupe window
        (the window is measured on broker clocks: beyond it, tombstones are forgotten)."""
        node = self.rng.choice(self.brokers)
        jump = self.cfg.nemesis.jump_max_s
        bound = self.cfg.dedupe_window_s / 4
        self.faults["clock_jump"] += 1
        skew = node.clock.skew_s + self.rng.uniform(-jump, jump)
        node.clock.jump(max(-bound, min(bound, skew)) - node.clock.skew_s)
        at = self.now()  # (NOT_LATE starts its bound again: sim.delayed_rules)
        self.store.calls.append(Call(node.broker_id, PAUSED, at, at, False))

    # -- heal, drain, stop ------------------------------------------------------------

    def _heal(self) -> None:
        self.rates = self.cfg.rates.calm()
        if self.network is not None:
            self.network.enable(False)
        for task in list(self._nemesis_tasks):
            task.cancel()
        for node in self.brokers:
            node.gate.resume()
            if node.storage is not None:
                node.storage.rates = self.rates
                node.storage.triggers.clear()
                node.storage.scripted.clear()
        for worker in self.workers.values():
            worker.gate.resume()

    def _settled(self) -> bool:
        if not all(p.done.is_set() for p in self.producers):
            return False
        landed = self.store.landed
        if not landed:
            return False
        if self._settled_at[0] == len(landed):
            return self._settled_at[1]
        doc = decode(landed[-1].data)
        settled = not any(ref.remaining for ref in doc.segments)  # spilled jobs wait
        settled = settled and not any(ref.remaining for ref in doc.delayed)
        settled = settled and not doc.waiting_cold  # and waiting children in objects
        for job_id in self.history.ids(Kind.PUSH_ACK) if settled else ():
            job = doc.jobs.get(job_id)
            if job is not None and job.status != "dead":
                settled = False
                break
        self._settled_at = (len(landed), settled)
        return settled

    async def _drain(self) -> None:
        deadline = self.now() + self.cfg.drain_limit_s
        while not self._settled():
            if self.now() > deadline:
                self.problems.append(
                    Violation(
                        Problem.NOT_SETTLED,
                        f"acknowledged jobs not settled within {self.cfg.drain_limit_s:g}s "
                        "after the faults stopped",
                    )
                )
                return
            await asyncio.sleep(2.0)

    def _stop(self) -> None:
        for task in [*self._tasks, *self._worker_tasks.values(), *self._nemesis_tasks]:
            task.cancel()
        for node in self.brokers:
            node.crash(fault=False)  # the end of the run, not a fault

    async def _collect(self) -> None:
        store = self.store
        await store.quiesce()
        self.archive_objects = {key: await store.get(key) for key in await store.list("archive/")}
        final: Document | None = None
        with contextlib.suppress(OsqueueError):
            final = decode((await store.read(DOCUMENT_KEY)).data)
        payloads = frozenset(await store.list("payloads/"))
        results = {key: await store.get(key) for key in await store.list("results/")}
        self.outcome = Outcome(
            final,
            parse_archive(self.archive_objects),
            payloads,
            results,
            lease_s=self.cfg.lease_s,
            schedule_grace_s=self.cfg.schedule_grace_s,
            segment_puts=dict(store.segment_puts),
            segment_rewrites=list(store.segment_rewrites),
            segment_deletes=list(store.segment_deletes),
            calls=list(store.calls),
        )

    def report(self) -> Report:
        outcome = getattr(self, "outcome", None)
        violations = list(self.problems)
        checked: Counter[str] = Counter()
        if outcome is not None:
            findings = judge(self.history, self.store.landed, outcome)
            violations += findings.violations
            checked = findings.checked
        final = outcome.final if outcome else None
        faults = Counter(self.faults)
        if self.network is not None:
            faults.update(self.network.faults)
        return Report(
            seed=self.cfg.seed,
            family=self.cfg.family,
            storage=self.network.kind if self.network is not None else "memory",
            violations=violations,
            faults=faults,
            acknowledged=len(self.history.ids(Kind.PUSH_ACK)),
            completed=len(outcome.archive) if outcome else 0,
            dead=sum(1 for j in final.jobs.values() if j.status == "dead") if final else 0,
            deliveries=len(self.history.of(Kind.CLAIMED)),
            versions=len(self.store.landed),
            payloads_swept=sum(b.counters.payloads_swept for b in self.incarnations),
            checked=checked,
            answers=Counter(self.store.answers),
            fingerprint=_fingerprint(self),
        )


def _fingerprint(sim: Sim) -> str:
    """A digest of everything a run produced: every version that landed, every answer,
    the archive objects and the payload keys at the end."""
    digest = hashlib.sha256()
    for item in sim.store.landed:
        digest.update(item.data)
    for e in sim.history.events:
        digest.update(repr((e.seq, round(e.at, 6), e.kind.value, e.actor, e.job, e.token)).encode())
    for key, data in sorted(getattr(sim, "archive_objects", {}).items()):
        digest.update(key.encode() + b"\0" + data)
    outcome = getattr(sim, "outcome", None)
    for key in sorted(outcome.payload_objects if outcome else ()):
        digest.update(key.encode())
    return digest.hexdigest()[:16]


@contextlib.contextmanager
def quiet_logs(enabled: bool = True) -> Iterator[None]:
    """Silence osqueue's logging while many seeds run (a failing seed is replayed loud)."""
    logger = logging.getLogger("osqueue")
    before = logger.level
    if enabled:
        logger.setLevel(logging.CRITICAL + 1)
    try:
        yield
    finally:
        logger.setLevel(before)


def run_config(
    cfg: SimConfig, rng: random.Random, *, sim: Sim | None = None, real: RealServer | None = None
) -> Report:
    """Run one configured simulation to the end and check it (``sim``: built already;
    ``real``: a real server to run it over, see :mod:`sim.realstore`)."""
    if real is None:
        return _run(cfg, sim or Sim(cfg, rng))
    with realstore.backend(real, cfg.seed) as backend:
        return _run(cfg, Sim(cfg, rng, real=backend))


def _run(cfg: SimConfig, sim: Sim) -> Report:
    started: list[float] = []

    async def main() -> None:
        started.append(asyncio.get_running_loop().time())
        await sim.run()
        started.append(asyncio.get_running_loop().time())

    # Every id the run makes (payload upload ids above all) comes from the seed and
    # the virtual clock, so a seed replays byte for byte.
    ids = random.Random(f"osqueue-sim-ids/{cfg.seed}")
    try:
        with deterministic_ids(ids, _virtual_wall_time):
            run_virtual(main())
    except SimulationStuck as exc:
        sim.problems.append(Violation(Problem.STUCK, str(exc)))
    except Exception as exc:  # a bug in the code under test or in the simulator
        sim.unexpected(f"the run raised {exc!r}", exc)
    finally:
        sim.store.close()
    report = sim.report()
    report.virtual_s = started[-1] - started[0] if len(started) == 2 else 0.0
    return report


def _virtual_wall_time() -> float:
    """The simulated wall clock (seconds since the epoch) where ids are made."""
    try:
        return EPOCH_S + asyncio.get_running_loop().time()
    except RuntimeError:  # outside the loop (setting up): the start of simulated time
        return EPOCH_S


def run_seed(seed: int, family: str | None = None) -> Report:
    """Run the simulation a seed describes (its family from the seed unless given)."""
    cfg, rng = config_for(seed, family)
    return run_config(cfg, rng)
