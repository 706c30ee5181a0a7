"""``osqueue pipeline``: the shipped Spark pipeline, one subcommand per step.

    osqueue pipeline generate URL --root file:///data/lake    # WAL segments + one job each
    osqueue pipeline index URL --spark-master spark://h:7077  # Spark index workers
    osqueue pipeline report URL --chart report.png            # Spark over the archive
    osqueue pipeline verify --root file:///data/lake          # plain-Python check

``URL`` is the queue (any osqueue backend); ``--root`` is the data root, a
Hadoop URI (``file://`` by default for bare paths).
"""

from __future__ import annotations

import asyncio
import json
import os
import sys
import warnings
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import TYPE_CHECKING, Annotated

import typer

from osqueue.cli import exits
from osqueue.cli.console import stdout
from osqueue.cli.options import (
    Token,
    Url,
    connecting,
)
from osqueue.client.worker import WorkerConfig
from osqueue.errors import InvalidInput
from osqueue.inspect.options import ClientOptions, open_client
from osqueue.pipeline.dataroot import DataRoot
from osqueue.pipeline.task import INDEX_QUEUE
from osqueue.pipeline.wal import GenerateConfig

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

    from osqueue.pipeline.worker import TimedIndexHandler

pipeline_app = typer.Typer(
    name="pipeline",
    help="The shipped Spark pipeline: WAL segments -> indexing jobs -> Parquet, and reports.",
    no_args_is_help=True,
    add_completion=False,
    pretty_exceptions_enable=False,
)

_SPARK = "Spark"
_DATA = "Data set"

Root = Annotated[
    str,
    typer.Option(
        "--root",
        envvar="OSQUEUE_PIPELINE_ROOT",
        help="Data root (Hadoop URI, or a path for file://) holding wal/ and index/.",
    ),
]
Master = Annotated[
    str | None,
    typer.Option(
        "--spark-master",
        envvar="OSQUEUE_SPARK_MASTER",
        help="Spark master URL (default local[*]).",
        rich_help_panel=_SPARK,
    ),
]
SparkConf = Annotated[
    list[str] | None,
    typer.Option(
        "--spark-conf",
        envvar="OSQUEUE_SPARK_CONF",
        help="Spark setting key=value (repeat it).",
        rich_help_panel=_SPARK,
    ),
]
QueueName = Annotated[
    str, typer.Option("--queue", "-q", envvar="OSQUEUE_QUEUE", help="The indexing queue.")
]


def parse_conf(pairs: list[str] | None) -> dict[str, str]:
    conf: dict[str, str] = {}
    for pair in pairs or []:
        key, sep, value = pair.partition("=")
        if not sep or not key.strip():
            raise InvalidInput(f"{pair!r} is not key=value", field="spark_conf")
        conf[key.strip()] = value.strip()
    return conf


@contextmanager
def spark_session(
    master: str | None, app_name: str, conf: dict[str, str]
) -> Iterator[SparkSession]:
    from osqueue.spark.worker import spark_session as make

    warnings.filterwarnings(  # printed by PySpark on start with pandas 3; not ours to fix
        "ignore", message="PySpark does not yet fully support pandas", category=FutureWarning
    )
    spark = make(master, app_name, {"spark.ui.showConsoleProgress": "false", **conf})
    spark.sparkContext.setLogLevel("ERROR")
    try:
        yield spark
    finally:
        spark.stop()


@contextmanager
def osqueue_errors() -> Iterator[None]:
    """Turn a Spark failure caused by an osqueue error back into that error."""
    from osqueue.spark.errors import osqueue_error

    try:
        yield
    except Exception as exc:
        found = osqueue_error(exc)
        if found is None or found is exc:
            raise
        raise found from exc


@pipeline_app.command()
def generate(
    url: Url,
    root: Root,
    namespaces: Annotated[
        int, typer.Option(min=1, envvar="OSQUEUE_GEN_NAMESPACES", rich_help_panel=_DATA)
    ] = 8,
    segments: Annotated[
        int,
        typer.Option(
            min=1,
            envvar="OSQUEUE_GEN_SEGMENTS",
            help="Segments per namespace.",
            rich_help_panel=_DATA,
        ),
    ] = 6,
    rows: Annotated[
        int,
        typer.Option(
            min=1, envvar="OSQUEUE_GEN_ROWS", help="Records per segment.", rich_help_panel=_DATA
        ),
    ] = 2_000,
    keys: Annotated[
        int,
        typer.Option(
            min=1, envvar="OSQUEUE_GEN_KEYS", help="Ids per namespace.", rich_help_panel=_DATA
        ),
    ] = 5_000,
    delete_ratio: Annotated[
        float,
        typer.Option(min=0.0, max=1.0, envvar="OSQUEUE_GEN_DELETE_RATIO", rich_help_panel=_DATA),
    ] = 0.1,
    seed: Annotated[int, typer.Option(envvar="OSQUEUE_GEN_SEED", rich_help_panel=_DATA)] = 7,
    queue: QueueName = INDEX_QUEUE,
    embedded: Annotated[
        bool,
        typer.Option(
            "--embedded",
            envvar="OSQUEUE_EMBEDDED",
            help="Push through an in-process broker when no live broker holds the queue.",
        ),
    ] = False,
    token: Token = None,
    spark_master: Master = None,
    spark_conf: SparkConf = None,
) -> None:
    """Write WAL segments under --root and queue one indexing job per segment."""
    from osqueue.pipeline.generate import generate as run_generate

    config = GenerateConfig(
        namespaces=namespaces,
        segments_per_namespace=segments,
        rows_per_segment=rows,
        keys_per_namespace=keys,
        delete_ratio=delete_ratio,
        seed=seed,
    )
    data = DataRoot(root)
    options = {"embedded": str(embedded).lower()}
    if token:
        options["token"] = token
    conf = parse_conf(spark_conf)
    with osqueue_errors():
        asyncio.run(_limit_queue(url, queue, token=token, embedded=embedded))
    with spark_session(spark_master, "osqueue-generate", conf) as spark, osqueue_errors():
        done = run_generate(spark, url, data, config, queue=queue, options=options)
    stdout().print(
        f"wrote {len(done.segments):,} segments ({done.rows:,} records) under {data.uri}; "
        f"queued {len(done.segments):,} indexing jobs on {queue!r}"
    )


async def _limit_queue(url: str, queue: str, *, token: str | None, embedded: bool) -> None:
    """The index queue claims one job per namespace at a time (see limit_index_queue)."""
    from osqueue.client.remote import connect
    from osqueue.pipeline.generate import limit_index_queue

    client = await connect(url, token=token, embedded=embedded)
    try:
        await limit_index_queue(client, queue)
    finally:
        await client.close()


@pipeline_app.command()
@connecting
def index(
    url: Url,
    queue: QueueName = INDEX_QUEUE,
    batch_size: Annotated[
        int,
        typer.Option(
            "--batch-size",
            min=1,
            envvar="OSQUEUE_BATCH_SIZE",
            help="Segments claimed and merged in one Spark job.",
        ),
    ] = 4,
    concurrency: Annotated[
        int | None,
        typer.Option(
            "--concurrency",
            "-c",
            min=1,
            envvar="OSQUEUE_CONCURRENCY",
            help="Jobs whose handlers run at once (default: the batch size).",
        ),
    ] = None,
    burst: Annotated[
        bool, typer.Option("--burst", envvar="OSQUEUE_BURST", help="Exit when nothing is left.")
    ] = False,
    wait_s: Annotated[float, typer.Option("--wait-s", min=0.0, envvar="OSQUEUE_WAIT_S")] = 5.0,
    heartbeat_interval_s: Annotated[
        float | None,
        typer.Option(
            "--heartbeat-interval-s",
            min=0.001,
            envvar="OSQUEUE_HEARTBEAT_INTERVAL_S",
            help="Default: a third of the broker's heartbeat timeout (30 s if unknown); "
            "set it below the broker's --heartbeat-timeout-s.",
        ),
    ] = None,
    worker_id: Annotated[
        str | None, typer.Option("--worker-id", envvar="OSQUEUE_WORKER_ID")
    ] = None,
    metrics: Annotated[
        Path | None,
        typer.Option(
            "--metrics",
            envvar="OSQUEUE_METRICS",
            help="Write this worker's timings (JSON) here when it stops.",
        ),
    ] = None,
    spark_master: Master = None,
    spark_conf: SparkConf = None,
    *,
    options: ClientOptions,
) -> None:
    """Run a Spark index worker: fold claimed segments into their namespaces' indexes."""
    config = WorkerConfig(
        queues=(queue,),
        concurrency=concurrency or batch_size,
        batch_size=batch_size,
        worker_id=worker_id,
        heartbeat_interval_s=heartbeat_interval_s,
        wait_s=wait_s,
        burst=burst,
    )
    with spark_session(spark_master, "osqueue-index", parse_conf(spark_conf)) as spark:
        handler = asyncio.run(_run_index(options, spark, config))
    timings = handler.timings
    if metrics is not None:
        metrics.parent.mkdir(parents=True, exist_ok=True)
        metrics.write_text(json.dumps(timings.to_dict()))
    print(
        f"index worker stopped: {timings.jobs} segments in {timings.calls} batches, "
        f"spark {timings.spark_s:.1f} s, queue {timings.queue_s:.1f} s",
        file=sys.stderr,
    )


async def _run_index(
    options: ClientOptions, spark: SparkSession, config: WorkerConfig
) -> TimedIndexHandler:
    from osqueue.pipeline.worker import index_worker

    async with open_client(options) as client:
        worker, handler = index_worker(client, spark, config)
        worker.install_signal_handlers()
        await worker.run()
        return handler


@pipeline_app.command()
def report(
    url: Url,
    chart: Annotated[
        Path,
        typer.Option("--chart", envvar="OSQUEUE_CHART", help="Where to save the PNG chart."),
    ] = Path("osqueue-report.png"),
    queue: Annotated[
        str | None,
        typer.Option("--queue", "-q", envvar="OSQUEUE_QUEUE", help="Only this queue's jobs."),
    ] = None,
    spark_master: Master = None,
    spark_conf: SparkConf = None,
) -> None:
    """Spark over the archive: throughput, queue wait and run time, attempts, dead letters."""
    from osqueue.pipeline.report import build_report, render, save_chart

    conf = parse_conf(spark_conf)
    with spark_session(spark_master, "osqueue-report", conf) as spark, osqueue_errors():
        result = build_report(spark, url, queue=queue)
    console = stdout()
    console.print(render(result))
    console.print(f"chart: {save_chart(result, chart)}")


@pipeline_app.command()
def verify(root: Root) -> None:
    """Recompute every namespace from the WAL in plain Python and compare with the index."""
    from osqueue.pipeline.verify import verify as run_verify

    result = run_verify(DataRoot(root))
    console = stdout()
    if result.ok:
        console.print(
            f"verify: OK ({result.namespaces} namespaces, {result.segments} segments, "
            f"{result.rows:,} rows of which {result.live_rows:,} live)"
        )
        return
    for line in result.differences:
        console.print(f"[red]{line}[/]")
    console.print(f"[bold red]verify: FAILED[/] ({len(result.differences)} differences)")
    raise typer.Exit(exits.ERROR)


if __name__ == "__main__":  # python -m osqueue.cli.pipeline (the demo's worker processes)
    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    pipeline_app(prog_name="osqueue pipeline")
