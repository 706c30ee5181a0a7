"""Broker configuration: one dataclass, units in the names."""

from __future__ import annotations

from dataclasses import dataclass

from osqueue.address import split_host_port
from osqueue.errors import InvalidInput
from osqueue.metrics import MAX_CONNECTIONS as METRICS_MAX_CONNECTIONS
from osqueue.state import Policy
from osqueue.state.validate import MAX_RESULT_TTL_S


@dataclass(frozen=True, slots=True)
class BrokerConfig:
    #: How long the broker's claim on the document lasts without a write.
    lease_s: float = 10.0
    #: A claimed job whose worker sends no heartbeat for this long is reclaimed.
    heartbeat_timeout_s: float = 30.0
    #: host:port written into the document so clients can find this broker.
    address: str | None = None
    #: Graceful stop: flush and release within this long, then stop hard.
    drain_timeout_s: float = 10.0
    #: Payloads above this are stored as objects under payloads/.
    inline_payload_max_bytes: int = 64 * 1024
    #: Largest payload accepted at all.
    max_payload_bytes: int = 64 * 1024 * 1024
    #: The written document stays under this: pushes are refused with QueueFull
    #: once it would pass it with every queued job claimed and completed.
    max_document_bytes: int = 256 * 1024 * 1024
    backoff_base_s: float = 1.0
    backoff_cap_s: float = 300.0
    #: A retried push is recognised for this long after its job has left the document.
    dedupe_window_s: float = 120.0
    #: A standby takes over once it has seen no new version of the document for
    #: the lease's length plus this long on its own monotonic clock (clock rates,
    #: read time); a lease ending further ahead of its wall clock than the lease
    #: plus this is logged as suspect (docs/failover.md).
    clock_skew_margin_s: float = 1.0
    #: A standby re-reads the document this often (default: a quarter of the lease).
    standby_poll_s: float | None = None
    #: Storage retry backoff after a failed write or read.
    retry_base_s: float = 0.05
    retry_cap_s: float = 2.0
    #: Most ops in one commit (the rest wait for the next).
    max_batch_ops: int = 20_000
    #: Ops waiting beyond this are refused with ResourceExhausted (backpressure).
    max_pending_ops: int = 200_000
    #: Archive objects written at once.
    archive_concurrency: int = 8
    #: Payload objects no job references (a push that never committed, a failed
    #: delete) are deleted once two sweeps this far apart both found them; None: off.
    payload_sweep_interval_s: float | None = 3600.0
    #: A serving broker logs its activity (commits, ops, errors) at INFO this often.
    stats_log_interval_s: float | None = 60.0
    broker_id: str | None = None
    #: Deep backlogs: most jobs per segment object (a long tail spills as several).
    segment_jobs: int = 50_000
    #: Ready jobs a queue (per priority) keeps in the document ahead of its segments.
    head_jobs: int = 500
    #: Jobs one load puts back into the document.
    load_jobs: int = 500
    #: A queue claimed in large batches gets a larger head and larger loads (twice
    #: its recent claims, broker/cold/demand.py), up to about this many bytes of
    #: its jobs each (never below head_jobs/load_jobs); None: no bound.
    head_max_bytes: int | None = 2 * 1024 * 1024
    #: A queue (per priority) spills once this many ready jobs wait in the document
    #: behind its head and segments; None: never.
    spill_above_jobs: int | None = 1_000
    #: A flood of pushes: while a spill's objects are being written and the
    #: document is above this many bytes, the next commit waits for them (at most
    #: until the lease renewal is due), so the document passes this by one batch
    #: at most; None: never wait.
    spill_hold_bytes: int | None = 4 * 1024 * 1024
    #: Compaction: adjacent segments of a queue (per priority) holding at most a tenth
    #: of this many jobs each are merged into objects of at most this many; None: never.
    compact_jobs: int | None = 50_000
    #: Dead letters (docs/segments.md "Dead letters"): the newest dead jobs a queue
    #: keeps in the document (None: all); once this many more have died, the
    #: oldest move to dead segments (of segment_jobs jobs at most).
    dead_keep_jobs: int | None = 100
    dead_spill_jobs: int = 1_000
    #: Segment objects the broker keeps read (the next ones to load, and those a
    #: cancel looked into), in bytes as stored; the least recently used go first.
    segment_cache_bytes: int = 128 * 1024 * 1024
    #: Cold delayed jobs (docs/segments.md, "Delayed jobs"): once more than
    #: ``delay_spill_above_jobs`` delayed jobs sit in the document (None: never),
    #: those due later than ``delay_horizon_s`` move to objects under delayed/, one
    #: per queue and window of ``delay_window_s``; an object's next
    #: ``delay_load_jobs`` are loaded back ``delay_lead_s`` before they are due.
    delay_spill_above_jobs: int | None = 1_000
    delay_horizon_s: float = 60.0
    delay_window_s: float = 300.0
    delay_lead_s: float = 10.0
    delay_load_jobs: int = 5_000
    #: Results (docs/results.md): how long a finished job's result (and how it
    #: finished) is kept, unless its push or its queue says (``result_ttl_s``);
    #: 0: none is kept.  None (the default): a result given is kept an hour, a
    #: job that finishes without one keeps no entry.
    result_ttl_s: float | None = None
    #: Results up to this size sit in the document; larger ones in results/ objects.
    result_inline_max_bytes: int = 1024
    #: The largest result accepted.
    max_result_bytes: int = 64 * 1024 * 1024
    #: The record of finished jobs holds at most this many in the document (the
    #: soonest to expire go first), and sealed objects at most this many entries
    #: kept only for children (the oldest objects go first).
    max_finished_jobs: int = 10_000
    #: ... and at most this many bytes of the document (fewer near max_document_bytes).
    max_finished_bytes: int = 2 * 1024 * 1024
    #: results/ objects nothing references (expired, evicted, or never committed) are
    #: deleted once two sweeps this far apart both found them; None: off.
    result_sweep_interval_s: float | None = 600.0
    #: Scheduling (docs/scheduling.md): a ``catch_up="skip"`` schedule skips a
    #: tick it fires later than this after the tick fell due.
    schedule_grace_s: float = 60.0
    #: Schedules a document holds at most.
    max_schedules: int = 100_000
    #: Dependencies: a finished job stays in the record of finished jobs this long
    #: for children pushed after it, if it had waiting children or a push named
    #: parents within this long before it finished (0: children find only the
    #: parents still in the document).
    dependency_window_s: float = 3600.0
    #: Waiting children in objects (docs/segments.md "Waiting children"): waiting
    #: jobs of one queue with the same parents move to objects once this many wait
    #: in the document (or one job waits for this many parents); None: never.
    waiting_spill_above_jobs: int | None = 200
    #: ... at most this many per object.
    waiting_object_jobs: int = 5_000
    #: An object whose parents all ended is loaded while fewer queued jobs of its
    #: queue than this sit in the document (a fan-in comes back in chunks).
    waiting_load_below_queued: int = 10_000
    #: The record of finished jobs (docs/segments.md "The finished record"): its
    #: ``done`` entries are sealed into objects once this many sit in the
    #: document (dependencies in use or not); None: never.
    finished_seal_above_entries: int | None = 1_000
    #: ... at most this many per object.
    finished_object_entries: int = 20_000
    #: ``host:port`` to serve Prometheus metrics on at ``/metrics`` (port 0: any
    #: free port; ``Broker.metrics_address`` says which), from ``start`` (a standby
    #: too) until ``stop``.  Needs ``osqueue[metrics]``.  None: no endpoint.
    metrics_listen: str | None = None
    #: Connections the metrics endpoint answers at once; more are answered 503
    #: and closed (their files come out of ``ServerConfig.fd_reserve``).
    metrics_max_connections: int = METRICS_MAX_CONNECTIONS

    def __post_init__(self) -> None:
        for name in ("lease_s", "heartbeat_timeout_s", "drain_timeout_s", "retry_base_s"):
            if not getattr(self, name) > 0:
                raise InvalidInput(f"must be > 0, got {getattr(self, name)}", field=name)
        self._check_counts()
        for name in ("result_ttl_s", "dependency_window_s"):
            value = getattr(self, name)
            if value is None and name == "result_ttl_s":
                continue
            if not 0 <= value <= MAX_RESULT_TTL_S:
                raise InvalidInput(
                    f"must be between 0 and {MAX_RESULT_TTL_S:g} seconds, got {value!r}",
                    field=name,
                )
        for name in ("payload_sweep_interval_s", "stats_log_interval_s", "result_sweep_interval_s"):
            value = getattr(self, name)
            if value is not None and not value > 0:
                raise InvalidInput(f"must be > 0 (or None: off), got {value!r}", field=name)
        self._check_delays()
        if self.metrics_listen is not None:
            split_host_port(self.metrics_listen, "metrics_listen")
        if self.inline_payload_max_bytes > self.max_payload_bytes:
            raise InvalidInput(
                "must not exceed max_payload_bytes", field="inline_payload_max_bytes"
            )

    def _check_delays(self) -> None:
        """The cold delayed jobs' settings."""
        for name in ("delay_window_s", "delay_lead_s"):
            if not getattr(self, name) > 0:
                raise InvalidInput(f"must be > 0, got {getattr(self, name)!r}", field=name)
        if not self.delay_horizon_s >= 2 * self.delay_lead_s:
            raise InvalidInput(
                f"must be at least twice delay_lead_s ({self.delay_lead_s}), got "
                f"{self.delay_horizon_s!r}: a job spilled is loaded a lead before it is due",
                field="delay_horizon_s",
            )

    def _check_counts(self) -> None:
        """The whole-number settings."""
        for name in (
            "max_batch_ops",
            "max_pending_ops",
            "archive_concurrency",
            "segment_jobs",
            "head_jobs",
            "load_jobs",
            "delay_load_jobs",
            "max_result_bytes",
            "max_finished_jobs",
            "max_finished_bytes",
            "max_schedules",
            "segment_cache_bytes",
            "metrics_max_connections",
            "waiting_object_jobs",
            "waiting_load_below_queued",
            "finished_object_entries",
            "dead_spill_jobs",
        ):
            value = getattr(self, name)
            if type(value) is not int or value < 1:
                raise InvalidInput(f"must be a whole number >= 1, got {value!r}", field=name)
        for name in (
            "spill_above_jobs",
            "spill_hold_bytes",
            "head_max_bytes",
            "waiting_spill_above_jobs",
            "finished_seal_above_entries",
            "compact_jobs",
            "dead_keep_jobs",
            "delay_spill_above_jobs",
        ):
            value = getattr(self, name)
            if value is not None and (type(value) is not int or value < 1):
                raise InvalidInput(
                    f"must be a whole number >= 1 (or None: off), got {value!r}", field=name
                )
        if type(self.result_inline_max_bytes) is not int or self.result_inline_max_bytes < 0:
            raise InvalidInput(
                f"must be a whole number >= 0, got {self.result_inline_max_bytes!r}",
                field="result_inline_max_bytes",
            )

    @property
    def renew_interval_s(self) -> float:
        return self.lease_s / 3.0

    @property
    def poll_interval_s(self) -> float:
        return self.standby_poll_s if self.standby_poll_s is not None else self.lease_s / 4.0

    def policy(self) -> Policy:
        return Policy(
            heartbeat_timeout_s=self.heartbeat_timeout_s,
            backoff_base_s=self.backoff_base_s,
            backoff_cap_s=self.backoff_cap_s,
            max_payload_bytes=self.max_payload_bytes,
            max_inline_payload_bytes=self.inline_payload_max_bytes,
            max_document_bytes=self.max_document_bytes,
            dedupe_window_s=self.dedupe_window_s,
            segment_jobs=self.segment_jobs,
            head_jobs=self.head_jobs,
            load_jobs=self.load_jobs,
            spill_above_jobs=self.spill_above_jobs,
            compact_jobs=self.compact_jobs,
            dead_keep_jobs=self.dead_keep_jobs,
            dead_spill_jobs=self.dead_spill_jobs,
            result_ttl_s=self.result_ttl_s,
            result_inline_max_bytes=self.result_inline_max_bytes,
            max_result_bytes=self.max_result_bytes,
            max_finished_jobs=self.max_finished_jobs,
            max_finished_bytes=self.max_finished_bytes,
            schedule_grace_s=self.schedule_grace_s,
            max_schedules=self.max_schedules,
            dependency_window_s=self.dependency_window_s,
            delay_spill_above_jobs=self.delay_spill_above_jobs,
            delay_horizon_s=self.delay_horizon_s,
            delay_window_s=self.delay_window_s,
            delay_lead_s=self.delay_lead_s,
            delay_load_jobs=self.delay_load_jobs,
            waiting_spill_above_jobs=self.waiting_spill_above_jobs,
            waiting_object_jobs=self.waiting_object_jobs,
            waiting_load_below_queued=self.waiting_load_below_queued,
            finished_seal_above_entries=self.finished_seal_above_entries,
            finished_object_entries=self.finished_object_entries,
        )
