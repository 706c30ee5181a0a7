"""How fast the dashboard answers on a large queue (issue 17's figure).

Writes a queue document of ``--jobs`` queued jobs (1,000,000 by default, over
five queues, a few claimed and dead) to a ``file://`` directory, starts the
dashboard on it in this process, and loads the overview, its JSON endpoint and
pages of the job list ``--loads`` times each.  Prints one JSON line: p50 and
max per page in milliseconds, plus how long the one decode of the document
took (it happens once per ETag, in the background, not per request).

    .venv/bin/python benchmarks/dashboard.py [--jobs 1000000] [--loads 20]
"""

from __future__ import annotations

import argparse
import asyncio
import json
import statistics
import tempfile
import time
from pathlib import Path

import aiohttp

from osqueue.dashboard.board import DashboardConfig
from osqueue.dashboard.web import Dashboard
from osqueue.inspect.options import ClientOptions
from osqueue.state import DOCUMENT_KEY, ClaimOp, Document, Fail, Push, encode, transition

T0 = time.time()


def build(n: int) -> bytes:
    ops = [
        Push(
            id=f"01JD{i:022d}",
            payload=b'{"segment": "wal/ns-42/000017.jsonl"}',
            queue=f"q{i % 5}",
            max_attempts=1 if i < 50 else 5,
        )
        for i in range(n)
    ]
    doc = transition(Document.empty(), ops, T0, in_place=True).doc
    claimed = transition(doc, [ClaimOp("worker-1", ("q0",), 10)], T0 + 1, in_place=True)
    doc = claimed.doc
    for job_id in list(doc.index.claimed)[:3]:
        token = doc.jobs[job_id].claim.token  # type: ignore[union-attr]
        doc = transition(doc, [Fail(job_id, token, "boom", 0.0)], T0 + 2, in_place=True).doc
    return encode(doc)


async def timed(http: aiohttp.ClientSession, path: str, loads: int) -> dict[str, float]:
    took = []
    for _ in range(loads):
        started = time.perf_counter()
        async with http.get(path) as response:
            await response.read()
            assert response.status == 200, (path, response.status)
        took.append((time.perf_counter() - started) * 1000)
    return {"p50_ms": round(statistics.median(took), 1), "max_ms": round(max(took), 1)}


async def main(jobs: int, loads: int) -> dict[str, object]:
    with tempfile.TemporaryDirectory() as directory:
        started = time.perf_counter()
        data = build(jobs)
        (Path(directory) / DOCUMENT_KEY).write_bytes(data)
        built_s = time.perf_counter() - started
        config = DashboardConfig(ClientOptions(Path(directory).as_uri()), listen="127.0.0.1:0")
        board = Dashboard(config)
        await board.start()  # reads and decodes once
        try:
            snapshot = await board.source.current()
            async with aiohttp.ClientSession(board.address) as http:
                pages = {
                    "overview": await timed(http, "/", loads),
                    "api_overview": await timed(http, "/api/overview", loads),
                    "jobs_first_page_q3": await timed(http, "/jobs?queue=q3", loads),
                    "dead": await timed(http, "/dead", loads),
                }
        finally:
            await board.stop()
    return {
        "jobs": jobs,
        "document_bytes": len(data),
        "build_s": round(built_s, 2),
        "decode_s": round(snapshot.decode_s, 2),
        "pages": pages,
    }


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--jobs", type=int, default=1_000_000)
    parser.add_argument("--loads", type=int, default=20)
    args = parser.parse_args()
    print(json.dumps(asyncio.run(main(args.jobs, args.loads))))
