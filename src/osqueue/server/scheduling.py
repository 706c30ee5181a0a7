"""The scheduling RPCs of ``osqueue.v1.Queue``: Schedule, Unschedule, ListSchedules
and SetQueue.

:class:`SchedulingRpcs` is the part of :class:`~osqueue.server.service.QueueService`
that serves them: each checks the request's bounds, then calls the client's
:class:`~osqueue.api.Scheduling` methods (which apply the document's rules and
name the field at fault).  A client without them answers ``UNIMPLEMENTED``.
"""

from __future__ import annotations

from typing import Any

import grpc

from osqueue.api import QueueClient, Scheduling
from osqueue.server.limits import Limits, RequestChecker
from osqueue.wire._pb import queue_pb2 as pb
from osqueue.wire.convert import (
    queue_settings_to_pb,
    schedule_info_to_pb,
    schedule_spec_from_pb,
    settings_args_from_pb,
)

Context = Any  # grpc.aio.ServicerContext (grpc ships no type stubs)


class SchedulingRpcs:
    """The scheduling handlers; the service supplies ``_client``, ``check`` and ``limits``."""

    limits: Limits
    check: RequestChecker
    _client: QueueClient | None

    async def _scheduling(self, context: Context) -> Scheduling:
        client = self._client  # the handler checked that a client is attached
        if isinstance(client, Scheduling):
            return client
        await context.abort(
            grpc.StatusCode.UNIMPLEMENTED, "this broker's client has no schedules or settings"
        )
        raise AssertionError("context.abort returned")  # pragma: no cover

    async def schedule(self, request: pb.ScheduleRequest, context: Context) -> pb.ScheduleResponse:
        spec = schedule_spec_from_pb(self.check.schedule(request))
        admin = await self._scheduling(context)
        info = await admin.schedule(spec.pop("name"), **spec)
        return pb.ScheduleResponse(schedule=schedule_info_to_pb(info))

    async def unschedule(
        self, request: pb.UnscheduleRequest, context: Context
    ) -> pb.UnscheduleResponse:
        self.check.text(request.name, "name", self.limits.max_id_chars)
        admin = await self._scheduling(context)
        return pb.UnscheduleResponse(removed=await admin.unschedule(request.name))

    async def list_schedules(
        self, request: pb.ListSchedulesRequest, context: Context
    ) -> pb.ListSchedulesResponse:
        admin = await self._scheduling(context)
        infos = await admin.schedules()
        return pb.ListSchedulesResponse(schedules=[schedule_info_to_pb(i) for i in infos])

    async def set_queue(self, request: pb.SetQueueRequest, context: Context) -> pb.SetQueueResponse:
        settings = request.settings
        self.check.queue(settings.queue, "queue")
        admin = await self._scheduling(context)
        result = await admin.set_queue(
            settings.queue, **settings_args_from_pb(settings), remove=request.remove
        )
        return pb.SetQueueResponse(settings=queue_settings_to_pb(result))
