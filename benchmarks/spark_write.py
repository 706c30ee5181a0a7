"""Jobs per second enqueued by the Spark data source from one DataFrame.

    .venv/bin/python benchmarks/spark_write.py [--rows 100000] [--partitions 2]
        [--batch-size 1000] [--master local[2]] [--mode remote|embedded]

Starts a broker served over gRPC on a fresh ``file://`` queue (``--mode
remote``: each Spark partition pushes through it in batches, the way
``df.write.format("osqueue")`` runs against a live queue) or none (``--mode
embedded``: the rows are pushed by an in-process broker when the write
commits).  A 100-row write warms Spark and the Python workers up first; the
timed write is the DataFrame of ``--rows`` rows.  Prints one JSON line.
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
    args = parser.parse_args()

    from osqueue.client.loop_thread import LoopThread
    from osqueue.server.runner import BrokerServer
    from osqueue.server.server import ServerConfig
    from osqueue.spark import blocking, register
    from osqueue.spark.worker import spark_session
    from osqueue.state import DOCUMENT_KEY, decode

    spark = spark_session(args.master, "osqueue-bench-write", {"spark.ui.enabled": "false"})
    spark.sparkContext.setLogLevel("ERROR")
    register(spark)
    with tempfile.TemporaryDirectory(prefix="osqueue-spark-write-") as tmp:
        url = Path(tmp).as_uri()
        loop = LoopThread("bench-broker")
        server = None
        if args.mode == "remote":
            server = BrokerServer(url, ServerConfig(listen="127.0.0.1:0"))
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
        finally:
            if server is not None:
                loop.run(server.stop())
            loop.close()
        doc = decode(blocking.with_storage(url, lambda s: s.read(DOCUMENT_KEY)).data)
        queued = sum(1 for job in doc.jobs.values() if job.queue == "bench")
        document_bytes = len(blocking.with_storage(url, lambda s: s.get(DOCUMENT_KEY)))
    spark.stop()
    print(
        json.dumps(
            {
                "bench": "spark_write",
                "mode": args.mode,
                "rows": args.rows,
                "queued": queued,
                "partitions": args.partitions,
                "batch_size": args.batch_size,
                "seconds": round(seconds, 3),
                "jobs_per_s": round(args.rows / seconds, 1),
                "document_bytes": document_bytes,
            }
        )
    )


if __name__ == "__main__":
    main()
