"""A scripted test bench: brokers on one simulated store, driven step by step.

The seeded simulation (:mod:`sim.run`) explores; the bench replays one
named situation exactly, for plain tests and regression tests::

    async def scenario() -> None:
        bench = Bench("retry-echo")
        broker = await bench.start("b1")
        bench.storage("b1").inject("queue.json", Fault.ECHO)
        await broker.client().push(b"x", id="j1")

    run_virtual(scenario())   # virtual time: sleeps cost nothing
"""

from __future__ import annotations

import asyncio
import random
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field, replace
from typing import TypeVar

from osqueue.broker import Broker, BrokerConfig
from osqueue.broker.inproc.client import LocalClient
from osqueue.errors import BrokerUnavailable, MaybeCommitted, NotBroker, ShuttingDown
from osqueue.state import DOCUMENT_KEY, Document, decode
from osqueue.storage.memory import EtagMode
from sim.node import Gate, NodeClock
from sim.store import FaultRates, NodeStorage, SharedStore

T = TypeVar("T")

#: no latency and no faults: the bench decides every fault itself
QUIET = FaultRates(latency_min_s=0.0, latency_max_s=0.0)


@dataclass
class Node:
    broker: Broker
    storage: NodeStorage
    clock: NodeClock
    gate: Gate


@dataclass
class Bench:
    name: str
    etag_mode: EtagMode = "counter"
    config: BrokerConfig = field(
        default_factory=lambda: BrokerConfig(lease_s=5.0, heartbeat_timeout_s=10.0)
    )
    seed: int = 0

    def __post_init__(self) -> None:
        self.store = SharedStore(f"bench-{self.name}", etag_mode=self.etag_mode)
        self.rng = random.Random(self.seed)
        self.nodes: dict[str, Node] = {}
        self.crashed: set[str] = set()

    async def __aenter__(self) -> Bench:
        return self

    async def __aexit__(self, *exc: object) -> None:
        for name in list(self.nodes):
            if name not in self.crashed:
                self.crash(name)  # nothing keeps running into the next test
        self.close()

    def node(self, name: str, *, skew_s: float = 0.0, standby: bool = False) -> Node:
        """A broker process (not started) with its own storage connection, clock and gate."""
        gate = Gate()
        clock = NodeClock(gate, skew_s=skew_s)
        storage = NodeStorage(self.store, name, self.rng, rates=QUIET, gate=gate)
        config = replace(self.config, broker_id=name, address=f"{name}:7070")
        broker = Broker(storage, config, clock=clock, standby=standby)
        node = Node(broker, storage, clock, gate)
        storage.on_crash = lambda: self.crash(name)
        self.nodes[name] = node
        return node

    async def start(self, name: str, **kwargs: float | bool) -> Broker:
        node = self.node(name, **kwargs)  # type: ignore[arg-type]
        await node.broker.start()
        return node.broker

    def storage(self, name: str) -> NodeStorage:
        return self.nodes[name].storage

    def crash(self, name: str) -> None:
        """SIGKILL the broker: its tasks stop where they are, nothing is flushed."""
        node = self.nodes[name]
        self.crashed.add(name)
        node.storage.dead = True
        broker = node.broker
        for task in broker.tasks():
            if not task.done():
                task.cancel()

    async def owner(self) -> Broker:
        """The broker the document names (what a client's discovery would find)."""
        doc = await self.document()
        if doc.broker is None or doc.broker.id in self.crashed:
            raise BrokerUnavailable("the broker the document names does not answer")
        return self.nodes[doc.broker.id].broker

    async def call(
        self,
        fn: Callable[[LocalClient], Awaitable[T]],
        *,
        attempts: int = 40,
        timeout_s: float = 3.0,
    ) -> T:
        """Call whoever owns the queue, following takeovers like a real client.

        A call that gets no answer within ``timeout_s`` (its broker crashed or is
        paused) is retried, like a client deadline; so is ``NotBroker`` and friends.
        """
        for attempt in range(attempts):
            try:
                owner = await self.owner()
                return await asyncio.wait_for(fn(owner.client()), timeout_s)
            except (NotBroker, ShuttingDown, MaybeCommitted, BrokerUnavailable, TimeoutError):
                if attempt == attempts - 1:
                    raise
                await asyncio.sleep(min(2.0, 0.1 * 2**attempt))
        raise AssertionError("unreachable")

    async def document(self) -> Document:
        return decode((await self.store.inner.read(DOCUMENT_KEY)).data)

    async def archived_ids(self) -> list[str]:
        """Every job id in the archive, once per line (a repeat shows twice)."""
        from sim.history import parse_archive

        inner = self.store.inner
        objects = {k: await inner.get(k) for k in await inner.list("archive/")}
        return sorted(r.id for r in parse_archive(objects))

    async def settle(self, seconds: float) -> None:
        """Let virtual time pass (renewals, archive writes, prunes happen)."""
        await asyncio.sleep(seconds)

    def close(self) -> None:
        self.store.close()
