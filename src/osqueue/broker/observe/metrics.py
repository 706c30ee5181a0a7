"""The broker's Prometheus metrics, read at scrape time.

Where this lives: DESIGN.md puts the metrics endpoint beside the server, but
an embedded broker (``BrokerConfig(metrics_listen=...)``, no gRPC server at
all) must serve it too.  So the generic part, a registry served over HTTP,
sits on the bottom floor (:mod:`osqueue.metrics.exposition`) where the broker
may import it, and the broker's collector sits here, beside what it reads.
``osqueue broker --metrics-listen`` passes the address in the
:class:`~osqueue.broker.config.BrokerConfig`; the server adds nothing.

The hot path pays almost nothing: the counters the broker keeps anyway, and
once per commit (never per op) a commit's duration, its size and its ops
counted by kind and outcome (:class:`~osqueue.broker.observe.counters.CommitRecords`).
Everything else is read when Prometheus asks: the state, the lease's epoch,
the queue counts from :func:`osqueue.state.stats_of` (what ``stats()``
answers).  No metric carries a payload, a job id or a token.

The document's and the queues' metrics come from the broker that serves (or
is stopping) only: a standby or a stepped-down broker reports its state and
its own counters, so summing a metric over every broker of a queue counts each
job once.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass

from prometheus_client.metrics_core import (
    CounterMetricFamily,
    GaugeMetricFamily,
    HistogramMetricFamily,
    InfoMetricFamily,
    Metric,
)

from osqueue.api import Stats
from osqueue.broker.archive.writer import Archiver
from osqueue.broker.cold.dead import DeadCounters
from osqueue.broker.cold.delayed import DelayedCounters
from osqueue.broker.cold.finished import FinishedCounters
from osqueue.broker.cold.sweep import SegmentCounters
from osqueue.broker.cold.waiting import WaitingCounters
from osqueue.broker.core.intake import Intake
from osqueue.broker.core.lifecycle import Lifecycle, State
from osqueue.broker.core.waiters import Waiters
from osqueue.broker.lease.hold import Lease
from osqueue.broker.observe.counters import STORAGE_CALLS, BrokerCounters, CommitRecords
from osqueue.clock import Clock
from osqueue.errors import OsqueueError
from osqueue.metrics.exposition import buckets_of, label_of
from osqueue.state import (
    Cancel,
    ClaimOp,
    Complete,
    Document,
    Fail,
    Heartbeat,
    Load,
    MarkArchived,
    PurgeDead,
    Push,
    PutSchedule,
    Release,
    RemoveSchedule,
    RestartHeartbeats,
    RetryDead,
    SetQueue,
    Spill,
    stats_of,
)

__all__ = ["BrokerCollector"]

#: The ``kind`` label of each op type (from ``mark_archived`` on: the broker's own ops).
OP_KINDS: dict[type, str] = {
    Push: "push",
    ClaimOp: "claim",
    Heartbeat: "heartbeat",
    Complete: "complete",
    Fail: "fail",
    Release: "release",
    Cancel: "cancel",
    RetryDead: "retry_dead",
    PurgeDead: "purge_dead",
    MarkArchived: "mark_archived",
    RestartHeartbeats: "restart_heartbeats",
    Spill: "spill",
    Load: "load",
    SetQueue: "set_queue",
    PutSchedule: "schedule",
    RemoveSchedule: "unschedule",
}
#: Shown from the first scrape (at 0), so that ``rate()`` sees the first op.
_CLIENT_KINDS = ("push", "claim", "heartbeat", "complete", "fail", "release", "cancel")
#: The states whose held document is this broker's own, current one.
_OWNS_DOCUMENT = (State.SERVING, State.STOPPING)


def _outcome(result: type) -> str:
    """``ok``, or the error class an op got: ``LeaseLost`` -> ``lease_lost``."""
    return label_of(result) if issubclass(result, OsqueueError) else "ok"


@dataclass(frozen=True, slots=True)
class ColdCounters:
    """The counters each cold part of the broker keeps (read at a scrape)."""

    ready: SegmentCounters
    delayed: DelayedCounters
    dead: DeadCounters
    waiting: WaitingCounters
    finished: FinishedCounters


class BrokerCollector:
    """A prometheus_client collector of one broker's metrics (see the module doc;
    every metric is listed in docs/operations.md).  Made by the broker
    (:meth:`Broker.metrics_collector <osqueue.broker.core.broker.Broker.metrics_collector>`);
    making one turns the per-commit records on."""

    def __init__(
        self,
        *,
        broker_id: str,
        address: str | None,
        counters: BrokerCounters,
        clock: Clock,
        life: Lifecycle,
        lease: Lease,
        intake: Intake,
        waiters: Waiters,
        archiver: Archiver,
        cold: ColdCounters,
    ) -> None:
        self._broker_id = broker_id
        self._address = address
        self._counters = counters
        if counters.records is None:
            counters.records = CommitRecords()
        self._records: CommitRecords = counters.records
        self._clock = clock
        self._life = life
        self._lease = lease
        self._intake = intake
        self._waiters = waiters
        self._archiver = archiver
        self._cold = cold
        self._outcomes: dict[type, str] = {}

    def collect(self) -> Iterator[Metric]:
        yield from self._broker()
        yield from self._commits()
        doc = self._lease.doc
        if doc is not None and self._life.state in _OWNS_DOCUMENT:
            yield from self._document(doc)

    # ------------------------------------------------------------------ the broker

    def _broker(self) -> Iterator[Metric]:
        yield InfoMetricFamily(
            "osqueue_broker",
            "This broker: its id and the address it advertises.",
            value={"broker": self._broker_id, "address": self._address or ""},
        )
        state = GaugeMetricFamily(
            "osqueue_broker_state",
            "1 for the state this broker is in, 0 for the others.",
            labels=["state"],
        )
        now = self._life.state
        for s in State:
            state.add_metric([s.value], 1.0 if s is now else 0.0)
        yield state
        yield GaugeMetricFamily(
            "osqueue_broker_epoch",
            "The epoch this broker took the queue over with (0: it has not).",
            value=self._lease.epoch,
        )
        c = self._counters
        yield CounterMetricFamily(
            "osqueue_broker_commits_total", "Versions of the document written.", value=c.commits
        )
        yield CounterMetricFamily(
            "osqueue_broker_cas_conflicts_total",
            "Compare-and-set writes of the document that lost to another version.",
            value=c.conflicts,
        )
        errors = CounterMetricFamily(
            "osqueue_broker_storage_errors_total",
            "Storage calls that failed (each is retried with backoff), by what failed.",
            labels=["kind"],
        )
        for call in STORAGE_CALLS:
            errors.add_metric([call], c.storage_errors_by[call])
        yield errors
        yield CounterMetricFamily(
            "osqueue_broker_written_bytes_total",
            "Bytes of document versions written.",
            value=c.write_bytes,
        )
        yield CounterMetricFamily(
            "osqueue_broker_archive_objects_written_total",
            "Archive objects written (the completed jobs of one commit each).",
            value=c.archives,
        )
        yield GaugeMetricFamily(
            "osqueue_broker_archive_objects_pending",
            "Archive objects due or being written.",
            value=self._archiver.pending,
        )
        yield CounterMetricFamily(
            "osqueue_broker_payloads_swept_total",
            "Unreferenced payload objects deleted by the payload sweep.",
            value=c.payloads_swept,
        )
        yield from self._cold_io()
        yield GaugeMetricFamily(
            "osqueue_broker_pending_ops",
            "Ops waiting for the next commit.",
            value=len(self._intake.pending),
        )
        yield GaugeMetricFamily(
            "osqueue_broker_parked_claims",
            "Long-poll claims waiting for a job.",
            value=len(self._waiters.parked),
        )

    def _cold_io(self) -> Iterator[Metric]:
        """What this broker did with cold objects: segments of ready jobs, delayed
        objects, dead segments, objects of waiting children and sealed objects of
        the finished record (docs/segments.md), one ``kind`` label each."""
        cold = self._cold
        ready, delayed, dead, waiting, finished = (
            cold.ready,
            cold.delayed,
            cold.dead,
            cold.waiting,
            cold.finished,
        )
        by_kind: list[tuple[str, str, tuple[tuple[str, int], ...]]] = [
            (
                "osqueue_broker_cold_objects_written_total",
                "Cold objects written and referenced by a commit (a spill; for the "
                "finished record a seal).",
                (
                    ("ready", ready.spills),
                    ("delayed", delayed.spills),
                    ("dead", dead.spills),
                    ("waiting", waiting.spills),
                    ("finished", finished.seals),
                ),
            ),
            (
                "osqueue_broker_cold_jobs_written_total",
                "Jobs (for the finished record, entries) that left the document for cold objects.",
                (
                    ("ready", ready.spilled_jobs),
                    ("delayed", delayed.spilled_jobs),
                    ("dead", dead.spilled_jobs),
                    ("waiting", waiting.spilled_jobs),
                    ("finished", finished.sealed_entries),
                ),
            ),
            (
                "osqueue_broker_cold_loads_total",
                "Chunks of jobs loaded from cold objects back into the document (for "
                "the finished record, reads of sealed objects).",
                (
                    ("ready", ready.loads),
                    ("delayed", delayed.loads),
                    ("waiting", waiting.loads),
                    ("finished", finished.reads),
                ),
            ),
            (
                "osqueue_broker_cold_jobs_loaded_total",
                "Jobs loaded from cold objects back into the document.",
                (
                    ("ready", ready.loaded_jobs),
                    ("delayed", delayed.loaded_jobs),
                    ("waiting", waiting.loaded_jobs),
                ),
            ),
            (
                "osqueue_broker_cold_failed_writes_total",
                "Spills, seals and compactions whose objects could not be written (each "
                "tried again later; nothing left the document).",
                (
                    ("ready", ready.failed_spills),
                    ("delayed", delayed.failed_spills),
                    ("dead", dead.failed_spills),
                    ("waiting", waiting.failed_spills),
                    ("finished", finished.failed_seals),
                    ("compaction", ready.failed_compactions),
                ),
            ),
            (
                "osqueue_broker_cold_failed_loads_total",
                "Reads of cold objects that failed with a storage error (tried again).",
                (("ready", ready.failed_loads), ("delayed", delayed.failed_loads)),
            ),
            (
                "osqueue_broker_cold_objects_set_aside_total",
                "Cold objects found missing or failing their check (set aside and "
                "reported; for the finished record, broken sealed objects). Any growth "
                "needs an operator: docs/segments.md, readmit.",
                (
                    ("ready", ready.set_aside),
                    ("delayed", delayed.set_aside),
                    ("dead", dead.set_aside),
                    ("waiting", waiting.set_aside),
                    ("finished", finished.broken),
                ),
            ),
        ]
        for name, text, values in by_kind:
            family = CounterMetricFamily(name, text, labels=["kind"])
            for kind, value in values:
                family.add_metric([kind], value)
            yield family
        yield CounterMetricFamily(
            "osqueue_broker_segment_compactions_total",
            "Compactions committed (adjacent small segments merged into one object).",
            value=ready.compactions,
        )
        yield CounterMetricFamily(
            "osqueue_broker_segment_starved_commits_total",
            "Commits whose claims stopped at a segment barrier and waited a commit for "
            "a load (steady growth: a head too small for the claims, head_jobs).",
            value=ready.starved,
        )
        yield CounterMetricFamily(
            "osqueue_broker_segment_held_commits_total",
            "Commits that waited for a spill's objects before writing (a flood of "
            "pushes above spill_hold_bytes).",
            value=ready.held_commits,
        )

    def _commits(self) -> Iterator[Metric]:
        r = self._records
        yield HistogramMetricFamily(
            "osqueue_broker_commit_duration_seconds",
            "Time from a batch's first write attempt until it was durable.",
            buckets=buckets_of(r.commit_seconds),
            sum_value=r.commit_seconds.sum,
        )
        yield HistogramMetricFamily(
            "osqueue_broker_commit_ops",
            "Ops of the callers per commit (0: a commit that only renewed the lease).",
            buckets=buckets_of(r.commit_ops),
            sum_value=r.commit_ops.sum,
        )
        ops = CounterMetricFamily(
            "osqueue_broker_ops_total",
            "Ops answered, by kind and outcome (ok, or the error class: lease_lost, "
            "resource_exhausted, not_broker, ...).",
            labels=["kind", "outcome"],
        )
        counts: dict[tuple[str, str], int] = dict.fromkeys(((k, "ok") for k in _CLIENT_KINDS), 0)
        outcomes = self._outcomes
        for (op, result), n in r.ops.items():
            outcome = outcomes.get(result)
            if outcome is None:
                outcome = outcomes[result] = _outcome(result)
            key = (OP_KINDS.get(op) or label_of(op), outcome)
            counts[key] = counts.get(key, 0) + n
        for (kind, outcome), n in counts.items():
            ops.add_metric([kind, outcome], n)
        yield ops

    # ------------------------------------------------------------------ the document

    def _document(self, doc: Document) -> Iterator[Metric]:
        stats = stats_of(doc, self._clock.now())
        yield GaugeMetricFamily(
            "osqueue_document_version", "The version of the document held.", value=stats.version
        )
        yield GaugeMetricFamily(
            "osqueue_document_bytes",
            "The document's size as it counts against max_document_bytes.",
            value=stats.document_bytes,
        )
        yield GaugeMetricFamily(
            "osqueue_document_tombstones",
            "Ids remembered (for dedupe_window_s) after their jobs left.",
            value=stats.tombstones,
        )
        yield CounterMetricFamily(
            "osqueue_document_pushed_total",
            "Jobs pushed over the document's life (carried across failovers).",
            value=stats.pushed,
        )
        yield CounterMetricFamily(
            "osqueue_document_completed_total",
            "Jobs completed over the document's life (carried across failovers).",
            value=stats.completed,
        )
        families = {
            "depth": "Jobs queued (ready and delayed), those in segment objects included.",
            "ready": "Jobs queued and not delayed, those in segment objects included.",
            "delayed": "Jobs queued with a delay or a retry backoff still running.",
            "claimed": "Jobs held by workers.",
            "dead": "Jobs that ran out of attempts (dead letters).",
            "spilled": "Jobs queued in segment objects (a deep backlog), out of depth.",
            "set_aside": "Jobs in segments set aside (object missing or failing its check): "
            "not in depth, not claimable until `osqueue segments readmit`.",
        }
        gauges = {
            name: GaugeMetricFamily(f"osqueue_queue_{name}", text, labels=["queue"])
            for name, text in families.items()
        }
        aside = GaugeMetricFamily(
            "osqueue_segments_set_aside",
            "Segments set aside (object missing or failing its check); `osqueue status` "
            "lists their keys.",
            labels=["queue"],
        )
        oldest = GaugeMetricFamily(
            "osqueue_queue_oldest_waiting_seconds",
            "Age of the job the queue hands out next (0: none is ready).",
            labels=["queue"],
        )
        for queue, q in stats.queues.items():
            values = (
                q.depth,
                q.depth - q.delayed,
                q.delayed,
                q.claimed,
                q.dead,
                q.spilled,
                q.set_aside,
            )
            for gauge, value in zip(gauges.values(), values, strict=True):
                gauge.add_metric([queue], value)
            oldest.add_metric([queue], q.oldest_age_s or 0.0)
            aside.add_metric([queue], q.set_aside_segments)
        yield from gauges.values()
        yield oldest
        yield aside
        yield from _queue_totals(stats)
        yield GaugeMetricFamily(
            "osqueue_schedules",
            "Schedules (periodic jobs) in the document.",
            value=len(doc.schedules),
        )
        yield GaugeMetricFamily(
            "osqueue_schedules_paused",
            "Schedules paused one by one (osqueue schedule URL pause NAME).",
            value=sum(s.paused for s in doc.schedules),
        )


def _queue_totals(stats: Stats) -> Iterator[Metric]:
    """Each known queue's counters (kept in the document, so they survive failovers)
    and whether it is paused."""
    families = {
        "pushed": "Jobs pushed to the queue (carried across failovers).",
        "completed": "Jobs of the queue completed (carried across failovers).",
        "failed": "Failed attempts of the queue's jobs (carried across failovers).",
        # not "dead": osqueue_queue_dead is the gauge of dead letters held, and one
        # family name for two metrics is invalid OpenMetrics
        "died": "Jobs of the queue that ran out of attempts (carried across failovers).",
    }
    counters = {
        name: CounterMetricFamily(f"osqueue_queue_{name}", text, labels=["queue"])
        for name, text in families.items()
    }
    paused = GaugeMetricFamily(
        "osqueue_queue_paused",
        "1 while the queue is paused (nothing of it is claimed).",
        labels=["queue"],
    )
    for queue, q in stats.queues.items():
        values = (q.pushed_total, q.completed_total, q.failed_total, q.dead_total)
        for counter, value in zip(counters.values(), values, strict=True):
            counter.add_metric([queue], value)
        paused.add_metric([queue], 1.0 if q.paused else 0.0)
    yield from counters.values()
    yield paused
