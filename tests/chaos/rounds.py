"""The chaos rounds: each picks its victim by a rule and asserts what must follow.

Takeover rounds (the serving broker's lease is at stake); the first two
assert that another live broker serves afterwards with a higher epoch at
another address:

* ``broker-kill``: SIGKILL the broker the document names;
* ``broker-freeze``: SIGSTOP it until a standby has taken over, then SIGCONT:
  it must step down (exit saying ``NotBroker``).  On ``file://`` a broker
  frozen inside a write holds that key's ``flock``; if the standby needs the
  same key (the document, or an archive object it inherits), the round checks
  that the standby decided to take over and is waiting in that write, resumes
  the frozen broker, and asserts the takeover then;
* ``clock-step``: step a standby's clock 6 s forward (SIGUSR1): by its wall
  clock the live lease ran out long ago, but lease expiry is judged by the
  observer (no new version seen for a lease, on its monotonic clock), so it
  logs the lease as suspect and stands by, and the same broker (epoch and
  address) serves on through twice the time a takeover would take; then its
  clock steps back (SIGUSR2).

Other rounds, each asserting that the same broker (epoch and address) still
serves afterwards:

* ``standby-kill``: SIGKILL a standing-by broker; the supervisor starts another;
* ``producer-kill``: SIGKILL a producer with pushes sent and not yet
  acknowledged, and restart it (it re-sends them under the same ids); it must
  be acknowledged again;
* ``worker-kill``: SIGKILL a worker holding a job; the broker must take the
  job back from it (the claim under that token ends);
* ``worker-freeze``: SIGSTOP a worker holding a job until its claim has ended,
  then SIGCONT: if the broker took the job back, the worker must hear
  ``LeaseLost`` (within ``LOST_S``, which follows from the client's own
  deadlines); a completion or a fail() (poison job) that landed as it froze
  ends the claim too, and the worker's log says so;
* ``client-network``: the proxies between clients and brokers drop answers,
  delay and reset connections for a few seconds; work must go on;
* ``storage-network`` (cloud backends): the proxy between brokers and storage
  does the same, harder (a takeover may follow: the round asserts that a live
  broker serves and work goes on).

During the broker-kill and broker-freeze rounds the storage proxy (cloud
backends) injects faults at its background rate too.  Victims are never picked at random among all
processes: each rule waits (with a deadline) until a process fits it.  The
waits on producers and workers are derived from their timeouts (``CALL_S``,
``WORKLOAD_S``, ``LOST_S`` below, each with its formula), not fixed.
"""

from __future__ import annotations

import asyncio
import random
import signal
import time
from dataclasses import dataclass
from typing import Any

from chaos_node import (
    CLAIM_WAIT_S,
    CLIENT_TIMEOUT_S,
    HEARTBEAT_S,
    PUSH_PAUSE_MAX_S,
    RETRY_S,
    WORK_MAX_S,
)
from chaos_proxy import DELAY_MAX_S, FaultyProxy
from cluster import (
    HEARTBEAT_TIMEOUT_S,
    LEASE_S,
    READY_TIMEOUT_S,
    SUPERVISE_S,
    BrokerNode,
    Cluster,
    DocRecorder,
    Observation,
)

from osqueue.storage.cloud import DEFAULT_TIMEOUT_S as STORAGE_TIMEOUT_S

TAKEOVER_KINDS = ("broker-kill", "broker-freeze", "clock-step")
#: the takeover rounds that end with another broker serving (clock-step must not)
TAKES_OVER = ("broker-kill", "broker-freeze")
OTHER_KINDS = (
    "standby-kill",
    "producer-kill",
    "worker-kill",
    "worker-freeze",
    "client-network",
    "storage-network",
)
#: how long a takeover may take: the lease, the skew margin, a standby's poll, slack
TAKEOVER_S = LEASE_S + 1.0 + 20.0
STEP_DOWN_S = 20.0
NETWORK_FAULT_S = 4.0
# The waits on producers and workers follow from their own timeouts (chaos_node.py):
#: one call of a node returns, answered or BrokerUnavailable, within its failover
#: deadline (a claim adds its long poll)
CALL_S = CLIENT_TIMEOUT_S + CLAIM_WAIT_S
#: the workload shows what a round waits for (a push in flight, a job held, work done)
#: within: a producer's pause, then its push and a worker's claim, each of which may
#: fail once (a deadline and a retry pause) before it goes through, then the job's
#: work; plus the longest delay a client-network fault holds a chunk back
#: = PUSH_PAUSE_MAX_S + 2 * 2 * (CALL_S + RETRY_S) + WORK_MAX_S + DELAY_MAX_S
WORKLOAD_S = PUSH_PAUSE_MAX_S + 4 * (CALL_S + RETRY_S) + WORK_MAX_S + DELAY_MAX_S
#: a call's deadline does not bound the read of the queue document that finds the
#: broker again after a lost connection: that storage request ends within the storage
#: client's own timeout (the chaos URLs keep the default)
DISCOVERY_S = STORAGE_TIMEOUT_S
#: a worker frozen past the heartbeat timeout hears LeaseLost within this of SIGCONT
#: (chaos_node's _work and _holder): the next heartbeat is due (HEARTBEAT_S), then at
#: most four calls in a row, each ended by its deadline (CLIENT_TIMEOUT_S): the one open
#: when it froze, a heartbeat that fails transiently, a completion answered
#: MaybeCommitted (an earlier attempt's answer was lost) and, after a retry pause each,
#: the completion that hears it; one of them may have to find the broker again
#: (DISCOVERY_S).  The claim ended before SIGCONT, so any answer the broker gives is
#: LeaseLost; a longer wait means a call outlived its bounds or the worker died (the
#: failure says which).  The figures show how long it took (well under a second).
#: = HEARTBEAT_S + 4 * CLIENT_TIMEOUT_S + 2 * RETRY_S + DISCOVERY_S
LOST_S = HEARTBEAT_S + 4 * CLIENT_TIMEOUT_S + 2 * RETRY_S + DISCOVERY_S
#: a broker stands by (again) within the supervisor's pace and one broker start
STANDBY_S = SUPERVISE_S + READY_TIMEOUT_S
#: a frozen broker on file:// may hold the lock the taker needs: how long to wait
#: before checking that a standby is blocked on it
FROZEN_TAKEOVER_S = LEASE_S + 1.0 + 8.0
#: the events that end a worker's hold of a job (chaos_node.py)
HOLD_ENDS = ("complete", "fail", "lost")
#: a takeover round ends once the same epoch has held this long
SETTLE_S = LEASE_S / 2
#: a standby whose clock stepped forward must leave a live lease alone this long:
#: twice what it takes to take over a dead broker (a lease, the margin, a poll)
CLOCK_STEP_HOLD_S = 2 * (LEASE_S + 1.0 + LEASE_S / 4)


def schedule(seed: int, backend: int, rounds: int, *, storage_faults: bool) -> list[str]:
    """The rounds of backend number ``backend`` (0, 1, 2) for ``seed``.

    The first three of the three backends together cover every kind once: each
    backend gets one takeover kind and two others.  Longer runs go on through a
    seeded order of every kind the backend supports.
    """
    rng = random.Random(seed)
    takeovers = rng.sample(TAKEOVER_KINDS, len(TAKEOVER_KINDS))
    others = rng.sample(OTHER_KINDS, len(OTHER_KINDS))
    if "storage-network" in others[0:2]:  # backend 0 is file://: no storage network
        i = others.index("storage-network")
        others[i], others[2] = others[2], others[i]
    mine = [takeovers[backend % 3], *others[2 * (backend % 3) : 2 * (backend % 3) + 2]]
    kinds = [k for k in (*TAKEOVER_KINDS, *OTHER_KINDS) if storage_faults or "storage" not in k]
    more = random.Random(f"{seed}-{backend}")
    while len(mine) < rounds:
        mine += more.sample(kinds, len(kinds))
    return [k for k in mine if storage_faults or "storage" not in k][:rounds]


@dataclass
class RoundReport:
    index: int
    kind: str
    victim: str
    before: tuple[int, str | None]
    after: tuple[int, str | None]
    detail: str = ""


class Rounds:
    """Runs the rounds of one chaos run against ``cluster``."""

    def __init__(
        self,
        cluster: Cluster,
        recorder: DocRecorder,
        storage_proxy: FaultyProxy | None,
        rng: random.Random,
        *,
        paused_writer_blocks: bool = False,
    ) -> None:
        self.cluster = cluster
        self.recorder = recorder
        self.storage_proxy = storage_proxy
        self.rng = rng
        #: file://: a broker frozen inside a write holds that key's flock (the kernel
        #: drops it when the process dies, not when it stops), so a standby that
        #: needs the same key (the document, an inherited archive object) waits for
        #: it to resume; see osqueue/storage/file.py
        self.paused_writer_blocks = paused_writer_blocks

    async def run(self, index: int, kind: str) -> RoundReport:
        before = await self.serving()
        handler = getattr(self, "_" + kind.replace("-", "_"))
        victim, detail = await handler(before)
        after = self.recorder.latest
        assert after is not None
        if kind in TAKES_OVER:
            assert after.epoch > before.epoch, f"{kind}: epoch {before.epoch} -> {after.epoch}"
            assert after.address != before.address, f"{kind}: {before.address} still serves"
            assert self._live(after) is not None, f"{kind}: {after.address} does not serve"
        elif kind != "storage-network":
            # A round that touches neither the brokers nor storage keeps the broker.
            assert (after.epoch, after.address) == (before.epoch, before.address), (
                f"{kind}: the broker changed from {before} to {after}"
            )
        return RoundReport(
            index,
            kind,
            victim,
            (before.epoch, before.address),
            (after.epoch, after.address),
            detail,
        )

    # -- who serves -------------------------------------------------------------------

    def _live(self, o: Observation) -> BrokerNode | None:
        node = self.cluster.by_address(o.address)
        return node if node is not None and node.alive and node.serving.is_set() else None

    async def serving(self) -> Observation:
        return await self.recorder.wait_for(
            "a live broker to serve", lambda o: self._live(o) is not None, TAKEOVER_S
        )

    async def _taken_over(
        self, before: Observation, timeout_s: float = TAKEOVER_S, to: BrokerNode | None = None
    ) -> Observation:
        def moved(o: Observation) -> bool:
            node = self._live(o)
            return (
                node is not None
                and o.epoch > before.epoch
                and o.address != before.address
                and (to is None or node is to)
            )

        taken = await self.recorder.wait_for(
            f"a takeover from {before.address}" + (f" by {to.name}" if to else ""),
            moved,
            timeout_s,
        )
        # The round ends once the owner has held the queue for a while (a standby
        # that lost the race for the lease must not take it over meanwhile: the
        # chain check counts premature takeovers and allows none).
        await self.recorder.wait_for(
            "the takeover to settle",
            lambda o: time.time() - self.recorder.epoch_since >= SETTLE_S,
            TAKEOVER_S,
        )
        return taken

    async def _steps_down(self, node: BrokerNode) -> None:
        try:
            await asyncio.wait_for(node.proc.wait(), STEP_DOWN_S)
        except TimeoutError:
            raise AssertionError(
                f"{node.name} was taken over but did not step down: {node.last_words()}"
            ) from None
        assert "NotBroker" in node.last_words(), node.last_words()

    def _storage_faults(self, on: bool) -> None:
        if self.storage_proxy is not None:
            self.storage_proxy.enabled = on

    async def _standby(self, serving: Observation) -> BrokerNode:
        """A broker standing by (waits for the supervisor to have started one)."""
        standbys = await self.cluster.wait_standby(serving.address, STANDBY_S)
        return self.rng.choice(standbys)

    # -- takeover rounds --------------------------------------------------------------

    async def _broker_kill(self, before: Observation) -> tuple[str, str]:
        node = self._live(before)
        assert node is not None
        self._storage_faults(True)
        try:
            self.cluster.broker_signal(node, signal.SIGKILL, "broker-sigkill")
            after = await self._taken_over(before)
        finally:
            self._storage_faults(False)
        return node.name, f"taken over by {self._name(after)}"

    async def _broker_freeze(self, before: Observation) -> tuple[str, str]:
        node = self._live(before)
        assert node is not None
        self._storage_faults(True)
        self.cluster.broker_signal(node, signal.SIGSTOP, "broker-sigstop")
        blocked = None
        try:
            try:
                after = await self._taken_over(
                    before, FROZEN_TAKEOVER_S if self.paused_writer_blocks else TAKEOVER_S
                )
            except AssertionError:
                if not self.paused_writer_blocks:
                    raise
                assert self.recorder.latest is not None
                blocked = self._blocked_taker(node, self.recorder.latest)
                assert blocked is not None, f"no standby took over from frozen {node.name}"
        finally:
            self.cluster.broker_signal(node, signal.SIGCONT, "broker-sigcont")
            self._storage_faults(False)
        if blocked is not None:  # file://: it took over once the frozen broker let go
            after = await self._taken_over(before)
        await self._steps_down(node)
        how = f" only once {node.name} resumed ({blocked} was blocked on its lock)" * bool(blocked)
        return node.name, f"taken over by {self._name(after)}{how}; it stepped down"

    def _blocked_taker(self, frozen: BrokerNode, current: Observation) -> str | None:
        """A standby that decided to take over ``current`` (it read the expired lease, or
        sent its takeover write) and has been waiting in a storage call since."""
        for node in self.cluster.live_brokers():
            if node is frozen:
                continue
            events = self.cluster.tail(node.name).refresh()
            last = events[-1] if events else None
            if last is None or last["version"] != current.version + (last["ev"] == "doc-write"):
                continue
            expired = last["t"] + last["skew_s"] >= (last["lease_until"] or 0.0) + 1.0
            if (last["ev"] == "doc-read" and expired) or (
                last["ev"] == "doc-write" and last["epoch"] == current.epoch + 1
            ):
                return node.name
        return None

    async def _clock_step(self, before: Observation) -> tuple[str, str]:
        old = self._live(before)
        assert old is not None
        standby = await self._standby(before)
        # (no storage faults here: a lease lost to them could be taken over rightly)
        try:
            self.cluster.broker_signal(standby, signal.SIGUSR1, "clock-step-forward")
            await self._until(
                lambda: any("suspect lease" in line for line in standby.tail) or None,
                f"{standby.name} to log the live lease as suspect",
                # it judges the next renewal it reads (within a third of a lease, then
                # its poll): the takeover's bound holds it
                TAKEOVER_S,
            )
            stepped = time.time()
            held = await self.recorder.wait_for(
                f"{old.name} to hold its lease through the step",
                lambda o: o.epoch != before.epoch or time.time() - stepped >= CLOCK_STEP_HOLD_S,
                CLOCK_STEP_HOLD_S + TAKEOVER_S,
            )
        finally:
            self.cluster.broker_signal(standby, signal.SIGUSR2, "clock-step-back")
        assert (held.epoch, held.address) == (before.epoch, before.address), (
            f"clock-step: {standby.name} took the live lease: {before} -> {held}"
        )
        assert standby.alive, standby.last_words()
        assert not standby.serving.is_set(), standby.last_words()
        assert self._live(held) is old
        return standby.name, f"its clock stepped forward; it logged the lease, {old.name} served on"

    def _name(self, o: Observation) -> str:
        node = self.cluster.by_address(o.address)
        return node.name if node is not None else str(o.address)

    # -- other rounds -----------------------------------------------------------------

    async def _standby_kill(self, before: Observation) -> tuple[str, str]:
        victim = await self._standby(before)
        self.cluster.broker_signal(victim, signal.SIGKILL, "standby-sigkill")
        await victim.proc.wait()
        (replacement, *_) = await self.cluster.wait_standby(
            before.address, STANDBY_S, exclude=victim
        )
        return victim.name, f"replaced by {replacement.name}"

    async def _producer_kill(self, before: Observation) -> tuple[str, str]:
        name, in_flight = await self._until(
            self._producer_in_flight, "a push in flight", WORKLOAD_S
        )
        self.cluster.send(self.cluster.producers[name], signal.SIGKILL, "producer-sigkill")
        await self.cluster.producers[name].wait()
        acked_before = self._count(name, "ack")
        await self.cluster.start_producer(name)
        await self._until(  # it starts (as a broker does), resumes and pushes
            lambda: self._count(name, "ack") > acked_before or None,
            f"{name} acknowledged again",
            READY_TIMEOUT_S + WORKLOAD_S,
        )
        return name, f"killed with {len(in_flight)} pushes in flight; restarted"

    async def _worker_kill(self, before: Observation) -> tuple[str, str]:
        name, (job_id, token) = await self._until(
            self._holder, "a worker holding a job", WORKLOAD_S
        )
        self.cluster.send(self.cluster.workers[name], signal.SIGKILL, "worker-sigkill")
        how = await self._released(job_id, token)
        return name, f"held {job_id} (token {token}); {how}"

    async def _worker_freeze(self, before: Observation) -> tuple[str, str]:
        name, (job_id, token) = await self._until(
            self._holder, "a worker holding a job", WORKLOAD_S
        )
        proc = self.cluster.workers[name]
        self.cluster.send(proc, signal.SIGSTOP, "worker-sigstop")
        frozen = time.time()
        try:
            how = await self._released(job_id, token)
        finally:
            self.cluster.send(proc, signal.SIGCONT, "worker-sigcont")
        resumed = time.time()
        held = f"held {job_id} (token {token}); frozen {resumed - frozen:.1f} s"
        if how == "finished":  # its completion landed before it froze
            return name, f"{held}; finished before the freeze"
        # The claim ended without a completion: the broker took the job back, or the
        # worker's own fail() (a poison job) landed as it froze.  Its log tells which.
        try:
            event, t = await self._until(
                lambda: self._outcome(name, job_id, token),
                f"{name} to hear LeaseLost",
                LOST_S,
            )
        except AssertionError as exc:
            raise AssertionError(f"{exc}: {self._since(name, proc, frozen)}") from None
        assert event != "complete", (
            f"{name}'s completion of {job_id} (token {token}) was accepted after its claim "
            f"ended: {self._since(name, proc, frozen)}"
        )
        if event == "fail":
            return name, f"{held}; its own fail landed as it froze (nothing to hear)"
        return name, f"{held}; taken back; it heard LeaseLost {t - resumed:.1f} s after SIGCONT"

    def _since(self, name: str, proc: asyncio.subprocess.Process, t: float) -> str:
        """What a node did since ``t`` (its log) and whether it still runs."""
        state = "running" if proc.returncode is None else f"exited with {proc.returncode}"
        events = [e for e in self.cluster.tail(name).refresh() if e["t"] >= t]
        return f"{name} is {state}; its log since it froze: {events[-20:]}; " + (
            "the nodes' stderr ends: " + self.cluster.nodes_stderr()[-2000:]
        )

    async def _client_network(self, before: Observation) -> tuple[str, str]:
        proxies = self.cluster.client_proxies()
        return "client-broker network", await self._network(proxies, 0.04, 0.1, 0.03)

    async def _storage_network(self, before: Observation) -> tuple[str, str]:
        assert self.storage_proxy is not None
        detail = await self._network([self.storage_proxy], 0.08, 0.15, 0.04)
        after = await self.serving()
        return "broker-storage network", f"{detail}; epoch {before.epoch} -> {after.epoch}"

    async def _network(
        self, proxies: list[FaultyProxy], drop: float, delay: float, reset: float
    ) -> str:
        done_before = self._progress()
        faults_before = sum(sum(p.faults.values()) for p in proxies)
        saved = [(p.drop, p.delay, p.reset, p.enabled) for p in proxies]
        for p in proxies:
            p.drop, p.delay, p.reset, p.enabled = drop, delay, reset, True
        try:
            await asyncio.sleep(NETWORK_FAULT_S)  # the fault's duration, not a wait for a state
        finally:
            for p, (d, dl, r, on) in zip(proxies, saved, strict=True):
                p.drop, p.delay, p.reset, p.enabled = d, dl, r, on
        faults = sum(sum(p.faults.values()) for p in proxies) - faults_before
        assert faults > 0, "the network round injected no fault"
        await self._until(
            lambda: self._progress() > done_before or None, "work to go on", WORKLOAD_S
        )
        return f"{faults} faults injected"

    # -- reading the logs -------------------------------------------------------------

    async def _until(self, probe: Any, what: str, timeout_s: float) -> Any:
        """Poll ``probe`` (the nodes' logs and the recorder) until it returns a value."""
        deadline = asyncio.get_running_loop().time() + timeout_s
        while (found := probe()) is None:
            assert asyncio.get_running_loop().time() < deadline, (
                f"waited {timeout_s:.1f} s for {what}"
            )
            await asyncio.sleep(0.05)  # the logs are files written by other processes
        return found

    def _count(self, name: str, event: str) -> int:
        return sum(e["ev"] == event for e in self.cluster.tail(name).refresh())

    def _progress(self) -> int:
        names = [*self.cluster.producers, *self.cluster.workers]
        return sum(self._count(n, "ack") + self._count(n, "complete") for n in names)

    def _outcome(self, name: str, job_id: str, token: int) -> tuple[str, float] | None:
        """How worker ``name`` ended its hold of ``job_id`` under ``token``, and when:
        ``lost`` (LeaseLost), ``complete`` or ``fail`` (accepted); None: not yet."""
        for e in self.cluster.tail(name).refresh():
            if e["ev"] in HOLD_ENDS and e["id"] == job_id and e["token"] == token:
                return str(e["ev"]), float(e["t"])
        return None

    def _producer_in_flight(self) -> tuple[str, set[str]] | None:
        for name, proc in self.cluster.producers.items():
            events = self.cluster.tail(name).refresh()
            in_flight = {e["id"] for e in events if e["ev"] == "sent"} - {
                e["id"] for e in events if e["ev"] == "ack"
            }
            if in_flight and proc.returncode is None:
                return name, in_flight
        return None

    def _holder(self) -> tuple[str, tuple[str, int]] | None:
        """A live worker and a job it holds, as its log and the document both say."""
        doc = self.recorder.doc
        if doc is None:
            return None
        for name in self.rng.sample(sorted(self.cluster.workers), len(self.cluster.workers)):
            if self.cluster.workers[name].returncode is not None:
                continue
            held: dict[str, int] = {}
            for e in self.cluster.tail(name).refresh():
                if e["ev"] == "claim":
                    held[e["id"]] = e["token"]
                elif e["ev"] in HOLD_ENDS:
                    held.pop(e["id"], None)
            for job_id, token in held.items():
                job = doc.jobs.get(job_id)
                claim = job.claim if job is not None and job.status == "claimed" else None
                if claim is not None and claim.token == token:
                    return name, (job_id, token)
        return None

    async def _released(self, job_id: str, token: int) -> str:
        """Wait until the document no longer holds ``job_id`` under ``token``; how it ended."""

        def released(_: Observation) -> bool:
            doc = self.recorder.doc
            job = doc.jobs.get(job_id) if doc is not None else None
            return (
                job is None
                or job.status != "claimed"
                or job.claim is None
                or (job.claim.token != token)
            )

        await self.recorder.wait_for(
            f"the claim of {job_id} (token {token}) to end",
            released,
            HEARTBEAT_TIMEOUT_S + TAKEOVER_S,
        )
        doc = self.recorder.doc
        job = doc.jobs.get(job_id) if doc is not None else None
        return "finished" if job is None or job.status == "done" else "taken back"
