"""The queue document and its transitions: pure values and functions, no I/O."""

from osqueue.state.codec import decode, encode
from osqueue.state.document import Document
from osqueue.state.model import (
    FORMAT,
    BrokerInfo,
    Claim,
    Counters,
    JobStatus,
    StoredJob,
    to_datetime,
)
from osqueue.state.ops import (
    Cancel,
    Claimed,
    ClaimOp,
    Complete,
    Counted,
    Fail,
    Heartbeat,
    MarkArchived,
    Ok,
    Op,
    Policy,
    PurgeDead,
    Push,
    Pushed,
    Release,
    Removed,
    RestartHeartbeats,
    Result,
    RetryDead,
)
from osqueue.state.stats import stats_of
from osqueue.state.transitions import (
    Transition,
    apply,
    backoff_s,
    claimable,
    next_wakeup,
    transition,
)

DOCUMENT_KEY = "queue.json"
#: Payloads above the inline limit live under this prefix, one object per upload:
#: ``payloads/<job id>=<upload id>`` (earlier releases wrote ``payloads/<job id>``).
PAYLOAD_PREFIX = "payloads/"

__all__ = [
    "DOCUMENT_KEY",
    "FORMAT",
    "PAYLOAD_PREFIX",
    "BrokerInfo",
    "Cancel",
    "Claim",
    "ClaimOp",
    "Claimed",
    "Complete",
    "Counted",
    "Counters",
    "Document",
    "Fail",
    "Heartbeat",
    "JobStatus",
    "MarkArchived",
    "Ok",
    "Op",
    "Policy",
    "PurgeDead",
    "Push",
    "Pushed",
    "Release",
    "Removed",
    "RestartHeartbeats",
    "Result",
    "RetryDead",
    "StoredJob",
    "Transition",
    "apply",
    "backoff_s",
    "claimable",
    "decode",
    "encode",
    "next_wakeup",
    "stats_of",
    "to_datetime",
    "transition",
]
