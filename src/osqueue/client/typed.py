"""Typed queues: push models, claim decoded models.

``TypedQueue(client, Order, queue="orders")`` encodes payloads as JSON with
msgspec (msgspec ``Struct``, dataclasses, ``TypedDict``... anything msgspec
can type) or with pydantic's own JSON methods for a pydantic ``BaseModel``.
A claimed payload that does not decode as the model is failed at once with an
error naming the model and the field, and is not returned.
"""

from __future__ import annotations

import inspect
import logging
import re
import sys
from collections.abc import Awaitable, Callable, Iterable
from dataclasses import dataclass
from typing import Any, Generic, Protocol, TypeVar, Unpack, cast

import msgspec

from osqueue.api import ClaimOptions, Job, JobOptions, NewJob, QueueClient
from osqueue.errors import InvalidInput

log = logging.getLogger(__name__)

__all__ = ["PayloadCodec", "PayloadDecodeError", "TypedJob", "TypedQueue", "codec_for"]

M = TypeVar("M")
R = TypeVar("R")

_MSGSPEC_PATH = re.compile(r"at `(\$[^`]*)`")
_MSGSPEC_MISSING = re.compile(r"missing required field `([^`]*)`")


class PayloadDecodeError(InvalidInput):
    """A job's payload does not decode as the queue's model."""

    def __init__(self, message: str, *, model: str, field: str | None, job_id: str | None) -> None:
        super().__init__(message, field=None)
        self.field = field
        self.model = model
        self.job_id = job_id


class PayloadCodec(Protocol[M]):
    """Turns a model into payload bytes and back; ``decode`` raises ``PayloadDecodeError``."""

    @property
    def model_name(self) -> str: ...

    def encode(self, value: M) -> bytes: ...

    def decode(self, data: bytes, *, job_id: str | None = None) -> M: ...


class _MsgspecCodec(Generic[M]):
    def __init__(self, model: type[M]) -> None:
        self.model = model
        self.model_name = getattr(model, "__qualname__", repr(model))
        self._encoder = msgspec.json.Encoder()
        self._decoder = msgspec.json.Decoder(model)

    def encode(self, value: M) -> bytes:
        try:
            return self._encoder.encode(value)
        except (TypeError, msgspec.EncodeError) as exc:
            raise InvalidInput(
                f"cannot encode {type(value).__qualname__} as JSON: {exc}", field="value"
            ) from exc

    def decode(self, data: bytes, *, job_id: str | None = None) -> M:
        try:
            return self._decoder.decode(data)
        except msgspec.ValidationError as exc:
            path = _MSGSPEC_PATH.search(str(exc))
            missing = _MSGSPEC_MISSING.search(str(exc))
            field = path.group(1) if path else "$"
            if missing:
                field = f"{field}.{missing.group(1)}"
            raise _decode_error(self.model_name, field, str(exc), job_id) from exc
        except msgspec.DecodeError as exc:
            raise _decode_error(self.model_name, None, str(exc), job_id) from exc


class _PydanticCodec(Generic[M]):
    def __init__(self, model: type[M]) -> None:
        self.model = model
        self.model_name = model.__qualname__
        self._validate = cast(Callable[[bytes], M], model.model_validate_json)  # type: ignore[attr-defined]

    def encode(self, value: M) -> bytes:
        dump = cast(Callable[[], str], value.model_dump_json)  # type: ignore[attr-defined]
        return dump().encode()

    def decode(self, data: bytes, *, job_id: str | None = None) -> M:
        try:
            return self._validate(data)
        except ValueError as exc:  # pydantic.ValidationError subclasses ValueError
            errors = getattr(exc, "errors", None)
            details: list[dict[str, Any]] = errors() if callable(errors) else []
            if details:
                first = details[0]
                field = "$" + "".join(
                    f"[{part}]" if isinstance(part, int) else f".{part}"
                    for part in first.get("loc", ())
                )
                reason = f"{first.get('msg', exc)} - at `{field}`"
                if len(details) > 1:
                    reason += f" (and {len(details) - 1} more)"
            else:
                field, reason = None, str(exc)
            raise _decode_error(self.model_name, field, reason, job_id) from exc


def _decode_error(
    model: str, field: str | None, reason: str, job_id: str | None
) -> PayloadDecodeError:
    where = f"job {job_id}: " if job_id else ""
    return PayloadDecodeError(
        f"{where}payload does not decode as {model}: {reason}",
        model=model,
        field=field,
        job_id=job_id,
    )


def _is_pydantic_model(model: object) -> bool:
    pydantic = sys.modules.get("pydantic")  # a pydantic model means pydantic is imported
    base = getattr(pydantic, "BaseModel", None)
    return isinstance(base, type) and isinstance(model, type) and issubclass(model, base)


def codec_for(model: type[M]) -> PayloadCodec[M]:
    """The codec for ``model``: pydantic's for a ``BaseModel``, msgspec JSON otherwise."""
    if _is_pydantic_model(model):
        return _PydanticCodec(model)
    try:
        return _MsgspecCodec(model)
    except TypeError as exc:
        raise InvalidInput(
            f"{model!r} is not a type msgspec can decode: {exc}", field="model"
        ) from exc


@dataclass(frozen=True, slots=True)
class TypedJob(Generic[M]):
    """A claimed job and its decoded payload."""

    job: Job
    value: M

    @property
    def id(self) -> str:
        return self.job.id


class TypedQueue(Generic[M]):
    """One queue whose payloads are ``model`` values (see the module docstring)."""

    def __init__(
        self,
        client: QueueClient,
        model: type[M],
        queue: str = "default",
        *,
        codec: PayloadCodec[M] | None = None,
    ) -> None:
        if not isinstance(queue, str) or not queue:
            raise InvalidInput("must be a non-empty queue name", field="queue")
        self.client = client
        self.model = model
        self.queue = queue
        self.codec: PayloadCodec[M] = codec or codec_for(model)

    def encode(self, value: M) -> bytes:
        if isinstance(self.model, type) and not isinstance(value, self.model):
            raise InvalidInput(
                f"expected {self.codec.model_name}, got {type(value).__qualname__}", field="value"
            )
        return self.codec.encode(value)

    def decode(self, job: Job) -> M:
        """Decode ``job``'s payload; raises :class:`PayloadDecodeError` naming the field."""
        return self.codec.decode(job.payload, job_id=job.id)

    async def push(self, value: M, **options: Unpack[JobOptions]) -> str:
        """Encode and push ``value`` to this queue; ``options`` are every push's
        (:class:`~osqueue.api.JobOptions`: priority, delay_s, key, max_attempts,
        id, group, after, on_parent_failure, result_ttl_s)."""
        return await self.client.push(self.encode(value), queue=self.queue, **options)

    async def push_many(self, values: Iterable[M], **options: Unpack[JobOptions]) -> list[str]:
        """Encode and push every value with the same ``options`` (as :meth:`push`
        takes them; an ``id`` or a ``key`` names one job, so give one only with
        one value)."""
        jobs = [NewJob(self.encode(value), queue=self.queue, **options) for value in values]
        return await self.client.push_many(jobs) if jobs else []

    async def claim(self, worker: str, **options: Unpack[ClaimOptions]) -> list[TypedJob[M]]:
        """Claim and decode; jobs whose payload does not decode are failed, not returned."""
        jobs = await self.client.claim(worker, (self.queue,), **options)
        decoded: list[TypedJob[M]] = []
        for job in jobs:
            try:
                decoded.append(TypedJob(job, self.decode(job)))
            except PayloadDecodeError as exc:
                log.warning(
                    "payload does not decode; failing the job",
                    extra={"action": "decode", "job": job.id, "error": exc.message},
                )
                await self.client.fail(job, error=_bounded(exc.message))
        return decoded

    async def heartbeat(self, job: TypedJob[M]) -> None:
        await self.client.heartbeat(job.job)

    async def complete(self, job: TypedJob[M], *, result: object = None) -> None:
        """Mark ``job`` done, keeping ``result`` (see :meth:`osqueue.api.QueueClient.complete`)."""
        await self.client.complete(job.job, result=result)

    async def fail(
        self, job: TypedJob[M], *, error: str = "", retry_after_s: float | None = None
    ) -> None:
        await self.client.fail(job.job, error=error, retry_after_s=retry_after_s)

    async def release(self, job: TypedJob[M]) -> None:
        await self.client.release(job.job)

    def handler(self, fn: Callable[[M], R | Awaitable[R]]) -> Callable[[Job], object]:
        """Adapt ``fn(value)`` into a worker handler that decodes the job first.

        An async ``fn`` gives an async handler; a sync one a sync handler (run
        in a thread by the worker).  A payload that does not decode raises
        :class:`PayloadDecodeError`, so the worker fails the job with it.
        """
        if inspect.iscoroutinefunction(fn):
            async_fn = cast(Callable[[M], Awaitable[R]], fn)

            async def run_async(job: Job) -> R:
                return await async_fn(self.decode(job))

            return run_async

        def run_sync(job: Job) -> object:
            return fn(self.decode(job))

        return run_sync


def _bounded(text: str, limit: int = 1000) -> str:
    return text if len(text) <= limit else text[: limit - 1] + "…"
