"""Jobs per second enqueued by the Spark data source from one DataFrame.

    .venv/bin/python benchmarks/spark_write.py [--rows 100000] [--partitions 2]
        [--batch-size 1000] [--master local[2]] [--mode remote|embedded] [--read]
        [--dedupe-window-s 120]

Starts a broker served over gRPC on a fresh ``file://`` queue (``--mode
remote``: each Spark partition pushes through it in batches, the way
``df.write.format("osqueue")`` runs against a live queue) or none (``--mode
embedded``: the rows are pushed by an in-process broker when the write
commits).  A 100-row write warms Spark and the Python workers up first; the
timed write is the DataFrame of ``--rows`` rows.  ``--read`` then reads the
queue back with ``spark.read.format("osqueue")`` (the jobs in the document and
those in segment objects, a Spark task per segment) and counts the rows
(``read_rows``, ``read_seconds``).  ``queued`` counts the queue's depth from
the document (segments included), ``spilled`` the jobs in segments, and
``document_bytes`` is queue.json's size at the end.  Prints one JSON line.

The deep-backlog figure (issue 15): ``--rows 5000000 --partitions 8 --read
--dedupe-window-s 10``.  Spark pushes with ids (a retried task resends the same
rows), so every row leaves a 29-byte dedupe tombstone when it moves to a
segment, kept for the broker's ``dedupe_window_s``: at the default 120 s a
write of millions of rows carries tens of megabytes of them in every commit
(see docs/segments.md, Limits).  ``--dedupe-window-s`` sets the served
broker's window (keep it above the longest a failed task takes to be retried).
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import tempfile
import time
from pathlib import Path

os.environ.setdefault("PYSPARK_PYTHON", sys.executable)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rows", type=int, default=100_000)
    parser.add_argument("--partitions", type=int, default=2)
    parser.add_argument("--batch-size", type=int, default=1000)
    parser.add_argument("--master", default="local[2]")
    parser.add_argument("--mode", choices=("remote", "embedded"), default="remote")
    parser.add_argument("--read", action="store_true", help="read the queue back, count rows")
    parser.add_argument("--dedupe-window-s", type=float, default=120.0)
    args = parser.parse_args()

    from osqueue.broker import BrokerConfig
    from osqueue.client.loop_thread import LoopThread
    from osqueue.server.runner import BrokerServer
    from osqueue.server.server import ServerConfig
    from osqueue.spark import blocking, register
    from osqueue.spark.worker import spark_session
    from osqueue.state import DOCUMENT_KEY, decode, stats_of

    spark = spark_session(args.master, "osqueue-bench-write", {"spark.ui.enabled": "false"})
    spark.sparkContext.setLogLevel("ERROR")
    register(spark)
    with tempfile.TemporaryDirectory(prefix="osqueue-spark-write-") as tmp:
        url = Path(tmp).as_uri()
        loop = LoopThread("bench-broker")
        server = None
        if args.mode == "remote":
            server = BrokerServer(
                url,
                ServerConfig(listen="127.0.0.1:0"),
                BrokerConfig(dedupe_window_s=args.dedupe_window_s),
            )
            loop.run(server.start())
        try:

            def write(rows: int, queue: str) -> float:
                frame = spark.range(rows, numPartitions=args.partitions).selectExpr(
                    "concat('job-', cast(id as string)) as payload"
                )
                writer = (
                    frame.write.format("osqueue")
                    .option("url", url)
                    .option("queue", queue)
                    .option("batch_size", str(args.batch_size))
                    .option("embedded", str(args.mode == "embedded").lower())
                )
                started = time.perf_counter()
                writer.mode("append").save()
                return time.perf_counter() - started

            write(100, "warmup")
            seconds = write(args.rows, "bench")
            read: dict[str, float | int] = {}
            if args.read:
                started = time.perf_counter()
                rows = spark.read.format("osqueue").option("url", url).option("queue", "bench")
                read["read_rows"] = rows.load().count()
                read["read_seconds"] = round(time.perf_counter() - started, 3)
        finally:
            if server is not None:
                loop.run(server.stop())
            loop.close()
        doc = decode(blocking.with_storage(url, lambda s: s.read(DOCUMENT_KEY)).data)
        bench = stats_of(doc, time.time()).queues["bench"]
        document_bytes = len(blocking.with_storage(url, lambda s: s.get(DOCUMENT_KEY)))
    spark.stop()
    print(
        json.dumps(
            {
                "bench": "spark_write",
                "mode": args.mode,
                "rows": args.rows,
                "queued": bench.depth,
                "spilled": bench.spilled,
                "partitions": args.partitions,
                "batch_size": args.batch_size,
                "seconds": round(seconds, 3),
                "jobs_per_s": round(args.rows / seconds, 1),
                "document_bytes": document_bytes,
                **read,
            }
        )
    )


if __name__ == "__main__":
    main()
