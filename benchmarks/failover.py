"""Failover time: kill -9 the active broker under load; how long until pushes are acknowledged.

    .venv/bin/python benchmarks/failover.py [--lease-s 2] [--runs 5] [--pushers 4]
        [--warmup-s 1] [--timeout-s 60]

Each run, on a fresh ``file://`` queue: an active broker (``osqueue broker URL
--lease-s L``) and a standby (``osqueue broker URL --standby --lease-s L``),
both real child processes running the command an operator runs; a producer in
this process pushing continuously through ``osqueue.connect(URL)`` (``--pushers``
concurrent push loops, default client settings: the client finds the broker
through the document only).  After ``--warmup-s`` of load the active broker is
sent SIGKILL; the failover time is from that instant to the first push
acknowledged by the standby (a push acknowledged after the kill, through the
connection to the standby's address).  The standby cannot take over before
the lease written by the last commit runs out (the broker adds a clock-skew
margin, 1 s), so the floor is about the lease plus that margin.

Each run's figures go to stderr; one JSON line on stdout:
``{"bench": "failover", "lease_s", "runs", "median_s", "max_s", "ratio_to_lease",
"runs_s", "takeover_median_s"}`` (``takeover_*``: kill to the standby's
``serving`` line; ``ratio_to_lease`` = median / lease).  Every run is bounded by
``--timeout-s`` and every child process is stopped before the next run.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import shutil
import signal
import socket
import statistics
import sys
import tempfile
import time
from dataclasses import dataclass

from osqueue.bench import BrokerProcess
from osqueue.client.remote import RemoteClient, RemoteConfig, connect
from osqueue.errors import OsqueueError

PAYLOAD = b"failover"


@dataclass(frozen=True)
class RunFigures:
    failover_s: float
    takeover_s: float | None
    acks_before: int
    acks_after: int


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


async def wait_listening(port: int, timeout_s: float) -> None:
    """Until something accepts connections on 127.0.0.1:port (the standby's server is up)."""
    deadline = time.monotonic() + timeout_s
    while True:
        try:
            _, writer = await asyncio.open_connection("127.0.0.1", port)
        except OSError:
            if time.monotonic() > deadline:
                raise TimeoutError(f"nothing listens on 127.0.0.1:{port}") from None
            await asyncio.sleep(0.05)
            continue
        writer.close()
        with contextlib.suppress(OSError):
            await writer.wait_closed()
        return


async def one_run(args: argparse.Namespace, index: int) -> RunFigures:
    directory = tempfile.mkdtemp(prefix="osqueue-failover-")
    url = f"file://{directory}"
    standby_port = free_port()
    standby_address = f"127.0.0.1:{standby_port}"
    active = BrokerProcess(url, lease_s=args.lease_s)
    standby = BrokerProcess(url, listen=standby_address, standby=True, lease_s=args.lease_s)
    try:
        async with active, standby:
            await active.start()
            await standby.start()
            await wait_listening(standby_port, args.timeout_s)
            config = RemoteConfig(timeout_s=args.timeout_s)
            async with connect(url, config=config) as client:
                assert isinstance(client, RemoteClient)
                figures = await _measure(args, client, active, standby, standby_address)
            print(
                json.dumps({"run": index, "lease_s": args.lease_s, **figures.__dict__}),
                file=sys.stderr,
                flush=True,
            )
            return figures
    finally:
        shutil.rmtree(directory, ignore_errors=True)


async def _measure(
    args: argparse.Namespace,
    client: RemoteClient,
    active: BrokerProcess,
    standby: BrokerProcess,
    standby_address: str,
) -> RunFigures:
    killed_at: float | None = None
    recovered = asyncio.Event()
    first_after: list[float] = []
    counts = {"before": 0, "after": 0}

    async def push_loop() -> None:
        while True:
            try:
                await client.push(PAYLOAD)
            except OsqueueError as exc:  # past the client's own deadline: report, go on
                print(f"push failed: {type(exc).__name__}: {exc}", file=sys.stderr)
                continue
            acked = time.monotonic()
            if killed_at is None:
                counts["before"] += 1
            elif acked > killed_at and client.address == standby_address:
                counts["after"] += 1
                if not recovered.is_set():
                    first_after.append(acked)
                    recovered.set()

    pushers = [asyncio.create_task(push_loop()) for _ in range(args.pushers)]
    try:
        await asyncio.sleep(args.warmup_s)  # load on the active broker before the kill
        if counts["before"] == 0:
            raise RuntimeError(f"no push was acknowledged in {args.warmup_s:g} s of warm-up")
        killed_at = time.monotonic()
        active.signal(signal.SIGKILL)
        try:
            await asyncio.wait_for(recovered.wait(), args.timeout_s)
        except TimeoutError:
            raise RuntimeError(
                f"no push acknowledged within {args.timeout_s:g} s of the kill; "
                f"standby said: {standby.last_words()}"
            ) from None
    finally:  # stop pushing before the client closes
        for task in pushers:
            task.cancel()
        await asyncio.gather(*pushers, return_exceptions=True)
    takeover_s = None
    if standby.serving_at is not None:
        takeover_s = round(standby.serving_at - killed_at, 3)
    return RunFigures(
        failover_s=round(first_after[0] - killed_at, 3),
        takeover_s=takeover_s,
        acks_before=counts["before"],
        acks_after=counts["after"],
    )


async def main_async(args: argparse.Namespace) -> dict[str, object]:
    runs = [await one_run(args, i) for i in range(args.runs)]
    times = sorted(r.failover_s for r in runs)
    takeovers = [r.takeover_s for r in runs if r.takeover_s is not None]
    median = statistics.median(times)
    return {
        "bench": "failover",
        "lease_s": args.lease_s,
        "runs": len(runs),
        "median_s": round(median, 3),
        "max_s": round(max(times), 3),
        "ratio_to_lease": round(median / args.lease_s, 2),
        "runs_s": times,
        "takeover_median_s": round(statistics.median(takeovers), 3) if takeovers else None,
    }


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--lease-s", type=float, default=2.0, help="both brokers' --lease-s")
    parser.add_argument("--runs", type=int, default=5)
    parser.add_argument("--pushers", type=int, default=4, help="concurrent push loops")
    parser.add_argument("--warmup-s", type=float, default=1.0, help="load before the kill")
    parser.add_argument(
        "--timeout-s",
        type=float,
        default=None,
        help="bound on each wait (default: max(30, 10 x lease))",
    )
    args = parser.parse_args()
    if args.lease_s <= 0 or args.runs < 1 or args.pushers < 1 or args.warmup_s <= 0:
        parser.error("--lease-s and --warmup-s must be > 0, --runs and --pushers >= 1")
    if args.timeout_s is None:
        args.timeout_s = max(30.0, 10 * args.lease_s)
    print(json.dumps(asyncio.run(main_async(args))), flush=True)


if __name__ == "__main__":
    main()
