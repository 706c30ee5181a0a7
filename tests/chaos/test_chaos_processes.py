"""Real processes, real signals: brokers, standbys, producers and workers as OS processes.

On ``file://``, moto's S3 and Azurite.  Two brokers (one serving, one
standing by), two producers and three workers run as separate processes; a
supervisor restarts brokers and workers that die, as systemd or Kubernetes
would.  Every client call crosses a proxy in front of its broker; on the
cloud backends every storage call crosses a proxy too.  The rounds
(``rounds.py``) kill, freeze and clock-step the serving broker, kill
standbys, producers with pushes in flight and workers holding jobs, freeze
workers, and fault the client and storage networks; each round asserts who
serves after it.  Then the producers finish, the queue drains, and
``checks.py`` checks I1 to I5 on the logs, the archive and the stored
version chain (on S3, the bucket's own version history).

Each backend runs the seeds listed for it in ``seeds.py`` (``--chaos-seed S``
runs ``S`` on every backend, ``--chaos-seed random`` a new one; a failure
prints it) and ``--chaos-rounds`` the rounds per backend (4; ``make chaos``
runs more, on a fresh seed).
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import random
import uuid
from collections import Counter
from collections.abc import AsyncIterator
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

import pytest
from chaos_proxy import FaultyProxy
from checks import ChainFigures, JobFigures, check_chain, check_jobs
from cluster import Cluster, DocRecorder, LogTail
from rounds import OTHER_KINDS, TAKEOVER_KINDS, TAKES_OVER, RoundReport, Rounds, schedule
from seeds import DEFAULT_ROUNDS, SEEDS
from servers import AzuriteServer, MotoS3Server

from osqueue.state import Document
from osqueue.storage import from_url
from osqueue.storage.port import Storage

pytestmark = [pytest.mark.chaos]

#: objects under payloads/ that no job uses, written before the run: the sweep's
#: work (orphans of a real crash between upload and commit are rarer)
PLANTED = tuple(f"payloads/planted-{i}=01JD000000000000000000000{i}" for i in range(3))
DRAIN_LIMIT_S = 120.0
#: background storage faults during takeover rounds (cloud backends)
STORAGE_FAULTS = {"drop": 0.03, "delay": 0.05, "reset": 0.01}
CHAOS_BUCKET = "osqueue-chaos"
#: which third of the default rounds each backend runs (``schedule``'s ``backend``)
INDEX = {"file": 0, "s3": 1, "azure": 2}


@dataclass
class Backend:
    name: str
    #: 0, 1, 2: which third of the default rounds this backend runs
    index: int
    #: what the processes use (through the storage proxy on the cloud backends)
    url: str
    #: the same storage without the proxy, for the checker and the recorder
    direct_url: str
    storage_proxy: FaultyProxy | None = None
    #: S3 only: the server and the key whose version history is the stored chain
    moto: MotoS3Server | None = None
    document_key: str = ""


@dataclass
class Figures:
    backend: str
    seed: int
    rounds: list[RoundReport]
    jobs: JobFigures
    chain: ChainFigures
    signals: Counter[str]
    storage_faults: dict[str, int] = field(default_factory=dict)
    client_faults: dict[str, int] = field(default_factory=dict)
    payload_objects: int = 0

    def line(self) -> str:
        return json.dumps(
            {
                "chaos": self.backend,
                "seed": self.seed,
                "rounds": [f"{r.kind}: {r.victim} ({r.detail})" for r in self.rounds],
                "jobs": {k: v for k, v in asdict(self.jobs).items() if k != "events"},
                "chain": asdict(self.chain),
                "signals": dict(self.signals),
                "storage_faults": self.storage_faults,
                "client_faults": self.client_faults,
                "payload_objects": self.payload_objects,
            },
            sort_keys=True,
        )


def _proxied(url: str, port: int, proxy_port: int) -> str:
    proxied = url.replace(f"127.0.0.1%3A{port}", f"127.0.0.1%3A{proxy_port}")
    assert proxied != url
    return proxied


@contextlib.asynccontextmanager
async def _cloud_backend(
    name: str, index: int, server: MotoS3Server | AzuriteServer, seed: int
) -> AsyncIterator[Backend]:
    proxy = FaultyProxy(server.port, seed=seed, **STORAGE_FAULTS)
    port = await proxy.start()
    prefix = f"chaos-{uuid.uuid4().hex[:12]}"
    try:
        if isinstance(server, MotoS3Server):
            server.create_bucket(CHAOS_BUCKET)
            server.enable_versioning(CHAOS_BUCKET)
            direct = server.url(prefix).replace(f"s3://{server.bucket}/", f"s3://{CHAOS_BUCKET}/")
            yield Backend(
                name,
                index,
                _proxied(direct, server.port, port),
                direct,
                proxy,
                server,
                f"{prefix}/queue.json",
            )
        else:
            direct = server.url(prefix)
            yield Backend(name, index, _proxied(direct, server.port, port), direct, proxy)
    finally:
        await proxy.close()


async def _archive(store: Storage) -> list[dict[str, Any]]:
    records = []
    for key in await store.list("archive/"):
        for line in (await store.get(key)).splitlines():
            records.append(json.loads(line))
    return records


async def _payloads_checked(store: Storage, doc: Document) -> int:
    """Every job still in the document has its payload object; the planted orphans
    are deleted (waits for the sweep).  Returns how many payload objects are left."""
    deadline = asyncio.get_running_loop().time() + DRAIN_LIMIT_S
    while set(PLANTED) & set(await store.list("payloads/")):
        assert asyncio.get_running_loop().time() < deadline, "the payload sweep never ran"
        await asyncio.sleep(0.5)  # the sweep runs every 1.5 s in the brokers
    keys = set(await store.list("payloads/"))
    missing = [
        (job.id, job.payload_ref)
        for job in doc.jobs.values()
        if job.payload_ref is not None and job.payload_ref not in keys
    ]
    assert not missing, f"I1: jobs whose payload object is gone: {missing[:5]}"
    return len(keys)


def _events(workdir: Path, prefix: str) -> list[dict[str, Any]]:
    return [e for p in sorted(workdir.glob(f"{prefix}*.jsonl")) for e in LogTail(p).refresh()]


async def _drained(recorder: DocRecorder, workdir: Path) -> Document:
    """Wait until no acknowledged job is left in the document but dead ones."""
    acked = {str(e["id"]) for e in _events(workdir, "p") if e["ev"] == "ack"}

    def drained(_: object) -> bool:
        doc = recorder.doc
        return doc is not None and not any(
            job_id in doc.jobs and doc.jobs[job_id].status != "dead" for job_id in acked
        )

    await recorder.wait_for("the queue to drain", drained, DRAIN_LIMIT_S)
    assert recorder.doc is not None
    return recorder.doc


async def run_chaos(backend: Backend, workdir: Path, seed: int, rounds: int) -> Figures:
    checker = from_url(backend.direct_url)
    for key in PLANTED:
        await checker.put(key, b"an upload whose push never committed")
    rng = random.Random(f"{seed}-{backend.name}")
    cluster = Cluster(backend.url, workdir, rng)
    recorder = DocRecorder(checker)
    runner = Rounds(
        cluster, recorder, backend.storage_proxy, rng, paused_writer_blocks=backend.name == "file"
    )
    kinds = schedule(seed, backend.index, rounds, storage_faults=backend.storage_proxy is not None)
    reports: list[RoundReport] = []
    supervisor: asyncio.Future[None] | None = None
    try:
        await cluster.start()
        recorder.start()
        supervisor = asyncio.ensure_future(cluster.supervise())
        for index, kind in enumerate(kinds):
            reports.append(await runner.run(index, kind))
        await cluster.finish_producers(DRAIN_LIMIT_S)
        doc = await _drained(recorder, workdir)
        payload_objects = await _payloads_checked(checker, doc)
    finally:
        if supervisor is not None:
            supervisor.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await supervisor
        await cluster.stop()
        await recorder.stop()
    await recorder.read_once()  # the last version: the brokers' graceful stops
    assert recorder.doc is not None
    stored = None
    if backend.moto is not None:
        stored = backend.moto.object_versions(CHAOS_BUCKET, backend.document_key)
    landed, chain = check_chain(
        recorder.observations,
        _events(workdir, "b"),
        recorder_reads=recorder.reads,
        stored=stored,
    )
    jobs = check_jobs(
        [*_events(workdir, "p"), *_events(workdir, "w")],
        await _archive(checker),
        recorder.doc,
        landed,
    )
    await checker.close()
    proxy = backend.storage_proxy
    client: Counter[str] = Counter()
    for node in cluster.brokers.values():
        client.update(node.proxy.faults)
    return Figures(
        backend.name,
        seed,
        reports,
        jobs,
        chain,
        cluster.signals,
        dict(proxy.faults) if proxy else {},
        dict(client),
        payload_objects,
    )


def _assert_figures(figures: Figures, rounds: int) -> None:
    print(figures.line())
    assert len(figures.rounds) == rounds
    assert figures.jobs.acknowledged == figures.jobs.sent > 0
    assert figures.chain.versions > 0
    takeovers = sum(r.kind in TAKES_OVER for r in figures.rounds)
    assert figures.chain.takeovers >= takeovers  # each takeover round moved the epoch


@pytest.fixture
def file_backend(tmp_path: Path) -> Backend:
    queue = tmp_path / "queue"
    queue.mkdir()
    return Backend("file", INDEX["file"], queue.as_uri(), queue.as_uri())


@pytest.fixture
async def s3_backend(moto_server: MotoS3Server, chaos_seed: int) -> AsyncIterator[Backend]:
    async with _cloud_backend("s3", INDEX["s3"], moto_server, chaos_seed) as backend:
        yield backend


@pytest.fixture
async def azure_backend(azurite_server: AzuriteServer, chaos_seed: int) -> AsyncIterator[Backend]:
    async with _cloud_backend("azure", INDEX["azure"], azurite_server, chaos_seed) as backend:
        yield backend


async def test_chaos_on_file_storage(
    tmp_path: Path, file_backend: Backend, chaos_seed: int, chaos_rounds: int
) -> None:
    figures = await run_chaos(file_backend, tmp_path, chaos_seed, chaos_rounds)
    _assert_figures(figures, chaos_rounds)


async def test_chaos_on_s3_through_a_faulty_network(
    tmp_path: Path, s3_backend: Backend, chaos_seed: int, chaos_rounds: int
) -> None:
    figures = await run_chaos(s3_backend, tmp_path, chaos_seed, chaos_rounds)
    _assert_figures(figures, chaos_rounds)
    assert figures.chain.stored_history == figures.chain.versions


async def test_chaos_on_azure_through_a_faulty_network(
    tmp_path: Path, azure_backend: Backend, chaos_seed: int, chaos_rounds: int
) -> None:
    figures = await run_chaos(azure_backend, tmp_path, chaos_seed, chaos_rounds)
    _assert_figures(figures, chaos_rounds)


def test_the_listed_seeds_cover_every_kind() -> None:
    """The first seed listed for each backend: together their rounds cover every kind."""
    covered = {
        kind
        for name, seeds in SEEDS.items()
        for kind in schedule(seeds[0], INDEX[name], DEFAULT_ROUNDS, storage_faults=name != "file")
    }
    assert covered == {*TAKEOVER_KINDS, *OTHER_KINDS}
