"""``osqueue result URL ID``: how a job finished, and its result (through the broker)."""

from __future__ import annotations

import asyncio
import base64
import sys
from typing import Annotated, Any

import msgspec
import typer

from osqueue.api import JobResult
from osqueue.cli import exits
from osqueue.cli.options import Url, connecting
from osqueue.inspect.options import ClientOptions, open_client

#: The wait ran out before the job finished (the table is in :mod:`osqueue.cli.exits`).
NOT_FINISHED = exits.NOT_FINISHED


@connecting
def result(
    url: Url,
    job_id: Annotated[str, typer.Argument(help="The job's id (as push printed it).")],
    wait_s: Annotated[
        float,
        typer.Option(
            "--wait-s",
            envvar="OSQUEUE_RESULT_WAIT_S",
            min=0.0,
            help="Wait up to this many seconds for the job to finish (0: answer at once).",
        ),
    ] = 0.0,
    wait_old: Annotated[
        float | None,
        typer.Option(
            "--wait", envvar="OSQUEUE_WAIT", min=0.0, hidden=True, help="The old --wait-s."
        ),
    ] = None,
    raw: Annotated[
        bool,
        typer.Option(
            "--raw",
            envvar="OSQUEUE_RAW",
            help="Print only the value's bytes (bytes as they are, text as UTF-8, other "
            "values as JSON); a job that did not complete is an error.",
        ),
    ] = False,
    *,
    options: ClientOptions,
) -> None:
    """Print how a job finished: its status, result, last error, attempts and time.

    JSON by default: {"id", "status", "value", "error", "attempts", "finished_at"},
    a bytes value as base64 (with "encoding": "base64").  Exit codes: 0 when
    answered, 5 for an id the queue does not know (never pushed, or finished
    longer than its result_ttl_s ago), 75 when --wait-s ran out before the job
    finished (the status is then its live one).
    """
    if wait_old is not None and not wait_s:
        wait_s = wait_old
    answer = asyncio.run(_result(options, job_id, wait_s))
    if raw:
        _print_raw(job_id, answer)
    else:
        typer.echo(msgspec.json.encode(as_json(job_id, answer)).decode())
    if not answer.finished:
        raise typer.Exit(NOT_FINISHED)


async def _result(options: ClientOptions, job_id: str, wait_s: float) -> JobResult:
    async with open_client(options) as client:
        return await client.result(job_id, wait_s=wait_s)


def as_json(job_id: str, answer: JobResult) -> dict[str, Any]:
    """The answer as one JSON object (a bytes value as base64)."""
    out: dict[str, Any] = {"id": job_id, "status": answer.status, "value": answer.value}
    if isinstance(answer.value, bytes):
        out["value"] = base64.b64encode(answer.value).decode()
        out["encoding"] = "base64"
    out["error"] = answer.error
    out["attempts"] = answer.attempts
    out["finished_at"] = answer.finished_at
    return out


def raw_bytes(value: object) -> bytes:
    """The bytes ``--raw`` prints for a value."""
    if isinstance(value, bytes):
        return value
    if isinstance(value, str):
        return value.encode()
    return msgspec.json.encode(value)


def _print_raw(job_id: str, answer: JobResult) -> None:
    if answer.status == "done":
        if answer.value is not None:
            sys.stdout.buffer.write(raw_bytes(answer.value))
            sys.stdout.buffer.flush()
        return
    if not answer.finished:
        exits.warn(f"job {job_id} has not finished: it is {answer.status}")
        return
    detail = f": {answer.error}" if answer.error else ""
    exits.warn(f"job {job_id} did not complete: it is {answer.status}{detail}")
    raise typer.Exit(exits.ERROR)
