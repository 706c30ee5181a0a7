"""Pushing a write task's jobs: in batches, through the queue's broker.

``push_remote`` finds the broker through the queue document (or goes straight
to ``address``) with the gRPC client; ``push_embedded`` starts an in-process
broker when no live broker holds the queue (and uses the live one otherwise).
A job whose idempotency key is already live is counted as a duplicate and
skipped (or fails the write, with ``on_duplicate_key=error``).
"""

from __future__ import annotations

import itertools
from collections.abc import Iterable, Sequence
from dataclasses import dataclass

from osqueue.api import NewJob, QueueClient
from osqueue.errors import BrokerUnavailable, DuplicateKey, OsqueueError

from .options import WriteOptions


@dataclass(frozen=True, slots=True)
class PushCounts:
    rows: int = 0
    pushed: int = 0
    duplicates: int = 0
    calls: int = 0

    def __add__(self, other: PushCounts) -> PushCounts:
        return PushCounts(
            rows=self.rows + other.rows,
            pushed=self.pushed + other.pushed,
            duplicates=self.duplicates + other.duplicates,
            calls=self.calls + other.calls,
        )


async def _results(client: QueueClient, batch: Sequence[NewJob]) -> list[str | OsqueueError]:
    per_job = getattr(client, "push_results", None)
    if per_job is not None:
        results: list[str | OsqueueError] = await per_job(batch)
        return results
    return list(await client.push_many(batch))


async def push_batches(
    client: QueueClient, jobs: Iterable[NewJob], options: WriteOptions
) -> PushCounts:
    """Push ``jobs`` ``options.batch_size`` at a time; one call per batch."""
    counts = PushCounts()
    source = iter(jobs)
    while batch := list(itertools.islice(source, options.batch_size)):
        pushed = duplicates = 0
        for job, result in zip(batch, await _results(client, batch), strict=True):
            if isinstance(result, DuplicateKey) and options.on_duplicate_key == "skip":
                duplicates += 1
            elif isinstance(result, OsqueueError):
                result.add_note(f"while pushing job {job.id} (key {job.key!r})")
                raise result
            else:
                pushed += 1
        counts = counts + PushCounts(len(batch), pushed, duplicates, 1)
    return counts


async def _open(options: WriteOptions, *, embedded: bool) -> QueueClient:
    from osqueue.client.remote import RemoteConfig, connect

    config = RemoteConfig(
        token=options.token,
        tls_ca=options.tls_ca,
        tls_fingerprint=options.tls_fingerprint,
        allow_plaintext_token=options.allow_plaintext_token,
        address=options.address,
        timeout_s=max(options.broker_wait_s, 0.1),
    )
    client: QueueClient = await connect(options.url, embedded=embedded, config=config)
    return client


async def _push(options: WriteOptions, jobs: Iterable[NewJob], *, embedded: bool) -> PushCounts:
    client = await _open(options, embedded=embedded)
    try:
        return await push_batches(client, jobs, options)
    except BrokerUnavailable as exc:
        raise BrokerUnavailable(
            f"no broker serves {options.url!r} (waited {options.broker_wait_s:g} s): start "
            "one with `osqueue broker URL`, or set option embedded=true"
        ) from exc
    finally:
        await client.close()


async def push_remote(options: WriteOptions, jobs: Iterable[NewJob]) -> PushCounts:
    """Push through the live broker (found in the queue document, or at ``address``)."""
    return await _push(options, jobs, embedded=False)


async def push_embedded(options: WriteOptions, jobs: Iterable[NewJob]) -> PushCounts:
    """Push through an in-process broker, or the live broker if one holds the queue."""
    return await _push(options, jobs, embedded=True)
