"""The remote client's calls for periodic jobs and queue settings.

:class:`SchedulingRpcs` is the part of :class:`~osqueue.client.remote.RemoteClient`
that offers :class:`~osqueue.api.Scheduling`.  Each call checks its arguments
with the document's own rules first (a bad schedule fails here, naming the
field, without a round trip), then makes one unary RPC, retried like every
call.  A schedule or a setting is safe to send again: the same name or value
applied twice is the same state.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import TypeVar

from osqueue.api import DEFAULT_MAX_ATTEMPTS, CatchUp, QueueSettings, ScheduleInfo
from osqueue.client.remote.connection import Conn
from osqueue.client.remote.failover import Failover
from osqueue.errors import InvalidInput
from osqueue.state.limits import check_settings
from osqueue.state.schedules import check_name, check_paused, check_spec
from osqueue.wire._pb import queue_pb2 as pb
from osqueue.wire.convert import (
    queue_settings_from_pb,
    schedule_info_from_pb,
    schedule_spec_to_pb,
    settings_to_pb,
)

R = TypeVar("R")
Metadata = tuple[tuple[str, str], ...] | None


class SchedulingRpcs:
    """``schedule``, ``unschedule``, ``schedules`` and ``set_queue`` over gRPC."""

    failover: Failover
    _metadata: Metadata
    _unary: Callable[[Callable[[Conn, float], Awaitable[R]]], Awaitable[R]]

    async def schedule(
        self,
        name: str,
        *,
        queue: str,
        payload: bytes = b"",
        cron: str | None = None,
        every_s: float | None = None,
        tz: str | None = None,
        priority: int = 0,
        max_attempts: int = DEFAULT_MAX_ATTEMPTS,
        catch_up: CatchUp = "once",
        paused: bool = False,
    ) -> ScheduleInfo:
        if isinstance(payload, bytearray | memoryview):
            payload = bytes(payload)
        cron, every_s = check_spec(
            name=name,
            queue=queue,
            cron=cron,
            tz=tz,
            every_s=every_s,
            payload=payload,
            priority=priority,
            max_attempts=max_attempts,
            catch_up=catch_up,
            max_payload_bytes=len(payload),  # the broker applies its own limit
        )
        check_paused(paused)
        request = pb.ScheduleRequest(
            schedule=schedule_spec_to_pb(
                name,
                queue=queue,
                payload=payload,
                cron=cron,
                every_s=every_s,
                tz=tz,
                priority=priority,
                max_attempts=max_attempts,
                catch_up=catch_up,
                paused=paused,
            )
        )

        async def attempt(conn: Conn, deadline: float) -> ScheduleInfo:
            response = await conn.stub.Schedule(
                request, timeout=self.failover.attempt_timeout(deadline), metadata=self._metadata
            )
            if not response.HasField("schedule"):
                raise InvalidInput("the broker answered no schedule", field="schedule")
            return schedule_info_from_pb(response.schedule)

        return await self._unary(attempt)

    async def unschedule(self, name: str) -> bool:
        request = pb.UnscheduleRequest(name=check_name(name))

        async def attempt(conn: Conn, deadline: float) -> bool:
            response = await conn.stub.Unschedule(
                request, timeout=self.failover.attempt_timeout(deadline), metadata=self._metadata
            )
            return bool(response.removed)

        return await self._unary(attempt)

    async def schedules(self) -> list[ScheduleInfo]:
        async def attempt(conn: Conn, deadline: float) -> list[ScheduleInfo]:
            response = await conn.stub.ListSchedules(
                pb.ListSchedulesRequest(),
                timeout=self.failover.attempt_timeout(deadline),
                metadata=self._metadata,
            )
            return [schedule_info_from_pb(s) for s in response.schedules]

        return await self._unary(attempt)

    async def set_queue(
        self,
        queue: str,
        *,
        rate_per_s: float | None = None,
        burst: int | None = None,
        max_claimed: int | None = None,
        max_claimed_per_group: int | None = None,
        paused: bool | None = None,
        result_ttl_s: float | None = None,
        remove: bool = False,
    ) -> QueueSettings:
        fields = {
            "rate_per_s": rate_per_s,
            "burst": burst,
            "max_claimed": max_claimed,
            "max_claimed_per_group": max_claimed_per_group,
            "paused": paused,
            "result_ttl_s": result_ttl_s,
        }
        check_settings(queue, **fields)  # type: ignore[arg-type]
        request = pb.SetQueueRequest(
            settings=settings_to_pb(queue, **fields),  # type: ignore[arg-type]
            remove=remove,
        )

        async def attempt(conn: Conn, deadline: float) -> QueueSettings:
            response = await conn.stub.SetQueue(
                request, timeout=self.failover.attempt_timeout(deadline), metadata=self._metadata
            )
            return queue_settings_from_pb(response.settings)

        return await self._unary(attempt)
