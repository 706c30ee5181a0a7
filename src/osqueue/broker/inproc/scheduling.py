"""The in-process client's calls for periodic jobs and queue settings.

:class:`SchedulingCalls` is the part of :class:`~osqueue.broker.inproc.client.LocalClient`
that offers :class:`~osqueue.api.Scheduling`: each call is one op of the
broker's next group commit (:class:`~osqueue.state.PutSchedule`,
:class:`~osqueue.state.RemoveSchedule`, :class:`~osqueue.state.SetQueue`),
answered once that write is durable; ``schedules()`` reads the held document.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from osqueue.api import DEFAULT_MAX_ATTEMPTS, CatchUp, QueueSettings, ScheduleInfo
from osqueue.errors import InvalidInput, OsqueueError
from osqueue.state import (
    Counted,
    PutSchedule,
    QueueSet,
    RemoveSchedule,
    Result,
    Scheduled,
    SetQueue,
)
from osqueue.state.limits import settings_info
from osqueue.state.schedules import schedule_info

if TYPE_CHECKING:
    from osqueue.broker.inproc.host import BrokerHost


def _answer(result: Result, kind: type[object], what: str) -> object:
    if isinstance(result, OsqueueError):
        raise result.with_traceback(None)
    if not isinstance(result, kind):
        raise InvalidInput(f"unexpected result {type(result).__name__} for {what}", field="op")
    return result


class SchedulingCalls:
    """``schedule``, ``unschedule``, ``schedules`` and ``set_queue`` on a broker here."""

    broker: BrokerHost

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
        op = PutSchedule(
            name=name,
            queue=queue,
            cron=cron,
            tz=tz,
            every_s=every_s,
            payload=payload,
            priority=priority,
            max_attempts=max_attempts,
            catch_up=catch_up,
            paused=paused,
        )
        result = _answer(await self.broker.add_op(op), Scheduled, "schedule")
        assert isinstance(result, Scheduled)
        return schedule_info(result.schedule)

    async def unschedule(self, name: str) -> bool:
        result = _answer(await self.broker.add_op(RemoveSchedule(name)), Counted, "unschedule")
        assert isinstance(result, Counted)
        return result.n > 0

    async def schedules(self) -> list[ScheduleInfo]:
        doc = self.broker.document
        return [schedule_info(s) for s in sorted(doc.schedules, key=lambda s: s.name)]

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
        limits = (rate_per_s, burst, max_claimed, max_claimed_per_group, paused, result_ttl_s)
        op = SetQueue(queue, *limits, remove)
        result = _answer(await self.broker.add_op(op), QueueSet, "set_queue")
        assert isinstance(result, QueueSet)
        return settings_info(result.queue, result.settings)

    async def queue_settings(self) -> list[QueueSettings]:
        """Every queue that has settings in force, by name."""
        doc = self.broker.document
        return [settings_info(q, s) for q, s in sorted(doc.queue_settings.items())]
