"""The worker runtime: claim jobs, run handlers, heartbeat, settle.

A :class:`Worker` runs at most ``concurrency`` handlers at once.  One side
task claims in batches with long polls (``max_jobs`` = free slots), another
heartbeats every held job on its own timer.  Each claimed job (or batch of
jobs, for handlers decorated with :func:`batch`) runs as its own task: async
handlers directly, sync handlers in a thread.  When the handler returns the
job is completed; when it raises, the job is failed with the traceback's last
line as ``last_error`` (or retried later when it raised :class:`Retry`).

A slot is free as soon as its handler returns, and the claim for the next job
carries the completion of the last one (``complete_and_claim``, one call and
one commit), so with storage latency a slot waits for one write per job, not
two.  While the claim side task is parked in a long poll (nothing to claim),
completions go out on their own.

When a heartbeat answers :class:`~osqueue.errors.LeaseLost` the job belongs to
someone else: an async handler is cancelled; a sync handler cannot be killed,
so its :class:`JobContext` is marked lost (handlers poll
:func:`current_job_lost` or register :meth:`JobContext.on_cancel`) and the job
is never completed by this worker.

Stopping happens in three stages: stop claiming; let running handlers finish
within ``shutdown_grace_period_s`` (heartbeats continue meanwhile); then
cancel what is left and release its jobs (:meth:`QueueClient.release`) so
another worker takes them at once.  Cancelling :meth:`Worker.run` from outside
is a graceful stop; a second cancellation skips the grace period.

One concern per module:

* :mod:`.handlers`: the handler API (:class:`Retry`, :func:`batch`,
  :func:`error_line`) and the queue -> handler table;
* :mod:`.context`: :class:`JobContext` and :func:`current_context`;
* :mod:`.config`: :class:`WorkerConfig`, :class:`WorkerCounters` and the records
  the metrics read;
* :mod:`.claims`: the claim loop (long polls, backoff, ``complete_and_claim``);
* :mod:`.relay`: ride-along completions, the hand-off from a finished job to
  the next claim (:class:`~.relay.CompletionRelay`);
* :mod:`.units`: dispatch of claimed jobs to handlers, async or in threads,
  within the slots;
* :mod:`.settle`: complete, fail, retry, release;
* :mod:`.heartbeats`: the heartbeat timer and lost leases;
* :mod:`.metrics`: the Prometheus collector (served at ``/metrics`` with
  ``metrics_listen``);
* :mod:`.worker`: :class:`Worker`, which wires them and stops in three stages.
"""

from __future__ import annotations

from osqueue.client.worker.config import WorkerConfig, WorkerCounters
from osqueue.client.worker.context import (
    JobContext,
    NoJobContext,
    current_context,
    current_job_lost,
)
from osqueue.client.worker.handlers import (
    BatchHandler,
    Handler,
    JobHandler,
    Retry,
    batch,
    error_line,
)
from osqueue.client.worker.worker import Worker

__all__ = [
    "BatchHandler",
    "Handler",
    "JobContext",
    "JobHandler",
    "NoJobContext",
    "Retry",
    "Worker",
    "WorkerConfig",
    "WorkerCounters",
    "batch",
    "current_context",
    "current_job_lost",
    "error_line",
]
