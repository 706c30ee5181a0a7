"""The remote client's batched calls: one :class:`~osqueue.client.batcher.Batcher` per RPC.

Pushes, heartbeats, completions, releases, failures and cancels made
concurrently coalesce into one batch RPC each (see
:mod:`osqueue.client.batcher`).  Each batch goes out through
:meth:`Failover.batch <osqueue.client.remote.failover.Failover.batch>`, which
retries the items the broker did not take; the senders here build the
request, read the per-item Statuses and turn each into the caller's result.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import Any

from osqueue.client.batcher import Batcher
from osqueue.client.remote.config import RemoteConfig
from osqueue.client.remote.connection import Conn
from osqueue.client.remote.failover import Failover
from osqueue.client.remote.failures import OK, holder_result
from osqueue.errors import OsqueueError
from osqueue.wire._pb import queue_pb2 as pb
from osqueue.wire._pb import queue_pb2_grpc as pb_grpc
from osqueue.wire.status import from_status

Metadata = tuple[tuple[str, str], ...] | None
#: Sends a batch of the holder's calls (heartbeat, complete, release); one outcome per job.
HolderSend = Callable[[list[pb.JobRef]], Awaitable[list[BaseException | None]]]


def new_job_size(job: pb.NewJob) -> int:
    """What a push adds to its batch's bytes (``max_batch_bytes``)."""
    return len(job.payload) + len(job.id) + len(job.queue) + len(job.key) + 32


class Batches:
    """The six batchers of one client, and how each sends a batch."""

    def __init__(self, failover: Failover, config: RemoteConfig, metadata: Metadata) -> None:
        self._failover = failover
        self._metadata = metadata
        common: dict[str, Any] = {
            "max_items": config.max_batch,
            "max_bytes": config.max_batch_bytes,
            "max_in_flight": config.max_in_flight_batches,
        }
        self.pushes: Batcher[pb.NewJob, str] = Batcher(
            self._send_push, name="push", size_of=new_job_size, **common
        )
        self.heartbeats: Batcher[pb.JobRef, None] = Batcher(
            self._holder_sender(lambda s: s.Heartbeat, "heartbeat", maybe_applies=False),
            name="heartbeat",
            **common,
        )
        self.completions: Batcher[pb.JobRef, None] = Batcher(
            self._holder_sender(lambda s: s.Complete, "complete"), name="complete", **common
        )
        self.releases: Batcher[pb.JobRef, None] = Batcher(
            self._holder_sender(lambda s: s.Release, "release"), name="release", **common
        )
        self.failures: Batcher[pb.FailItem, None] = Batcher(
            self._send_fail, name="fail", size_of=lambda item: len(item.error), **common
        )
        self.cancels: Batcher[str, None] = Batcher(self._send_cancel, name="cancel", **common)

    async def close(self) -> None:
        """Send what is queued and wait for the batches in flight; take nothing more."""
        for batcher in (
            self.pushes,
            self.heartbeats,
            self.completions,
            self.releases,
            self.failures,
            self.cancels,
        ):
            await batcher.close()

    async def _send_push(self, items: list[pb.NewJob]) -> list[str | BaseException]:
        async def send(conn: Conn, batch: list[pb.NewJob], timeout: float) -> list[pb.Status]:
            response = await conn.stub.Push(
                pb.PushRequest(jobs=batch), timeout=timeout, metadata=self._metadata
            )
            return [result.status for result in response.results]

        out: list[str | BaseException] = []
        for item, (outcome, _) in zip(items, await self._failover.batch(items, send), strict=True):
            if isinstance(outcome, OsqueueError):
                out.append(outcome)
            elif outcome.code == OK:
                out.append(item.id)
            else:
                out.append(from_status(outcome))
        return out

    def _holder_sender(
        self,
        rpc: Callable[[pb_grpc.QueueAsyncStub], Any],
        what: str,
        *,
        maybe_applies: bool = True,
    ) -> HolderSend:
        """The sender of one of the holder's calls (``rpc`` picks the stub method).

        ``maybe_applies=False`` (heartbeats): a lost answer does not make a
        later LeaseLost a MaybeCommitted, since a heartbeat moves no job."""

        async def send(conn: Conn, batch: list[pb.JobRef], timeout: float) -> list[pb.Status]:
            response = await rpc(conn.stub)(
                pb.JobRefsRequest(jobs=batch), timeout=timeout, metadata=self._metadata
            )
            return list(response.results)

        async def run(items: list[pb.JobRef]) -> list[BaseException | None]:
            outcomes = await self._failover.batch(items, send)
            return [
                holder_result(what, ref.id, outcome, maybe and maybe_applies)
                for ref, (outcome, maybe) in zip(items, outcomes, strict=True)
            ]

        return run

    async def _send_fail(self, items: list[pb.FailItem]) -> list[BaseException | None]:
        async def send(conn: Conn, batch: list[pb.FailItem], timeout: float) -> list[pb.Status]:
            response = await conn.stub.Fail(
                pb.FailRequest(items=batch), timeout=timeout, metadata=self._metadata
            )
            return list(response.results)

        outcomes = await self._failover.batch(items, send)
        return [
            holder_result("fail", item.job.id, outcome, maybe)
            for item, (outcome, maybe) in zip(items, outcomes, strict=True)
        ]

    async def _send_cancel(self, items: list[str]) -> list[BaseException | None]:
        async def send(conn: Conn, batch: list[str], timeout: float) -> list[pb.Status]:
            response = await conn.stub.Cancel(
                pb.CancelRequest(ids=batch), timeout=timeout, metadata=self._metadata
            )
            return list(response.results)

        outcomes = await self._failover.batch(items, send)
        return [
            holder_result("cancel", job_id, outcome, maybe)
            for job_id, (outcome, maybe) in zip(items, outcomes, strict=True)
        ]
