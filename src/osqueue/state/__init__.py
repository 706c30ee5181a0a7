"""The queue document and its transitions: pure values and functions, no I/O.

How jobs finished, and their results, are kept in the record of finished jobs
(:mod:`~osqueue.state.finished_jobs`); :func:`finished` answers from it
(:mod:`~osqueue.state.results`).

Deep backlogs live in segment objects the document references: the model and
claim order in :mod:`~osqueue.state.segments`, the ops in
:mod:`~osqueue.state.spill`, the objects' bytes in
:mod:`~osqueue.state.segment_codec`, and what the broker should spill or load
in :mod:`~osqueue.state.planning`.
"""

from osqueue.state.codec import decode, encode
from osqueue.state.compaction import CompactPlan, plan_compactions
from osqueue.state.document import Document
from osqueue.state.finished_jobs import RESULT_PREFIX, FinishedJob, FinishedRecord, ResultData
from osqueue.state.history import HistorySample
from osqueue.state.limits import next_capacity_at
from osqueue.state.model import (
    FORMAT,
    QUEUE_ID_RE,
    BrokerInfo,
    BrokerPerf,
    Claim,
    Counters,
    QueueTotals,
    Schedule,
    SegmentRef,
    SetAsideRef,
    StoredJob,
    StoredSettings,
    WorkerSeen,
    new_queue_id,
    to_datetime,
)
from osqueue.state.ops import (
    Cancel,
    Claimed,
    ClaimOp,
    Compact,
    Complete,
    Counted,
    Fail,
    Heartbeat,
    Load,
    MarkArchived,
    Ok,
    Op,
    Policy,
    PurgeDead,
    Push,
    Pushed,
    PutSchedule,
    QueueSet,
    Readmit,
    Release,
    Removed,
    RemoveSchedule,
    RestartHeartbeats,
    Result,
    RetryDead,
    Scheduled,
    SetAside,
    SetQueue,
    Spill,
)
from osqueue.state.order import claimable, next_tick_at, next_wakeup
from osqueue.state.planning import (
    LoadPlan,
    SpillPlan,
    cancel_op,
    candidates,
    jobs_ahead,
    live_jobs,
    load_op,
    plan_loads,
    plan_spills,
)
from osqueue.state.results import finished
from osqueue.state.segment_codec import (
    SEGMENT_PREFIX,
    SegmentHeader,
    build_segment,
    check_object,
    check_segment,
    decode_segment,
    encode_segment,
    segment_key,
)
from osqueue.state.segments import Segments, Stream
from osqueue.state.stats import stats_of
from osqueue.state.transitions import Transition, apply, backoff_s, transition

DOCUMENT_KEY = "queue.json"
#: Payloads above the inline limit live under this prefix, one object per upload:
#: ``payloads/<job id>=<upload id>`` (earlier releases wrote ``payloads/<job id>``).
PAYLOAD_PREFIX = "payloads/"

__all__ = [
    "DOCUMENT_KEY",
    "FORMAT",
    "PAYLOAD_PREFIX",
    "QUEUE_ID_RE",
    "RESULT_PREFIX",
    "SEGMENT_PREFIX",
    "BrokerInfo",
    "BrokerPerf",
    "Cancel",
    "Claim",
    "ClaimOp",
    "Claimed",
    "Compact",
    "CompactPlan",
    "Complete",
    "Counted",
    "Counters",
    "Document",
    "Fail",
    "FinishedJob",
    "FinishedRecord",
    "Heartbeat",
    "HistorySample",
    "Load",
    "LoadPlan",
    "MarkArchived",
    "Ok",
    "Op",
    "Policy",
    "PurgeDead",
    "Push",
    "Pushed",
    "PutSchedule",
    "QueueSet",
    "QueueTotals",
    "Readmit",
    "Release",
    "RemoveSchedule",
    "Removed",
    "RestartHeartbeats",
    "Result",
    "ResultData",
    "RetryDead",
    "Schedule",
    "Scheduled",
    "SegmentHeader",
    "SegmentRef",
    "Segments",
    "SetAside",
    "SetAsideRef",
    "SetQueue",
    "Spill",
    "SpillPlan",
    "StoredJob",
    "StoredSettings",
    "Stream",
    "Transition",
    "WorkerSeen",
    "apply",
    "backoff_s",
    "build_segment",
    "cancel_op",
    "candidates",
    "check_object",
    "check_segment",
    "claimable",
    "decode",
    "decode_segment",
    "encode",
    "encode_segment",
    "finished",
    "jobs_ahead",
    "live_jobs",
    "load_op",
    "new_queue_id",
    "next_capacity_at",
    "next_tick_at",
    "next_wakeup",
    "plan_compactions",
    "plan_loads",
    "plan_spills",
    "segment_key",
    "stats_of",
    "to_datetime",
    "transition",
]
