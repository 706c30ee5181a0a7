"""The simulation over real storage protocols: moto's S3 server and Azurite.

``python -m sim sweep --storage moto|azurite START COUNT`` (and
``tests/simulation/test_sim_real_storage.py``) runs seeds whose shared store is
a real server instead of the in-memory one::

    node -- the simulator's faults --> SharedStore -- obstore --> FaultyProxy --> server
            (503s, lost answers, 412 echoes,  (records what     (thread: drops answers,
             held writes, crashes, pauses)     landed)           delays, resets)

Every document version, archive line and payload object goes through the
real protocol: the server's ETags and its 412/409/404 answers to conditional
writes, obstore's own retries and error mapping (``osqueue.storage.cloud``),
and the network faults of :class:`chaos.chaos_proxy.FaultyProxy` on top of
the simulator's.  Virtual time stands still while a request is at the server
(:mod:`sim.loop`), so real latency never expires a lease; each run is trimmed
(:func:`trimmed`) because every request is a real round trip.  Such a run is
not an exact function of its seed: the server and the proxy answer in real
time.
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import itertools
import os
import random
import threading
from collections import Counter
from collections.abc import Callable, Iterator
from dataclasses import dataclass

from chaos.chaos_proxy import FaultyProxy
from servers import AzuriteServer, MotoS3Server
from servers.servers import AZURITE_ACCOUNT

from osqueue.storage import from_url
from osqueue.storage.port import Storage
from sim.config import SimConfig

BACKENDS = ("moto", "azurite")
#: request timeouts and retries of the obstore client (short: a lost answer is common here)
CLIENT_PARAMS = {"timeout_s": "10", "max_retries": "3", "retry_timeout_s": "10"}
_runs = itertools.count(1)


@dataclass(frozen=True)
class RealServer:
    """A running server and how to reach it through a proxy."""

    kind: str
    port: int
    #: (prefix, endpoint) -> a storage URL for ``prefix`` that goes through ``endpoint``
    url: Callable[[str, str], str]


def reach(server: MotoS3Server | AzuriteServer) -> RealServer:
    if isinstance(server, MotoS3Server):
        return RealServer(
            "moto", server.port, lambda prefix, endpoint: server.url(prefix, endpoint=endpoint)
        )
    return RealServer(
        "azurite",
        server.port,
        lambda prefix, endpoint: server.url(prefix, endpoint=f"{endpoint}/{AZURITE_ACCOUNT}"),
    )


@contextlib.contextmanager
def started(kind: str) -> Iterator[RealServer]:
    """Start a server of ``kind`` (``moto`` or ``azurite``) for a sweep from the command line."""
    if kind not in BACKENDS:
        raise ValueError(f"unknown storage {kind!r}; expected one of {', '.join(BACKENDS)}")
    server = MotoS3Server() if kind == "moto" else AzuriteServer()
    with server:
        yield reach(server)


def trimmed(cfg: SimConfig) -> SimConfig:
    """The run of a seed, shortened for a real server: every request is a real round
    trip, so fewer jobs and a fault phase of at most 30 s (virtual).  The long-haul
    family loses its length (tombstones expiring mid-run stay the in-memory sweep's)."""
    return dataclasses.replace(
        cfg,
        fault_phase_s=min(cfg.fault_phase_s, 30.0),
        jobs_per_producer=min(cfg.jobs_per_producer, 10),
        producers=min(cfg.producers, 2),
    )


class NetworkFaults:
    """:class:`FaultyProxy` on an event loop of its own, in a thread of its own.

    The simulation's loop waits for real answers while virtual time stands
    still; the proxy has to move bytes (and hold them back) in real time.
    """

    def __init__(self, upstream_port: int, rng: random.Random, kind: str = "") -> None:
        #: the server behind the proxy (``moto``, ``azurite``)
        self.kind = kind
        self.proxy = FaultyProxy(
            upstream_port,
            seed=rng.randrange(1 << 32),
            drop=rng.choice((0.01, 0.03)),
            delay=rng.choice((0.02, 0.05)),
            reset=rng.choice((0.0, 0.01)),
            delay_max_s=0.2,
        )
        self._loop = asyncio.new_event_loop()
        self._thread = threading.Thread(target=self._loop.run_forever, name="sim-proxy")
        self._thread.daemon = True

    def start(self) -> str:
        """Start forwarding (faults on); the endpoint to send requests to."""
        self._thread.start()
        port = asyncio.run_coroutine_threadsafe(self.proxy.start(), self._loop).result(10)
        self.enable(True)
        return f"http://127.0.0.1:{port}"

    def enable(self, on: bool) -> None:
        """Faults on or off (the heal phase turns them off); safe from any thread."""
        self._loop.call_soon_threadsafe(setattr, self.proxy, "enabled", on)

    @property
    def faults(self) -> Counter[str]:
        return Counter({f"net_{k}": v for k, v in self.proxy.faults.items()})

    def stop(self) -> None:
        try:
            asyncio.run_coroutine_threadsafe(self.proxy.close(), self._loop).result(10)
        finally:
            self._loop.call_soon_threadsafe(self._loop.stop)
            self._thread.join(10)
            self._loop.close()


@dataclass
class Backend:
    """One run's view of the server: through the faulty proxy (every node's requests)
    and direct (the recorder's reads, see :class:`sim.store.SharedStore`)."""

    proxied: Storage
    direct: Storage
    network: NetworkFaults


@contextlib.contextmanager
def backend(server: RealServer, seed: int) -> Iterator[Backend]:
    """A fresh prefix on ``server`` for one run of ``seed``, reached through a faulty
    proxy of its own (its faults drawn from the seed)."""
    network = NetworkFaults(server.port, random.Random(f"osqueue-sim-proxy/{seed}"), server.kind)
    endpoint = network.start()
    try:
        prefix = f"sim-{os.getpid()}-{next(_runs)}-seed-{seed}"
        query = "&".join(f"{k}={v}" for k, v in CLIENT_PARAMS.items())
        proxied = from_url(f"{server.url(prefix, endpoint)}&{query}")
        direct = from_url(f"{server.url(prefix, f'http://127.0.0.1:{server.port}')}&{query}")
        yield Backend(proxied, direct, network)
    finally:
        network.stop()
