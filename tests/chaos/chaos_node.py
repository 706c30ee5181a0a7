"""A producer or a worker process for the chaos tests (run as a script).

    python tests/chaos/chaos_node.py producer URL NAME LOG STOP_FILE
    python tests/chaos/chaos_node.py worker URL NAME LOG

Both talk to the broker over gRPC through ``osqueue.connect(URL)`` (which finds
the broker in the queue document and follows it across failovers) and append
one JSON line per event to LOG, unbuffered, so a SIGKILL loses nothing that
was recorded:

* producer: ``sent`` before the first attempt of a job, ``ack`` once the broker
  acknowledged it; every job is retried under its own id until acknowledged.
  It pushes at a steady pace until STOP_FILE exists, then only finishes what
  it sent.  Restarted after a SIGKILL, it reads its LOG and first re-sends
  (same ids) what was sent and never acknowledged;
* worker: ``claim`` (job and token), ``complete``/``fail`` accepted,
  ``lost`` (LeaseLost: the job was no longer ours).

Jobs whose payload starts with ``poison`` always fail (they end dead). A
payload is ``kind:id``, and every tenth job's is ``job:id:`` followed by
``BIG_PAD`` bytes, above the broker's inline limit, so it travels through an
object under ``payloads/``.
"""

from __future__ import annotations

import asyncio
import json
import os
import random
import sys
import time
from typing import IO, Any

import osqueue
from osqueue.api import Job, NewJob
from osqueue.errors import LeaseLost, OsqueueError

#: every call's failover deadline (``osqueue.connect(timeout_s=...)``): past it a call
#: raises BrokerUnavailable; a claim adds its long poll
CLIENT_TIMEOUT_S = 5.0
CLAIM_WAIT_S = 1.0
#: the pause before a producer or a worker tries a failed call again
RETRY_S = 0.2
#: a producer pauses between two pushes for up to this
PUSH_PAUSE_MAX_S = 0.45
HEARTBEAT_S = 0.5
WORK_MAX_S = 0.6
BIG_PAD = 70 * 1024  # above the default 64 KiB inline limit


class Log:
    def __init__(self, path: str, who: str) -> None:
        self.path = path
        self.who = who
        self.file: IO[str] = open(path, "a", buffering=1)  # noqa: SIM115 (process lifetime)

    def write(self, event: str, **fields: Any) -> None:
        line = json.dumps({"ev": event, "who": self.who, "t": time.time(), **fields})
        self.file.write(line + "\n")
        self.file.flush()
        os.fsync(self.file.fileno())


def new_job(name: str, index: int) -> NewJob:
    """Job ``index`` of producer ``name``: the same job every time it is asked for."""
    job_id = f"{name}-{index}"
    poison = index % 20 == 7
    return NewJob(
        (b"poison:" if poison else b"job:")
        + job_id.encode()
        + (b":" + b"x" * BIG_PAD if index % 10 == 3 else b""),
        id=job_id,
        max_attempts=3 if poison else 20,
    )


def _resume(path: str) -> tuple[int, list[str]]:
    """From an earlier life's log: the next index, and the ids sent but never acknowledged."""
    sent: dict[str, None] = {}
    acked: set[str] = set()
    if os.path.exists(path):
        with open(path) as f:
            for line in f:
                if not line.endswith("}\n"):
                    continue  # torn by a kill mid-line
                event = json.loads(line)
                if event["ev"] == "sent":
                    sent[event["id"]] = None
                elif event["ev"] == "ack":
                    acked.add(event["id"])
    indexes = [int(job_id.rsplit("-", 1)[1]) for job_id in sent]
    return max(indexes, default=-1) + 1, [i for i in sent if i not in acked]


def _exists(path: str) -> bool:
    return os.path.exists(path)


async def producer(url: str, name: str, stop_file: str, log: Log) -> None:
    rng = random.Random(f"{name}-{os.getpid()}")
    next_index, unacked = _resume(log.path)
    pending = [new_job(name, int(job_id.rsplit("-", 1)[1])) for job_id in unacked]
    if unacked:
        log.write("resume", unacked=len(unacked), next=next_index)
    async with osqueue.connect(url, timeout_s=CLIENT_TIMEOUT_S) as q:
        while not (stopped := _exists(stop_file)) or pending:
            if not stopped and len(pending) < 3:
                for _ in range(rng.randint(1, 3)):
                    job = new_job(name, next_index)
                    next_index += 1
                    log.write("sent", id=job.id)
                    pending.append(job)
            batch = pending[:5]
            try:
                results = await q.push_results(batch)
            except OsqueueError as exc:
                log.write("retry", error=type(exc).__name__)
                await asyncio.sleep(RETRY_S)
                continue
            for job, result in zip(batch, results, strict=True):
                if isinstance(result, str):
                    log.write("ack", id=job.id)
                    pending.remove(job)
            await asyncio.sleep(rng.uniform(0.15, PUSH_PAUSE_MAX_S))
    log.write("done")


async def _holder(q: Any, job: Job, log: Log, call: str) -> None:
    """complete/fail ``job``, retrying transient errors under the same token."""
    for _ in range(40):
        try:
            if call == "complete":
                await q.complete(job)
            else:
                await q.fail(job, error="poison")
        except LeaseLost:
            log.write("lost", id=job.id, token=job.token, call=call)
            return
        except OsqueueError as exc:
            log.write("retry", error=type(exc).__name__, id=job.id)
            await asyncio.sleep(RETRY_S)
            continue
        log.write(call, id=job.id, token=job.token)
        return


async def _work(q: Any, job: Job, log: Log, rng: random.Random) -> None:
    parts = job.payload.split(b":")
    if parts[1].decode() != job.id or parts[2:] not in ([], [b"x" * BIG_PAD]):
        log.write("bad-payload", id=job.id, payload=job.payload[:60].decode(errors="replace"))
    end = time.monotonic() + rng.uniform(0.0, WORK_MAX_S)
    while (left := end - time.monotonic()) > 0:
        await asyncio.sleep(min(left, HEARTBEAT_S))
        try:
            await q.heartbeat(job)
        except LeaseLost:
            log.write("lost", id=job.id, token=job.token, call="heartbeat")
            return
        except OsqueueError as exc:
            log.write("retry", error=type(exc).__name__, id=job.id, call="heartbeat")
    await _holder(q, job, log, "fail" if job.payload.startswith(b"poison") else "complete")


async def worker(url: str, name: str, log: Log) -> None:
    rng = random.Random(name)
    async with osqueue.connect(url, timeout_s=CLIENT_TIMEOUT_S) as q:
        while True:
            try:
                jobs = await q.claim(name, ["default"], max_jobs=2, wait_s=CLAIM_WAIT_S)
            except OsqueueError as exc:
                log.write("retry", error=type(exc).__name__)
                await asyncio.sleep(RETRY_S)
                continue
            for job in jobs:
                log.write("claim", id=job.id, token=job.token)
            await asyncio.gather(*(_work(q, job, log, rng) for job in jobs))


def main(argv: list[str]) -> None:
    role = argv[0]
    if role == "producer":
        url, name, path, stop_file = argv[1], argv[2], argv[3], argv[4]
        asyncio.run(producer(url, name, stop_file, Log(path, name)))
    elif role == "worker":
        url, name, path = argv[1], argv[2], argv[3]
        asyncio.run(worker(url, name, Log(path, name)))
    else:
        raise SystemExit(f"unknown role {role!r}")


if __name__ == "__main__":
    main(sys.argv[1:])
