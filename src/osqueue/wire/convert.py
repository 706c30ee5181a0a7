"""Between the values of the API and the state layer and their wire messages, by one table.

A value and its message share their field names (``Push`` and ``NewJob``,
``PutSchedule`` and ``Schedule``, ``SetQueue`` and ``QueueSettings``, ``Job``,
``Stats``...), so the correspondence is derived, not written per message:
:func:`to_pb` and :func:`from_pb` walk the fields the two have in common, as
:func:`table` finds them in the value's class and the message's descriptor.

* A message field with presence (``optional``) is unset for None, and an unset
  one is the value's default (``max_attempts`` unset is 5; ``key`` is None).
* A repeated field is a tuple on our side.
* A field of :data:`ZERO_IS_DEFAULT` (a string whose default is not empty) is
  left unset when it holds the default, and an empty one reads as the default.
* A nested message or a map (a result's value, the stats' queues) is not in the
  table: the few functions below handle those by hand.

A field added to a value and to its message with the same name is carried
both ways without a line here.
"""

from __future__ import annotations

import dataclasses
import keyword
from collections.abc import Callable
from typing import Any, TypeVar

import msgspec
from google.protobuf.message import Message

from osqueue.api import EncodedResult, Job, JobResult, QueueStats, ResultKind, Stats
from osqueue.errors import InvalidInput
from osqueue.wire._pb import queue_pb2 as pb

T = TypeVar("T")
M = TypeVar("M", bound=Message)

#: String fields whose empty value (proto3's default) means our default.
ZERO_IS_DEFAULT = frozenset({"on_parent_failure", "catch_up"})

_SCALAR, _OPTIONAL, _REPEATED, _ZERO = range(4)
#: What a field without a default has as its default: an unset optional reads as None.
_NO_DEFAULT = (dataclasses.MISSING, msgspec.NODEFAULT)


def _fields(cls: type[object]) -> dict[str, object]:
    """The fields of a msgspec struct or a dataclass, with their defaults."""
    if isinstance(cls, type) and issubclass(cls, msgspec.Struct):
        return {f.name: f.default for f in msgspec.structs.fields(cls)}
    return {f.name: f.default for f in dataclasses.fields(cls)}  # type: ignore[arg-type]


Table = tuple[tuple[str, int, object], ...]
_TABLES: dict[tuple[type[object], type[Message]], Table] = {}


def table(cls: type[object], message: type[Message]) -> Table:
    """``(name, how, default)`` of each field ``cls`` and ``message`` share (made
    once per pair)."""
    found = _TABLES.get((cls, message))
    if found is None:
        found = _TABLES[cls, message] = _table(cls, message)
    return found


def _table(cls: type[object], message: type[Message]) -> Table:
    fields = message.DESCRIPTOR.fields_by_name
    out: list[tuple[str, int, object]] = []
    for name, default in _fields(cls).items():
        fd = fields.get(name)
        if fd is None:
            continue
        if fd.message_type is not None:  # nested message or map: by hand
            continue
        if fd.is_repeated:
            how = _REPEATED
        elif fd.has_presence:
            how = _OPTIONAL
        elif name in ZERO_IS_DEFAULT:
            how = _ZERO
        else:
            how = _SCALAR
        out.append((name, how, default))
    return tuple(out)


def to_pb(value: object, message: type[M], **extra: Any) -> M:
    """The ``message`` holding ``value``'s fields (``extra``: fields set besides)."""
    key = (type(value), message)
    convert = _TO_PB.get(key)
    if convert is None:
        convert = _TO_PB[key] = _compile_to_pb(*key)
    msg: M = convert(value, extra)
    return msg


def from_pb(msg: Message, cls: type[T], **extra: Any) -> T:
    """The ``cls`` value ``msg`` holds (``extra``: fields given besides)."""
    key = (cls, type(msg))
    convert = _FROM_PB.get(key)
    if convert is None:
        convert = _FROM_PB[key] = _compile_from_pb(*key)
    value: T = convert(msg, extra)
    return value


# A pair's conversion is compiled once from its table into a function that names
# each field (the loop over the table, with a getattr and a branch per field and
# message, cost three times a hand-written function: 2.5 against 0.8 us a job).
_Convert = Callable[[Any, dict[str, Any]], Any]
_TO_PB: dict[tuple[type[object], type[Message]], _Convert] = {}
_FROM_PB: dict[tuple[type[object], type[Message]], _Convert] = {}


def _compile_to_pb(cls: type[object], message: type[Message]) -> _Convert:
    lines = ["def convert(value, extra):", "    kw = {}"]
    space: dict[str, Any] = {"message": message}
    for i, (name, how, default) in enumerate(table(cls, message)):
        lines.append(f"    v = {_attr('value', name)}")
        if how == _ZERO:
            space[f"d{i}"] = default
            lines.append(f"    if v is not None and v != d{i}: kw[{name!r}] = v")
        elif how == _REPEATED:
            lines.append(f"    if v: kw[{name!r}] = list(v)")
        elif how == _OPTIONAL:  # set, even to zero: presence is the field's value
            lines.append(f"    if v is not None: kw[{name!r}] = v")
        else:  # proto3's zero is an unset field's value: nothing to set
            lines.append(f"    if v: kw[{name!r}] = v")
    lines.append("    return message(**kw, **extra) if extra else message(**kw)")
    return _compiled(lines, space, f"to_pb({cls.__name__}, {message.__name__})")


def _compile_from_pb(cls: type[object], message: type[Message]) -> _Convert:
    args: list[str] = []
    space: dict[str, Any] = {"cls": cls}
    for i, (name, how, default) in enumerate(table(cls, message)):
        read = _attr("msg", name)
        if how == _OPTIONAL:  # unset: the value's default (None if it has none)
            space[f"d{i}"] = None if default in _NO_DEFAULT else default
            args.append(f"{name}={read} if msg.HasField({name!r}) else d{i}")
        elif how == _REPEATED:
            args.append(f"{name}=tuple({read})")
        elif how == _ZERO:
            space[f"d{i}"] = default
            args.append(f"{name}={read} or d{i}")
        else:
            args.append(f"{name}={read}")
    call = ", ".join(args)
    lines = [
        "def convert(msg, extra):",
        f"    return cls({call}, **extra) if extra else cls({call})",
    ]
    return _compiled(lines, space, f"from_pb({message.__name__}, {cls.__name__})")


def _attr(obj: str, name: str) -> str:
    """The expression reading field ``name`` of ``obj`` (a keyword by getattr)."""
    return f"getattr({obj}, {name!r})" if keyword.iskeyword(name) else f"{obj}.{name}"


def _compiled(lines: list[str], space: dict[str, Any], name: str) -> _Convert:
    """The function ``lines`` define (names from ``space``), named ``name`` in tracebacks."""
    code = compile("\n".join(lines), f"<osqueue.wire.convert {name}>", "exec")
    exec(code, space)  # (source made above from the descriptor's field names)
    convert: _Convert = space["convert"]
    return convert


# --------------------------------------------------------------------------- by hand

_KIND_TO_PB: dict[ResultKind, pb.ResultKind.ValueType] = {
    "bytes": pb.RESULT_KIND_BYTES,
    "text": pb.RESULT_KIND_TEXT,
    "json": pb.RESULT_KIND_JSON,
}
_KIND_FROM_PB: dict[int, ResultKind] = {int(v): k for k, v in _KIND_TO_PB.items()}


def job_ref(job_id: str, token: int, result: EncodedResult | None = None) -> pb.JobRef:
    """The reference a holder's call sends: the claim's id and token (and result)."""
    ref = pb.JobRef(id=job_id, token=token)
    if result is not None:
        ref.result.CopyFrom(result_to_pb(result))
    return ref


def job_from_ref(ref: pb.JobRef) -> Job:
    """A :class:`Job` naming a claim by its id and token (all that later calls use)."""
    return Job(id=ref.id, queue="", payload=b"", attempts=0, max_attempts=1, token=ref.token)


def result_to_pb(result: EncodedResult) -> pb.ResultValue:
    return pb.ResultValue(kind=_KIND_TO_PB[result.kind], data=result.data)


def result_from_pb(msg: pb.ResultValue, field: str = "result") -> EncodedResult:
    """The result a message carries; a kind this release does not know is
    ``InvalidInput`` naming ``field``."""
    kind = _KIND_FROM_PB.get(int(msg.kind))
    if kind is None:
        raise InvalidInput(f"{msg.kind} is not a result kind", field=f"{field}.kind")
    return EncodedResult(kind, msg.data)


def job_result_to_pb(result: JobResult, value: EncodedResult | None) -> pb.ResultResponse:
    """The answer to a Result call: ``result`` with its ``value`` (encoded)."""
    msg = to_pb(result, pb.ResultResponse)
    if value is not None:
        msg.value.CopyFrom(result_to_pb(value))
    return msg


def job_result_from_pb(msg: pb.ResultResponse) -> JobResult:
    value = result_from_pb(msg.value, "value").decode() if msg.HasField("value") else None
    return from_pb(msg, JobResult, value=value)


def stats_to_pb(stats: Stats) -> pb.StatsResponse:
    msg = to_pb(stats, pb.StatsResponse)
    for name, queue in stats.queues.items():
        msg.queues[name].CopyFrom(to_pb(queue, pb.QueueStats))
    return msg


def stats_from_pb(msg: pb.StatsResponse) -> Stats:
    queues = {name: from_pb(q, QueueStats) for name, q in sorted(msg.queues.items())}
    return from_pb(msg, Stats, queues=queues)
