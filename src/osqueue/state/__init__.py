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
from osqueue.state.ops import Claim as ClaimOp
from osqueue.state.transitions import (
    Transition,
    apply,
    backoff_s,
    claimable,
    commit,
    next_wakeup,
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
    "commit",
    "decode",
    "encode",
    "next_wakeup",
    "to_datetime",
]
