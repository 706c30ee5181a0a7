"""Worker handlers that run on Spark.

:func:`spark_handlers` turns handlers written as ``fn(job, spark)`` (or, marked
with :func:`spark_batch`, ``fn(jobs, spark)``) into ordinary
:class:`osqueue.Worker` handlers bound to one SparkSession (``local[*]`` by
default, or any master: ``spark://host:7077``, ``yarn``, ``k8s://...``).

The worker runs each sync handler in its own thread and keeps heartbeating
from its event loop while the Spark job runs.  A failed Spark job surfaces as
:class:`SparkJobFailed` with a one-line summary (not the Py4J error itself,
which holds JVM objects); a handler whose job was lost returns quietly, since
the worker drops its outcome anyway.  Every call tags the Spark jobs
it starts with a unique tag; when the worker loses the job's lease
(``LeaseLost``: the job was reclaimed elsewhere) the tag is cancelled, so the
cluster stops working on a result nobody will keep::

    spark = spark_session(master="spark://10.0.0.5:7077")
    handlers = spark_handlers({"index": spark_batch(index_many)}, spark=spark)
    await osqueue.Worker(client, handlers, batch_size=4, concurrency=4).run()
"""

from __future__ import annotations

import logging
import os
import re
import sys
import uuid
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, TypeAlias

from osqueue.api import Job
from osqueue.client.worker import BatchHandler, Handler, NoJobContext, current_context
from osqueue.errors import InvalidInput, OsqueueError

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

log = logging.getLogger(__name__)

SparkJobFn: TypeAlias = Callable[[Job, "SparkSession"], object]
SparkBatchFn: TypeAlias = Callable[[list[Job], "SparkSession"], object]

#: Spark settings applied unless the caller sets them: small jobs do not pay
#: for 200 shuffle partitions.
DEFAULT_CONF: Mapping[str, str] = {
    "spark.sql.shuffle.partitions": "8",
    "spark.sql.adaptive.enabled": "true",
}


@dataclass(frozen=True, slots=True)
class SparkBatch:
    """A Spark handler that takes ``(jobs, spark)``; made by :func:`spark_batch`."""

    fn: SparkBatchFn

    def __call__(self, jobs: list[Job], spark: SparkSession) -> object:
        return self.fn(jobs, spark)


def spark_batch(fn: SparkBatchFn) -> SparkBatch:
    """Decorator: ``fn(jobs, spark)`` handles a batch of claimed jobs in one go."""
    if not callable(fn):
        raise InvalidInput(f"{fn!r} is not callable", field="handler")
    return SparkBatch(fn)


SparkHandler: TypeAlias = SparkJobFn | SparkBatch


def spark_session(
    master: str | None = None,
    app_name: str = "osqueue-worker",
    conf: Mapping[str, str] | None = None,
) -> SparkSession:
    """Create (or get) the process's SparkSession; ``master`` defaults to ``local[*]``."""
    from pyspark.sql import SparkSession

    # Spark starts its Python workers (data sources, UDFs) with $PYSPARK_PYTHON,
    # read when the context is created: default it to this interpreter.
    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    settings = {**DEFAULT_CONF, **(conf or {})}
    builder = SparkSession.builder.master(master or "local[*]").appName(app_name)
    for key, value in settings.items():
        builder = builder.config(key, value)
    return builder.getOrCreate()


class SparkJobFailed(OsqueueError):
    """A Spark job started by the handler failed."""


def _from_the_jvm(exc: BaseException) -> bool:
    """True for Spark and Py4J errors, which keep references to JVM objects."""
    from py4j.protocol import Py4JError
    from pyspark.errors.exceptions.captured import CapturedException

    return isinstance(exc, Py4JError | CapturedException)


_CAUSE = re.compile(r"\b[\w.]*(?:Exception|Error)\b[^:]*: \S")


def _summary(exc: BaseException) -> str:
    """One line: the first ``SomeException: message`` line of a Spark/Py4J error."""
    lines = [line.strip(" :\t") for line in str(exc).splitlines() if line.strip(" :\t")]
    cause = next((line for line in lines if _CAUSE.search(line)), lines[0] if lines else "")
    return f"{type(exc).__name__}: {cause}"[:1000]


class SparkCall:
    """One wrapped handler: runs ``fn(arg, spark)`` under a cancellable Spark job tag."""

    def __init__(self, fn: Callable[[Any, SparkSession], object], spark: SparkSession) -> None:
        self.fn = fn
        self.spark = spark

    def __repr__(self) -> str:
        return f"SparkCall({self.fn!r})"

    def __call__(self, arg: Any) -> object:
        sc = self.spark.sparkContext
        tag = f"osqueue-{uuid.uuid4().hex}"
        sc.addJobTag(tag)
        sc.setInterruptOnCancel(True)
        try:
            context = current_context()
        except NoJobContext:
            context = None
        if context is not None:
            job_ids = [job.id for job in context.jobs]

            def cancel() -> None:
                log.warning(
                    "job lost; cancelling its Spark jobs",
                    extra={"action": "spark_cancel", "jobs": job_ids, "tag": tag},
                )
                sc.cancelJobsWithTag(tag)

            context.on_cancel(cancel)
        try:
            return self.fn(arg, self.spark)
        except Exception as exc:
            if context is not None and context.lost:
                # The worker drops a lost job's outcome; returning (rather than
                # raising Spark's cancellation error into a future nobody reads)
                # keeps JVM-backed exceptions from being freed on the event loop.
                log.info(
                    "Spark handler stopped after its job was lost",
                    extra={"action": "spark_lost", "tag": tag},
                )
                return None
            if not _from_the_jvm(exc):
                raise
            summary = _summary(exc)
        finally:
            sc.removeJobTag(tag)
            sc.setInterruptOnCancel(False)
        # Raised outside the handler of the Spark error, so that error (and the JVM
        # objects it holds) is freed here, in this thread.
        raise SparkJobFailed(summary)


def spark_handler(handler: SparkHandler | BatchHandler, spark: SparkSession) -> Handler:
    """Wrap one Spark handler for :class:`osqueue.Worker`."""
    if isinstance(handler, SparkBatch):
        return BatchHandler(SparkCall(handler.fn, spark))
    if isinstance(handler, BatchHandler):
        # osqueue.batch(fn) around a fn(jobs, spark): the same thing as spark_batch(fn).
        return BatchHandler(SparkCall(handler.fn, spark))  # type: ignore[arg-type]
    if not callable(handler):
        raise InvalidInput(f"{handler!r} is not callable", field="handler")
    return SparkCall(handler, spark)


def spark_handlers(
    handlers: Mapping[str, SparkHandler] | SparkHandler,
    master: str | None = None,
    app_name: str = "osqueue-worker",
    *,
    conf: Mapping[str, str] | None = None,
    spark: SparkSession | None = None,
) -> Mapping[str, Handler] | Handler:
    """Wrap Spark handlers (one, or a mapping queue -> handler) for :class:`osqueue.Worker`.

    ``spark`` reuses an existing session; otherwise one is created from
    ``master``, ``app_name`` and ``conf`` (see :func:`spark_session`).
    """
    session = spark or spark_session(master, app_name, conf)
    if isinstance(handlers, Mapping):
        if not handlers:
            raise InvalidInput("the handler mapping is empty", field="handlers")
        return {queue: spark_handler(h, session) for queue, h in handlers.items()}
    return spark_handler(handlers, session)
