"""``osqueue bench --remote``: the broker in its own process, the clients here, over gRPC.

The broker is ``osqueue broker <storage> --listen 127.0.0.1:0`` in a child
process (:class:`~osqueue.bench.broker_process.BrokerProcess`); this process
runs the same closed-loop clients as the in-process benchmark through
``osqueue.connect(storage)``, whose calls made concurrently coalesce into
batch RPCs.  ``commits`` is the number of document versions written during
the timed loop (read through ``stats()`` before and after; lease renewals
included, which a default lease of 10 s makes rare).  The broker is stopped
with SIGTERM at the end, so it drains and clears its address.
"""

from __future__ import annotations

from osqueue.bench.broker_process import READY_TIMEOUT_S, BrokerProcess
from osqueue.bench.config import BenchConfig, BenchResult
from osqueue.bench.workload import preload, result_of, run_workload
from osqueue.client.remote import RemoteConfig, connect
from osqueue.errors import InvalidInput
from osqueue.storage import from_url

_LATENCY_PREFIX = "latency+"


def check_shareable(storage: str) -> None:
    """Refuse a storage URL other processes cannot open (memory:// lives in one process)."""
    inner = storage.strip()
    while inner.lower().startswith(_LATENCY_PREFIX):
        inner = inner[len(_LATENCY_PREFIX) :]
    if inner.lower().startswith("memory:"):
        raise InvalidInput(
            f"{storage!r} is in-process memory, which a broker in another process cannot "
            "open; use file:///dir or an object store with --remote",
            field="storage",
        )


async def run_remote_bench(
    config: BenchConfig,
    *,
    client_config: RemoteConfig | None = None,
    ready_timeout_s: float = READY_TIMEOUT_S,
) -> BenchResult:
    """Start a broker process on ``config.storage``, preload, run the loop over gRPC, report."""
    check_shareable(config.storage)
    store = from_url(config.storage)  # a URL that does not parse fails here, before spawning
    url = store.url
    await store.close()
    payload = b"x" * config.payload_bytes
    async with BrokerProcess(config.storage) as broker:
        await broker.start(ready_timeout_s)
        async with connect(config.storage, config=client_config or RemoteConfig()) as client:
            await preload(client, config.preload, payload, config.queue)
            version_before = (await client.stats()).version
            figures = await run_workload(
                client,
                clients=config.clients,
                jobs=config.jobs,
                batch=config.batch,
                duration_s=config.duration_s,
                payload=payload,
                queue=config.queue,
            )
            version_after = (await client.stats()).version
    commits = version_after - version_before
    return result_of(figures, commits=commits, storage=url, clients=config.clients, remote=True)
