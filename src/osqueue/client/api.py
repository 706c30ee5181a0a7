"""Moved to :mod:`osqueue.api` (the public types sit below every layer now).

This module re-exports them so ``from osqueue.client.api import Job`` keeps
working; new code imports from ``osqueue.api`` (or from ``osqueue``).
"""

from osqueue.api import (
    DEFAULT_MAX_ATTEMPTS,
    DEFAULT_QUEUE,
    CompletesAndClaims,
    Job,
    JobOptions,
    JobStatus,
    NewJob,
    PushOptions,
    QueueClient,
    QueueSettings,
    QueueStats,
    ScheduleInfo,
    Scheduling,
    Stats,
)

__all__ = [
    "DEFAULT_MAX_ATTEMPTS",
    "DEFAULT_QUEUE",
    "CompletesAndClaims",
    "Job",
    "JobOptions",
    "JobStatus",
    "NewJob",
    "PushOptions",
    "QueueClient",
    "QueueSettings",
    "QueueStats",
    "ScheduleInfo",
    "Scheduling",
    "Stats",
]
