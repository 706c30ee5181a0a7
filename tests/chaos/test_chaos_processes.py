"""Real processes, real signals: brokers, a standby, producers and workers as OS processes.

For a bounded number of rounds the active broker is killed with SIGKILL or
frozen with SIGSTOP past its lease (then SIGCONT), a worker is killed mid-job
and another is frozen past the heartbeat timeout.  A supervisor keeps two
broker processes and three workers alive, as systemd or Kubernetes would.  On
S3 (moto's server) the brokers reach storage through :class:`FaultyProxy`,
which drops answers after forwarding, delays and resets connections.

Afterwards the queue must drain, and the producers' acknowledgements, the
workers' logs and the archive must satisfy I1 to I4:

* I1: every acknowledged job is archived or dead;
* I2: nothing is archived that was not pushed, and nothing twice;
* I3: at most one completion (one token) accepted per job;
* I4: every claim token was handed to one holder only.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import random
import signal
import sys
from collections import Counter, defaultdict
from collections.abc import AsyncIterator, Iterator
from dataclasses import dataclass, field
from pathlib import Path

import pytest
from chaos_proxy import FaultyProxy

from osqueue.bench import BrokerProcess
from osqueue.errors import OsqueueError
from osqueue.state import DOCUMENT_KEY, Document, decode
from osqueue.storage import from_url
from osqueue.storage.port import Storage
from osqueue.testing import MotoS3Server

pytestmark = [pytest.mark.chaos, pytest.mark.timeout(600)]

NODE = str(Path(__file__).with_name("chaos_node.py"))
LEASE_S = 2.0
HEARTBEAT_TIMEOUT_S = 3.0
#: brokers sweep payloads/ this often: many sweeps while brokers die and freeze
PAYLOAD_SWEEP_S = 1.5
#: objects under payloads/ that no job uses, written before the run: the sweep's
#: work (orphans of a real crash between upload and commit are rarer)
PLANTED = tuple(f"payloads/planted-{i}=01JD000000000000000000000{i}" for i in range(3))
ROUNDS = 4
PRODUCERS = 2
JOBS_PER_PRODUCER = 120
WORKERS = 3
DRAIN_LIMIT_S = 120.0


@dataclass
class Figures:
    rounds: int = 0
    acknowledged: int = 0
    archived: int = 0
    dead: int = 0
    lost: int = 0
    completed_twice: int = 0
    #: objects under payloads/ at the end (jobs still in the document, orphans)
    payload_objects: int = 0
    signals: Counter[str] = field(default_factory=Counter)


class Cluster:
    """The processes of one chaos run and the supervisor that keeps them alive."""

    def __init__(self, url: str, workdir: Path, seed: int) -> None:
        self.url = url
        self.workdir = workdir
        self.rng = random.Random(seed)
        self.brokers: list[BrokerProcess] = []
        self.workers: dict[str, asyncio.subprocess.Process] = {}
        self.producers: list[asyncio.subprocess.Process] = []
        self.signals: Counter[str] = Counter()
        self._worker_count = 0
        self._stopping = False
        self._stderr = (workdir / "nodes.err").open("ab")  # closed in stop()

    # -- processes ------------------------------------------------------------------

    async def _broker(self, standby: bool) -> BrokerProcess:
        proc = BrokerProcess(
            self.url,
            standby=standby,
            lease_s=LEASE_S,
            extra_args=[
                "--heartbeat-timeout-s",
                str(HEARTBEAT_TIMEOUT_S),
                "--payload-sweep-s",
                str(PAYLOAD_SWEEP_S),
            ],
        )
        await proc.start()
        self.brokers.append(proc)
        return proc

    async def _node(self, *args: str) -> asyncio.subprocess.Process:
        return await asyncio.create_subprocess_exec(
            sys.executable,
            NODE,
            *args,
            stdin=asyncio.subprocess.DEVNULL,
            stdout=asyncio.subprocess.DEVNULL,
            stderr=self._stderr,
            start_new_session=True,
        )

    async def _worker(self) -> None:
        self._worker_count += 1
        name = f"w{self._worker_count}"
        self.workers[name] = await self._node("worker", self.url, name, str(self.log(name)))

    def log(self, name: str) -> Path:
        return self.workdir / f"{name}.jsonl"

    async def start(self) -> None:
        await self._broker(standby=False)
        await self._broker(standby=True)
        for i in range(PRODUCERS):
            name = f"p{i}"
            self.producers.append(
                await self._node(
                    "producer", self.url, name, str(JOBS_PER_PRODUCER), str(self.log(name))
                )
            )
        for _ in range(WORKERS):
            await self._worker()

    async def supervise(self) -> None:
        """Keep two brokers and three workers running (restart what died)."""
        while not self._stopping:
            for proc in list(self.brokers):
                if proc.returncode is not None:
                    self.brokers.remove(proc)
            while len(self.brokers) < 2 and not self._stopping:
                await self._broker(standby=True)
            for name, proc in list(self.workers.items()):
                if proc.returncode is not None:
                    del self.workers[name]
                    await self._worker()
            await asyncio.sleep(0.3)

    # -- faults -----------------------------------------------------------------------

    async def active(self, doc_store: Storage, timeout_s: float = 60.0) -> BrokerProcess:
        """The broker process the document names, once one serves."""
        deadline = asyncio.get_running_loop().time() + timeout_s
        while True:
            with contextlib.suppress(OsqueueError):
                owner = decode((await doc_store.read(DOCUMENT_KEY)).data).broker
                for proc in self.brokers:
                    if (
                        owner is not None
                        and proc.address == owner.address
                        and proc.returncode is None
                    ):
                        return proc
            if asyncio.get_running_loop().time() > deadline:
                words = [(b.address, b.returncode, b.last_words()) for b in self.brokers]
                raise AssertionError(f"no broker took over the queue; brokers: {words}")
            await asyncio.sleep(0.2)

    def _signal(self, pid: int | None, sig: signal.Signals, what: str) -> None:
        if pid is None:
            return
        with contextlib.suppress(ProcessLookupError):
            os.kill(pid, sig)
            self.signals[what] += 1

    async def freeze(self, pid: int | None, seconds: float, what: str) -> None:
        self._signal(pid, signal.SIGSTOP, what)
        try:
            await asyncio.sleep(seconds)
        finally:
            self._signal(pid, signal.SIGCONT, what + "-resumed")

    async def busy_worker(self) -> tuple[str, asyncio.subprocess.Process]:
        """A worker that holds a job right now (claimed, not finished)."""
        for _ in range(50):
            for name, proc in self.rng.sample(list(self.workers.items()), len(self.workers)):
                held: set[str] = set()
                for event in read_log(self.log(name)):
                    if event["ev"] == "claim":
                        held.add(event["id"])
                    elif event["ev"] in ("complete", "fail", "lost"):
                        held.discard(event["id"])
                if held:
                    return name, proc
            await asyncio.sleep(0.1)
        name = self.rng.choice(sorted(self.workers))
        return name, self.workers[name]

    async def round(self, index: int, doc_store: Storage) -> None:
        active = await self.active(doc_store)
        _, victim = await self.busy_worker()
        self._signal(victim.pid, signal.SIGKILL, "worker-sigkill")
        sleeper = self.rng.choice([p for p in self.workers.values() if p is not victim])
        frozen_worker = asyncio.ensure_future(
            self.freeze(sleeper.pid, HEARTBEAT_TIMEOUT_S + 1.0, "worker-sigstop")
        )
        if index % 2 == 0:
            self._signal(active.pid, signal.SIGKILL, "broker-sigkill")
        else:  # frozen past its lease: a standby takes over; it wakes up stale
            await self.freeze(active.pid, 2 * LEASE_S + 1.0, "broker-sigstop")
        await frozen_worker
        await self.active(doc_store)  # someone serves again

    async def stop(self) -> None:
        self._stopping = True
        for proc in [*self.workers.values(), *self.producers]:
            if proc.returncode is None:
                with contextlib.suppress(ProcessLookupError):
                    proc.kill()
            await proc.wait()
        for broker in self.brokers:
            await broker.stop()
        self._stderr.close()


def read_log(path: Path) -> Iterator[dict[str, object]]:
    if not path.exists():
        return
    for line in path.read_text().splitlines():
        if line.endswith("}"):
            yield json.loads(line)


async def _archive(store: Storage) -> list[dict[str, object]]:
    records = []
    for key in await store.list("archive/"):
        for line in (await store.get(key)).splitlines():
            records.append(json.loads(line))
    return records


async def _drained(store: Storage, acked: set[str]) -> Document | None:
    doc = decode((await store.read(DOCUMENT_KEY)).data)
    if any(job_id in doc.jobs and doc.jobs[job_id].status != "dead" for job_id in acked):
        return None
    return doc


def _check(workdir: Path, archive: list[dict[str, object]], doc: Document) -> Figures:
    events = [e for path in sorted(workdir.glob("*.jsonl")) for e in read_log(path)]
    sent = {str(e["id"]) for e in events if e["ev"] == "sent"}
    acked = {str(e["id"]) for e in events if e["ev"] == "ack"}
    archived = Counter(str(r["id"]) for r in archive)
    dead = {j.id for j in doc.jobs.values() if j.status == "dead"}
    completed: dict[str, set[int]] = defaultdict(set)
    holders: dict[int, set[tuple[str, str]]] = defaultdict(set)
    for e in events:
        if e["ev"] == "complete":
            completed[str(e["id"])].add(int(e["token"]))  # type: ignore[call-overload]
        elif e["ev"] == "claim":
            holders[int(e["token"])].add((str(e["id"]), str(e["who"])))  # type: ignore[call-overload]
    lost = sorted(acked - set(archived) - dead)
    twice = sorted(j for j, n in archived.items() if n > 1)
    assert not lost, f"I1: {len(lost)} acknowledged jobs lost: {lost[:10]}"
    assert set(archived) <= sent, (
        f"I2: archived but never pushed: {sorted(set(archived) - sent)[:10]}"
    )
    assert set(doc.jobs) <= sent, "I2: a job in the document was never pushed"
    assert not twice, f"I2/I3: archived more than once: {twice[:10]}"
    multi = {j: t for j, t in completed.items() if len(t) > 1}
    assert not multi, f"I3: completions accepted under several tokens: {multi}"
    tokens_of = {str(r["id"]): r["token"] for r in archive}
    wrong = {j: (t, tokens_of.get(j)) for j, t in completed.items() if tokens_of.get(j) not in t}
    assert not wrong, f"I3: completion accepted but archived under another token: {wrong}"
    shared = {t: h for t, h in holders.items() if len(h) > 1}
    assert not shared, f"I4: tokens handed out twice: {shared}"
    bad = [e for e in events if e["ev"] == "bad-payload"]
    assert not bad, f"payloads delivered wrong: {bad[:3]}"
    return Figures(
        acknowledged=len(acked),
        archived=len(archived),
        dead=len(dead & acked),
        lost=len(lost),
        completed_twice=len(twice) + len(multi),
    )


async def _payloads_checked(store: Storage, doc: Document) -> int:
    """Every job still in the document has its payload object; the planted orphans
    are deleted (waits for the sweep).  Returns how many payload objects are left."""
    deadline = asyncio.get_running_loop().time() + DRAIN_LIMIT_S
    while set(PLANTED) & set(await store.list("payloads/")):
        assert asyncio.get_running_loop().time() < deadline, "the payload sweep never ran"
        await asyncio.sleep(0.5)
    keys = set(await store.list("payloads/"))
    missing = [
        (job.id, job.payload_ref)
        for job in doc.jobs.values()
        if job.payload_ref is not None and job.payload_ref not in keys
    ]
    assert not missing, f"I1: jobs whose payload object is gone: {missing[:5]}"
    return len(keys)


async def _run(url: str, checker: Storage, workdir: Path, proxy: FaultyProxy | None) -> Figures:
    for key in PLANTED:
        await checker.put(key, b"an upload whose push never committed")
    cluster = Cluster(url, workdir, seed=len(url))
    await cluster.start()
    supervisor = asyncio.ensure_future(cluster.supervise())
    try:
        if proxy is not None:
            proxy.enabled = True
        for index in range(ROUNDS):
            await cluster.round(index, checker)
        if proxy is not None:
            proxy.enabled = False
        for producer in cluster.producers:
            await asyncio.wait_for(producer.wait(), DRAIN_LIMIT_S)
        acked = {
            str(e["id"])
            for i in range(PRODUCERS)
            for e in read_log(cluster.log(f"p{i}"))
            if e["ev"] == "ack"
        }
        deadline = asyncio.get_running_loop().time() + DRAIN_LIMIT_S
        doc = None
        while doc is None:
            assert asyncio.get_running_loop().time() < deadline, (
                f"the queue did not drain; brokers: {[b.last_words() for b in cluster.brokers]};"
                f" nodes: {(workdir / 'nodes.err').read_text()[-2000:]}"
            )
            await asyncio.sleep(0.5)
            doc = await _drained(checker, acked)
        payload_objects = await _payloads_checked(checker, doc)
    finally:
        supervisor.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await supervisor
        await cluster.stop()
    figures = _check(workdir, await _archive(checker), doc)
    figures.rounds = ROUNDS
    figures.signals = cluster.signals
    figures.payload_objects = payload_objects
    return figures


def _report(backend: str, figures: Figures, proxy: FaultyProxy | None) -> None:
    line = {
        "chaos": backend,
        "rounds": figures.rounds,
        "acknowledged": figures.acknowledged,
        "archived": figures.archived,
        "dead": figures.dead,
        "lost": figures.lost,
        "completed_twice": figures.completed_twice,
        "payload_objects": figures.payload_objects,
        "signals": dict(figures.signals),
        "proxy_faults": dict(proxy.faults) if proxy else {},
    }
    print(json.dumps(line, sort_keys=True))


async def test_chaos_on_file_storage(tmp_path: Path) -> None:
    queue = tmp_path / "queue"
    queue.mkdir()
    url = f"file://{queue}"
    checker = from_url(url)
    try:
        figures = await _run(url, checker, tmp_path, None)
    finally:
        await checker.close()
    _report("file", figures, None)
    assert figures.acknowledged == PRODUCERS * JOBS_PER_PRODUCER
    assert figures.signals["broker-sigkill"] >= ROUNDS // 2
    assert figures.signals["broker-sigstop"] >= ROUNDS // 2


@pytest.fixture
async def proxied_moto(moto_server: MotoS3Server) -> AsyncIterator[tuple[str, str, FaultyProxy]]:
    proxy = FaultyProxy(moto_server.port, seed=7, drop=0.05, delay=0.08, reset=0.02)
    port = await proxy.start()
    prefix = f"chaos-{os.getpid()}-{random.randrange(1 << 30)}"
    direct = moto_server.url(prefix)
    proxied = direct.replace(f"127.0.0.1%3A{moto_server.port}", f"127.0.0.1%3A{port}")
    assert proxied != direct
    try:
        yield direct, proxied, proxy
    finally:
        await proxy.close()


async def test_chaos_on_s3_through_a_faulty_network(
    tmp_path: Path, proxied_moto: tuple[str, str, FaultyProxy]
) -> None:
    direct, proxied, proxy = proxied_moto
    checker = from_url(direct)
    try:
        figures = await _run(proxied, checker, tmp_path, proxy)
    finally:
        await checker.close()
    _report("s3", figures, proxy)
    assert figures.acknowledged == PRODUCERS * JOBS_PER_PRODUCER
    assert sum(proxy.faults.values()) > 0
