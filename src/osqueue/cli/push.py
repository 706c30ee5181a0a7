"""``osqueue push URL``: enqueue jobs and print each id once its push is acknowledged.

Job ids are chosen here, before the first send, so a push retried after a lost
answer or a broker failover is applied once.  With ``--lines`` every stdin line
is a job.  Every line is read and checked first (its size against the
broker's payload limit, and every field as the broker would check it), so a
bad line anywhere pushes nothing and the error names its line number.  Then
the jobs are pushed in batches of ``--batch-max``, and ids are printed batch by
batch, in input order, only after the broker acknowledged them.  With
``--stream`` lines are pushed as they arrive instead (whatever accumulated
while the previous batch was in flight), each batch checked before it is sent.

If a send fails for good midway (no broker answers within ``--retry-for-s``),
the ids of every job committed before are on standard output, and one more
line on stderr says from which line to resend: a retry of the rest makes no
duplicates.  The batch in flight when the broker went away may or may not have
been committed; its line numbers are named.

Before the first send it looks at the queue document once (reads only): with
no document there is no queue, and it says so at once (how to start one)
instead of waiting for a broker that nobody will start; with a document that
names no live broker it says it is waiting for one, then waits as usual.
"""

from __future__ import annotations

import asyncio
import sys
import threading
import time
from collections.abc import Sequence
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Annotated, BinaryIO

import typer
from rich.progress import Progress, SpinnerColumn, TextColumn

from osqueue.api import NewJob, QueueClient
from osqueue.cli import exits
from osqueue.cli.console import stderr
from osqueue.cli.options import (
    Queue,
    Url,
    connecting,
)
from osqueue.errors import (
    InvalidInput,
    MaybeCommitted,
    NotFound,
    OsqueueError,
    OutcomeUnknown,
    Retryable,
    StorageError,
)
from osqueue.ids import new_id
from osqueue.inspect.document import read_blob
from osqueue.inspect.options import ClientOptions, open_client
from osqueue.server.limits import MIB, Limits
from osqueue.state import DOCUMENT_KEY, make
from osqueue.state.codec import decode_owner
from osqueue.state.model import BrokerInfo
from osqueue.storage import from_url

#: Errors after which the same batch (same ids) is sent again.
_BACKOFF_MIN_S = 0.05
_BACKOFF_MAX_S = 2.0


@dataclass(frozen=True, slots=True)
class JobTemplate:
    queue: str
    priority: int
    delay_s: float
    key: str | None
    max_attempts: int
    group: str | None = None
    after: tuple[str, ...] = ()
    result_ttl_s: float | None = None

    def job(self, payload: bytes) -> NewJob:
        return NewJob(
            payload,
            queue=self.queue,
            priority=self.priority,
            delay_s=self.delay_s,
            key=self.key,
            max_attempts=self.max_attempts,
            id=new_id(),
            group=self.group,
            after=self.after,
            result_ttl_s=self.result_ttl_s,
        )


@connecting
def push(
    url: Url,
    queue: Queue = "default",
    priority: Annotated[
        int,
        typer.Option(
            "--priority", "-p", envvar="OSQUEUE_PRIORITY", help="Lower runs first.", min=-(2**31)
        ),
    ] = 0,
    delay_s: Annotated[
        float,
        typer.Option(
            "--delay-s", envvar="OSQUEUE_DELAY_S", min=0.0, help="Run no earlier than this."
        ),
    ] = 0.0,
    key: Annotated[
        str | None,
        typer.Option("--key", envvar="OSQUEUE_KEY", help="Idempotency key (one live job per key)."),
    ] = None,
    max_attempts: Annotated[
        int,
        typer.Option("--max-attempts", envvar="OSQUEUE_MAX_ATTEMPTS", min=1, help="Then dead."),
    ] = 5,
    group: Annotated[
        str | None,
        typer.Option(
            "--group",
            envvar="OSQUEUE_GROUP",
            help="The job's group (see queue --max-claimed-per-group).",
        ),
    ] = None,
    after: Annotated[
        list[str] | None,
        typer.Option(
            "--after",
            envvar="OSQUEUE_PUSH_AFTER",
            help="A parent job's id (repeat it): the job waits until every parent completed.",
        ),
    ] = None,
    data: Annotated[
        str | None,
        typer.Option("--data", "-d", envvar="OSQUEUE_DATA", help="The payload (UTF-8 text)."),
    ] = None,
    file: Annotated[
        Path | None,
        typer.Option(
            "--file", "-f", envvar="OSQUEUE_FILE", help="The payload: a file's bytes ('-': stdin)."
        ),
    ] = None,
    lines: Annotated[
        bool,
        typer.Option(
            "--lines",
            envvar="OSQUEUE_LINES",
            help="One job per stdin line: every line is checked before any is pushed.",
        ),
    ] = False,
    stream: Annotated[
        bool,
        typer.Option(
            "--stream",
            envvar="OSQUEUE_PUSH_STREAM",
            help="With --lines: push lines as they arrive (each batch checked before it is"
            " sent) instead of reading stdin to its end first.",
        ),
    ] = False,
    batch_max: Annotated[
        int,
        typer.Option(
            "--batch-max", envvar="OSQUEUE_BATCH_MAX", min=1, max=10_000, help="Most jobs per push."
        ),
    ] = 1000,
    retry_for_s: Annotated[
        float,
        typer.Option(
            "--retry-for-s",
            envvar="OSQUEUE_RETRY_FOR_S",
            min=0.0,
            help="Keep retrying a push this long (broker failover) before giving up.",
        ),
    ] = 30.0,
    result_ttl_s: Annotated[
        float | None,
        typer.Option(
            "--result-ttl-s",
            envvar="OSQUEUE_PUSH_RESULT_TTL_S",
            min=0.0,
            help="Keep the job's answer (and result) this long after it finishes (0: keep"
            " none). Unset: the queue's or broker's setting, else a result is kept 3600 s.",
            show_default=False,
        ),
    ] = None,
    *,
    options: ClientOptions,
) -> None:
    """Push jobs; print each job id on its own line once the broker acknowledged it."""
    given = [
        name
        for name, on in (("--data", data is not None), ("--file", file), ("--lines", lines))
        if on
    ]
    if len(given) != 1:
        raise InvalidInput(
            "give exactly one of --data, --file or --lines"
            + (f" (got {', '.join(given)})" if given else ""),
            field="data",
        )
    if stream and not lines:
        raise InvalidInput("--stream goes with --lines", field="stream")
    if lines and key is not None:
        raise InvalidInput("a key names one job; it cannot be used with --lines", field="key")
    template = JobTemplate(
        queue,
        priority,
        delay_s,
        key,
        max_attempts,
        group,
        tuple(after) if after else (),
        result_ttl_s,
    )
    options = replace(options, timeout_s=retry_for_s or None)
    pusher = Pusher(
        template, batch_max=batch_max, retry_for_s=retry_for_s, limits=_limits(options.embedded)
    )
    if lines and not stream:
        jobs = pusher.check([_strip(raw) for raw in sys.stdin.buffer], first_line=1)
        asyncio.run(pusher.push_checked(options, jobs))
    elif lines:
        asyncio.run(pusher.push_lines(options, sys.stdin.buffer))
    else:
        payload = data.encode() if data is not None else _read_file(file)
        asyncio.run(pusher.push_one(options, payload))


async def check_queue(url: str, wait_s: float) -> None:
    """Fail at once when there is no queue at ``url``; warn when no broker serves it.

    A storage error is not decided here: the push retries reading the document
    until its deadline, as it would have anyway.
    """
    storage = from_url(url)
    try:
        shown = storage.url  # without credentials
        try:
            blob = await read_blob(storage, shown)
        except NotFound:
            raise NotFound(
                f"no queue at {shown}: {DOCUMENT_KEY} does not exist; start a broker to "
                f"create it (`osqueue broker {shown}`), or push with --embedded"
            ) from None
        except StorageError:
            return
        _, owner = decode_owner(blob.data)
    finally:
        await storage.close()
    why = _no_live_broker(owner, time.time())
    if why is not None:
        exits.warn(
            f"no broker is serving {shown} ({why}); waiting up to {wait_s:g} s for one "
            f"(start one with `osqueue broker {shown}`)"
        )


def _no_live_broker(owner: BrokerInfo | None, now: float) -> str | None:
    """Why the document names no broker that can answer now (None if it names one)."""
    if owner is None:
        return "the queue document names no broker yet"
    if owner.address is None:
        return "its last broker stopped and cleared its address"
    expired_s = now - owner.lease_until.timestamp()
    if expired_s > 0:
        return f"the lease of its broker at {owner.address} ran out {expired_s:.0f} s ago"
    return None


def _read_file(path: Path | None) -> bytes:
    assert path is not None
    if str(path) == "-":
        return sys.stdin.buffer.read()
    try:
        return path.read_bytes()
    except OSError as exc:
        raise InvalidInput(f"cannot read {str(path)!r}: {exc.strerror}", field="file") from exc


def _limits(embedded: bool) -> Limits:
    """What the broker will accept: a gRPC server's limits, or with ``--embedded``
    the broker's own payload bound (no message carries the payload)."""
    if not embedded:
        return Limits()
    from osqueue.broker import BrokerConfig

    most = BrokerConfig().max_payload_bytes
    return Limits(max_payload_bytes=most, max_message_bytes=most + MIB)


def _strip(raw: bytes) -> bytes:
    """A line without its ``\n`` (or ``\r\n``)."""
    line = raw[:-1] if raw.endswith(b"\n") else raw
    return line[:-1] if line.endswith(b"\r") else line


def _span(first: int, last: int) -> str:
    return f"line {first}" if first == last else f"lines {first}-{last}"


def _were(first: int, last: int) -> str:
    return f"{_span(first, last)} {'was' if first == last else 'were'}"


class Pusher:
    def __init__(
        self,
        template: JobTemplate,
        *,
        batch_max: int,
        retry_for_s: float,
        limits: Limits | None = None,
    ) -> None:
        self.template = template
        self.batch_max = batch_max
        self.retry_for_s = retry_for_s
        self.pushed = 0
        #: what the broker accepts: each job is checked as it will check it
        self.limits = limits or Limits()

    def check(self, payloads: Sequence[bytes], *, first_line: int) -> list[NewJob]:
        """The jobs of these lines, each checked as the broker will check it;
        InvalidInput naming the first bad line (nothing is sent)."""
        jobs = []
        for n, payload in enumerate(payloads, start=first_line):
            job = self.template.job(payload)
            try:
                make.push(job, self.limits.max_payload_bytes, "j")
            except InvalidInput as exc:
                what = (exc.field or "").removeprefix("j.")
                message = str(exc).removeprefix(f"{exc.field}: ")
                pushed = (
                    "nothing was pushed"
                    if self.pushed == 0
                    else f"only {_were(1, first_line - 1)} pushed"
                )
                raise InvalidInput(
                    f"line {n}: {what}: {message} ({pushed})", field=f"line {n}"
                ) from None
            jobs.append(job)
        return jobs

    async def push_checked(self, options: ClientOptions, jobs: list[NewJob]) -> None:
        """Push checked jobs in batches; ids printed batch by batch once acknowledged."""
        if not jobs:
            return
        if not options.embedded:
            await check_queue(options.url, self.retry_for_s)
        async with open_client(options) as client:
            for start in range(0, len(jobs), self.batch_max):
                batch = jobs[start : start + self.batch_max]
                ids = await self._send_lines(client, batch, start + 1, len(jobs))
                _print_ids(ids)

    async def _send_lines(
        self, client: QueueClient, jobs: Sequence[NewJob], first: int, total: int | None
    ) -> list[str]:
        """``_send`` for the lines from ``first``; a failure for good says on stderr
        which lines were committed and from which line to resend."""
        try:
            return await self._send(client, jobs)
        except OsqueueError as exc:
            last = first + len(jobs) - 1
            committed = "no line" if first == 1 else f"{_span(1, first - 1)} (ids above)"
            of = f" of {total}" if total is not None else ""
            maybe = isinstance(exc, MaybeCommitted | OutcomeUnknown)
            ids = ", ".join(j.id or "" for j in jobs)
            in_flight = f"; {_span(first, last)} may or may not be queued (ids {ids})"
            in_flight = in_flight if maybe else ""
            exits.warn(
                f"pushed {committed}{of}{in_flight}; resend from line "
                f"{last + 1 if maybe else first}"
            )
            raise

    async def push_one(self, options: ClientOptions, payload: bytes) -> None:
        if not options.embedded:
            await check_queue(options.url, self.retry_for_s)
        async with open_client(options) as client:
            ids = await self._send(client, [self.template.job(payload)])
            _print_ids(ids)

    async def push_lines(self, options: ClientOptions, stream: BinaryIO) -> None:
        if not options.embedded:
            await check_queue(options.url, self.retry_for_s)
        lines: asyncio.Queue[bytes | None] = asyncio.Queue()
        _start_reader(stream, lines, asyncio.get_running_loop())
        async with open_client(options) as client:
            with _progress() as progress:
                task = progress.add_task("pushing", total=None) if progress else None
                started = time.monotonic()
                done = False
                while not done:
                    batch, done = await _next_batch(lines, self.batch_max)
                    if batch:
                        first = self.pushed + 1
                        jobs = self.check(batch, first_line=first)
                        ids = await self._send_lines(client, jobs, first, None)
                        _print_ids(ids)
                    if progress is not None and task is not None:
                        rate = self.pushed / max(1e-9, time.monotonic() - started)
                        progress.update(
                            task, description=f"pushed {self.pushed:,} jobs ({rate:,.0f}/s)"
                        )

    async def _send(self, client: QueueClient, jobs: Sequence[NewJob]) -> list[str]:
        """Push ``jobs``; on a transient error send the same jobs (same ids) again."""
        deadline = time.monotonic() + self.retry_for_s
        backoff = _BACKOFF_MIN_S
        while True:
            try:
                ids = await client.push_many(jobs)
            except Retryable as exc:
                if time.monotonic() + backoff >= deadline:
                    raise
                exits.warn(f"push failed ({exits.describe(exc)}); retrying the same jobs")
                await asyncio.sleep(backoff)
                backoff = min(backoff * 2, _BACKOFF_MAX_S)
                continue
            self.pushed += len(ids)
            return ids


async def _next_batch(
    lines: asyncio.Queue[bytes | None], batch_max: int
) -> tuple[list[bytes], bool]:
    """Wait for one line, then take whatever else has arrived (up to ``batch_max``)."""
    first = await lines.get()
    if first is None:
        return [], True
    batch = [first]
    while len(batch) < batch_max and not lines.empty():
        line = lines.get_nowait()
        if line is None:
            return batch, True
        batch.append(line)
    return batch, False


def _start_reader(
    stream: BinaryIO, lines: asyncio.Queue[bytes | None], loop: asyncio.AbstractEventLoop
) -> None:
    """Read ``stream`` line by line in a daemon thread (stdin reads block)."""

    def read() -> None:
        try:
            for raw in stream:
                loop.call_soon_threadsafe(lines.put_nowait, _strip(raw))
            loop.call_soon_threadsafe(lines.put_nowait, None)
        except RuntimeError:
            return  # the event loop closed: the command ended (an error was reported)

    threading.Thread(target=read, name="osqueue-push-stdin", daemon=True).start()


def _print_ids(ids: list[str]) -> None:
    sys.stdout.write("".join(f"{job_id}\n" for job_id in ids))
    sys.stdout.flush()


class _NoProgress:
    def __enter__(self) -> None:
        return None

    def __exit__(self, *exc: object) -> None:
        return None


def _progress() -> Progress | _NoProgress:
    """A spinner with the count on stderr, only when stderr is a terminal."""
    console = stderr()
    if not console.is_terminal:
        return _NoProgress()
    return Progress(
        SpinnerColumn(), TextColumn("{task.description}"), console=console, transient=True
    )
