"""``osqueue demo`` (``make demo``): the whole pipeline on this machine, with a crash.

1. starts a broker on a local ``file://`` queue (under ``--dir``), served on loopback;
2. writes WAL segments and queues one indexing job per segment through the
   Spark data source;
3. starts Spark index workers as separate processes, with a progress bar fed
   from the queue's stats;
4. SIGKILLs one worker while it holds jobs: the broker reclaims them after the
   heartbeat timeout and another worker re-runs them (attempts = 2); a new
   worker takes the dead one's place;
5. prints the Spark report over the archive and the chart's path;
6. recomputes every namespace in plain Python: ``verify: OK``.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import shutil
import signal
import subprocess
import sys
import time
import warnings
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any

import typer
from rich.console import Console
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn

from osqueue.cli import exits
from osqueue.cli.console import stdout
from osqueue.errors import OsqueueError
from osqueue.pipeline.dataroot import DataRoot
from osqueue.pipeline.task import INDEX_PER_NAMESPACE, INDEX_QUEUE
from osqueue.pipeline.wal import GenerateConfig

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

    from osqueue.broker import Broker
    from osqueue.pipeline.report import QueueReport
    from osqueue.pipeline.verify import VerifyReport

_DATA = "Data set"
_RUN = "Workers"


@dataclass(frozen=True, slots=True)
class DemoConfig:
    directory: Path
    data: GenerateConfig
    workers: int = 2
    batch_size: int = 4
    worker_master: str = "local[1]"
    heartbeat_timeout_s: float = 5.0
    kill: bool = True
    #: Kill a worker once this share of the jobs is done.
    kill_at: float = 0.3
    #: Indexing jobs of one namespace claimed at once (0: no cap)
    per_namespace: int = INDEX_PER_NAMESPACE


@dataclass
class WorkerProcess:
    name: str
    process: subprocess.Popen[bytes]
    metrics: Path
    log: Path
    killed: bool = False

    @property
    def alive(self) -> bool:
        return self.process.poll() is None


@dataclass
class Crash:
    """What the demo saw of the killed worker's jobs."""

    victim: str
    pid: int
    jobs: dict[str, str]  # job id -> segment
    killed_at: float
    reclaimed: dict[str, tuple[str, int, float]] = field(default_factory=dict)
    finished: set[str] = field(default_factory=set)


def demo(
    directory: Annotated[
        Path, typer.Option("--dir", envvar="OSQUEUE_DEMO_DIR", help="Where the demo's data goes.")
    ] = Path("demo-data"),
    namespaces: Annotated[
        int, typer.Option(min=1, envvar="OSQUEUE_DEMO_NAMESPACES", rich_help_panel=_DATA)
    ] = 8,
    segments: Annotated[
        int,
        typer.Option(
            min=1,
            envvar="OSQUEUE_DEMO_SEGMENTS",
            help="Segments per namespace (one indexing job each).",
            rich_help_panel=_DATA,
        ),
    ] = 8,
    rows: Annotated[
        int,
        typer.Option(
            min=1,
            envvar="OSQUEUE_DEMO_ROWS",
            help="WAL records per segment.",
            rich_help_panel=_DATA,
        ),
    ] = 5_000,
    keys: Annotated[
        int,
        typer.Option(
            min=1, envvar="OSQUEUE_DEMO_KEYS", help="Ids per namespace.", rich_help_panel=_DATA
        ),
    ] = 20_000,
    workers: Annotated[
        int,
        typer.Option(
            min=1,
            envvar="OSQUEUE_DEMO_WORKERS",
            help="Index worker processes.",
            rich_help_panel=_RUN,
        ),
    ] = 2,
    batch_size: Annotated[
        int,
        typer.Option(
            min=1,
            envvar="OSQUEUE_DEMO_BATCH_SIZE",
            help="Segments per Spark job.",
            rich_help_panel=_RUN,
        ),
    ] = 4,
    worker_master: Annotated[
        str,
        typer.Option(
            "--worker-master",
            envvar="OSQUEUE_DEMO_WORKER_MASTER",
            help="Spark master of each worker.",
            rich_help_panel=_RUN,
        ),
    ] = "local[1]",
    heartbeat_timeout_s: Annotated[
        float,
        typer.Option(
            min=1.0,
            envvar="OSQUEUE_DEMO_HEARTBEAT_TIMEOUT_S",
            help="Broker's heartbeat timeout (how soon a killed worker's jobs come back).",
            rich_help_panel=_RUN,
        ),
    ] = 5.0,
    kill: Annotated[
        bool,
        typer.Option(
            "--kill/--no-kill",
            envvar="OSQUEUE_DEMO_KILL",
            help="SIGKILL one worker mid-run.",
            rich_help_panel=_RUN,
        ),
    ] = True,
    per_namespace: Annotated[
        int,
        typer.Option(
            "--per-namespace",
            min=0,
            envvar="OSQUEUE_DEMO_PER_NAMESPACE",
            help="Indexing jobs of one namespace claimed at once, across workers "
            "(the index queue's max_claimed_per_group; 0: no cap, workers may race a manifest).",
            rich_help_panel=_RUN,
        ),
    ] = INDEX_PER_NAMESPACE,
) -> None:
    """Run the pipeline end to end on this machine, kill a worker on the way, verify."""
    config = DemoConfig(
        directory=directory,
        data=GenerateConfig(
            namespaces=namespaces,
            segments_per_namespace=segments,
            rows_per_segment=rows,
            keys_per_namespace=keys,
        ),
        workers=workers,
        batch_size=batch_size,
        worker_master=worker_master,
        heartbeat_timeout_s=heartbeat_timeout_s,
        kill=kill,
        per_namespace=per_namespace,
    )
    quiet_third_parties()
    ok = asyncio.run(Demo(config, stdout()).run())
    if not ok:
        raise typer.Exit(exits.ERROR)


class Demo:
    def __init__(self, config: DemoConfig, console: Console) -> None:
        self.config = config
        self.console = console
        base = config.directory.resolve()
        self.queue_dir = base / "queue"
        self.lake = base / "lake"
        self.logs = base / "logs"
        self.chart = base / "report.png"
        self.url = self.queue_dir.as_uri()
        self.root = DataRoot(str(self.lake))
        self.workers: list[WorkerProcess] = []
        self.crash: Crash | None = None
        self.figures: dict[str, float] = {}

    def say(self, step: str, text: str) -> None:
        self.console.print(f"[bold cyan]{step:>9}[/]  {text}")

    # ------------------------------------------------------------------ the run

    async def run(self) -> bool:
        from osqueue.broker import BrokerConfig
        from osqueue.server.runner import BrokerServer
        from osqueue.server.server import ServerConfig

        self.console.rule("[bold]osqueue demo[/]: WAL -> queue -> Spark index workers -> Parquet")
        self.clean()
        broker_config = BrokerConfig(heartbeat_timeout_s=self.config.heartbeat_timeout_s)
        server = BrokerServer(self.url, ServerConfig(listen="127.0.0.1:0"), broker_config)
        await server.start()
        try:
            assert server.broker is not None
            self.say(
                "broker",
                f"serving {self.url} at {server.address} "
                f"(heartbeat timeout {self.config.heartbeat_timeout_s:g} s)",
            )
            spark = await asyncio.to_thread(self.spark)
            try:
                return await self.pipeline(server.broker, spark)
            finally:
                await asyncio.to_thread(spark.stop)
        finally:
            self.stop_workers(hard=True)
            await server.stop()

    def clean(self) -> None:
        for path in (self.queue_dir, self.lake, self.logs):
            shutil.rmtree(path, ignore_errors=True)
        self.chart.unlink(missing_ok=True)
        self.queue_dir.mkdir(parents=True)
        self.logs.mkdir(parents=True)

    def spark(self) -> SparkSession:
        from osqueue.spark.worker import spark_session

        settings = {
            "spark.ui.enabled": "false",
            "spark.ui.showConsoleProgress": "false",
            "spark.sql.shuffle.partitions": "2",
        }
        # The JVM inherits stderr when it starts: give it the log file, not the terminal.
        with _stderr_to(self.logs / "demo-spark.log"):
            spark = spark_session("local[2]", "osqueue-demo", settings)
        spark.sparkContext.setLogLevel("ERROR")
        return spark

    async def pipeline(self, broker: Broker, spark: SparkSession) -> bool:
        from osqueue.pipeline.generate import enqueue
        from osqueue.pipeline.wal import write_wal

        data = self.config.data
        started = time.perf_counter()
        segments = await asyncio.to_thread(write_wal, self.root, data)
        wrote = time.perf_counter() - started
        self.say(
            "generate",
            f"{data.namespaces} namespaces x {data.segments_per_namespace} segments x "
            f"{data.rows_per_segment:,} records = {data.total_rows:,} WAL records "
            f"under {self.root.uri} ({wrote:.1f} s)",
        )
        cap = self.config.per_namespace
        await broker.client().set_queue(INDEX_QUEUE, max_claimed_per_group=cap)
        started = time.perf_counter()
        await asyncio.to_thread(enqueue, spark, self.url, self.root, segments)
        pushed = time.perf_counter() - started
        self.say(
            "enqueue",
            f"{len(segments)} indexing jobs pushed through the Spark data source "
            f"(df.write.format('osqueue')) in {pushed:.1f} s; "
            + (f"at most {cap} claimed per namespace" if cap else "no cap per namespace"),
        )
        self.start_workers(self.config.workers)
        self.say(
            "workers",
            f"{self.config.workers} Spark index workers ({self.config.worker_master} each, "
            f"{self.config.batch_size} segments per Spark job); logs in {self.logs}",
        )
        started = time.perf_counter()
        await self.follow(broker, len(segments))
        self.figures["index_wall_s"] = time.perf_counter() - started
        self.stop_workers(hard=False)
        report = await asyncio.to_thread(self.report, spark)
        checked = await asyncio.to_thread(self.verify)
        self.summary(report, checked, len(segments))
        return checked.ok

    # ------------------------------------------------------------------ workers

    def start_workers(self, count: int) -> None:
        for _ in range(count):
            self.start_worker()

    def start_worker(self) -> WorkerProcess:
        name = f"worker-{len(self.workers) + 1}"
        metrics = self.logs / f"{name}.json"
        log = self.logs / f"{name}.log"
        interval = max(0.2, self.config.heartbeat_timeout_s / 5)
        command = [
            sys.executable,
            "-m",
            "osqueue.cli.pipeline",
            "index",
            self.url,
            "--worker-id",
            name,
            "--batch-size",
            str(self.config.batch_size),
            "--heartbeat-interval-s",
            f"{interval:g}",
            "--wait-s",
            "1",
            "--metrics",
            str(metrics),
            "--spark-master",
            self.config.worker_master,
            "--spark-conf",
            "spark.ui.enabled=false",
            "--spark-conf",
            "spark.sql.shuffle.partitions=1",
        ]
        env = {**os.environ, "PYSPARK_PYTHON": sys.executable}
        with log.open("wb") as out:
            process = subprocess.Popen(
                command, stdout=out, stderr=subprocess.STDOUT, env=env, start_new_session=True
            )
        worker = WorkerProcess(name, process, metrics, log)
        self.workers.append(worker)
        return worker

    def stop_workers(self, *, hard: bool) -> None:
        """SIGTERM (graceful: finish, release, write metrics), then SIGKILL stragglers."""
        alive = [w for w in self.workers if w.alive]
        if not hard:
            for worker in alive:
                worker.process.send_signal(signal.SIGTERM)
            deadline = time.monotonic() + 60
            for worker in alive:
                with contextlib.suppress(subprocess.TimeoutExpired):
                    worker.process.wait(timeout=max(0.1, deadline - time.monotonic()))
        for worker in self.workers:
            # The whole process group: a worker's JVM too, even if the worker died first.
            with contextlib.suppress(ProcessLookupError):
                os.killpg(worker.process.pid, signal.SIGKILL)
            worker.process.wait()

    def kill(self, worker: WorkerProcess, broker: Broker) -> None:
        held = {
            job.id: _segment_of(job.payload)
            for job in broker.document.jobs.values()
            if job.status == "claimed" and job.claim is not None and job.claim.worker == worker.name
        }
        os.killpg(worker.process.pid, signal.SIGKILL)  # the worker and its JVM
        worker.process.wait()
        worker.killed = True
        self.crash = Crash(worker.name, worker.process.pid, held, time.monotonic())

    def victim(self, broker: Broker) -> WorkerProcess | None:
        """A live worker that has held claimed jobs for a moment (it is inside Spark)."""
        now = time.time()
        for worker in self.workers:
            if not worker.alive or worker.killed:
                continue
            for job in broker.document.jobs.values():
                claim = job.claim
                if (
                    job.status == "claimed"
                    and claim is not None
                    and claim.worker == worker.name
                    and now - claim.claimed_at.timestamp() > 0.5
                ):
                    return worker
        return None

    # ------------------------------------------------------------------ progress

    async def follow(self, broker: Broker, total: int) -> None:
        client = broker.client()
        columns = (
            TextColumn("[bold cyan]{task.description:>9}[/]"),
            BarColumn(),
            MofNCompleteColumn(),
            TextColumn("{task.fields[detail]}"),
            TimeElapsedColumn(),
        )
        with Progress(*columns, console=self.console, transient=False) as progress:
            task = progress.add_task("indexing", total=total, detail="")
            while True:
                stats = await client.stats()
                queue = stats.queues.get(INDEX_QUEUE)
                claimed = queue.claimed if queue is not None else 0
                live = sum(1 for w in self.workers if w.alive)
                detail = f"{claimed} running, {live} workers, {stats.pushed - stats.completed} left"
                progress.update(task, completed=stats.completed, detail=detail)
                self.watch_crash(broker, progress.console)
                if stats.completed >= total * self.config.kill_at:
                    self.maybe_kill(broker, progress.console)
                if stats.completed >= total and self.crash_settled():
                    return
                if live == 0:
                    raise OsqueueError(f"every index worker exited; see the logs in {self.logs}")
                await asyncio.sleep(0.25)

    def maybe_kill(self, broker: Broker, console: Console) -> None:
        if not self.config.kill or self.crash is not None:
            return
        worker = self.victim(broker)
        if worker is None:
            return
        self.kill(worker, broker)
        assert self.crash is not None
        held = ", ".join(sorted(self.crash.jobs)) or "none"
        console.print(
            f"[bold red]{'chaos':>9}[/]  SIGKILL {worker.name} (pid {self.crash.pid}) "
            f"while it held job(s) {held}"
        )
        replacement = self.start_worker()
        console.print(f"[bold cyan]{'workers':>9}[/]  started {replacement.name} in its place")

    def crash_settled(self) -> bool:
        return self.crash is None or self.crash.finished >= set(self.crash.jobs)

    def watch_crash(self, broker: Broker, console: Console) -> None:
        crash = self.crash
        if crash is None:
            return
        jobs = broker.document.jobs
        for job_id in crash.jobs:
            job = jobs.get(job_id)
            if (
                job_id not in crash.reclaimed
                and job is not None
                and job.claim is not None
                and job.claim.worker != crash.victim
            ):
                after = time.monotonic() - crash.killed_at
                crash.reclaimed[job_id] = (job.claim.worker, job.attempts, after)
                console.print(
                    f"[bold yellow]{'reclaim':>9}[/]  job {job_id} ({crash.jobs[job_id]}) "
                    f"reclaimed {after:.1f} s after the kill, re-run by {job.claim.worker}: "
                    f"attempts={job.attempts}"
                )
            done = job is None or job.status == "done"
            if done and job_id not in crash.reclaimed and job_id not in crash.finished:
                crash.finished.add(job_id)  # its completion beat the kill
                console.print(f"{'':>9}  job {job_id} had completed just before the kill")
            elif done and job_id in crash.reclaimed and job_id not in crash.finished:
                crash.finished.add(job_id)
                attempts = job.attempts if job is not None else crash.reclaimed[job_id][1]
                console.print(
                    f"[bold green]{'recovered':>9}[/]  job {job_id} completed with "
                    f"attempts={attempts}"
                )

    # ------------------------------------------------------------------ report and verify

    def report(self, spark: SparkSession) -> QueueReport:
        from osqueue.pipeline.report import build_report, render, save_chart

        report = build_report(spark, self.url, queue=INDEX_QUEUE)
        self.console.print(render(report))
        self.say("chart", str(save_chart(report, self.chart)))
        return report

    def verify(self) -> VerifyReport:
        from osqueue.pipeline.verify import verify

        result = verify(self.root)
        for line in result.differences:
            self.console.print(f"[red]{line}[/]")
        if result.ok:
            self.console.print(
                f"[bold green]verify: OK[/] ({result.namespaces} namespaces, "
                f"{result.segments} segments, {result.rows:,} rows of which "
                f"{result.live_rows:,} live, equal to a plain-Python replay of the WAL)"
            )
        else:
            self.console.print(
                f"[bold red]verify: FAILED[/] ({len(result.differences)} differences)"
            )
        return result

    def summary(self, report: QueueReport, checked: VerifyReport, segments: int) -> None:
        timings = [_load(w.metrics) for w in self.workers if not w.killed]
        active = sum(t.get("active_s", 0.0) for t in timings)
        queue_s = sum(t.get("queue_s", 0.0) for t in timings)
        spark_s = sum(t.get("spark_s", 0.0) for t in timings)
        storage_s = sum(t.get("storage_s", 0.0) for t in timings)
        conflicts = sum(int(t.get("conflicts", 0)) for t in timings)
        skipped = sum(int(t.get("segments_skipped", 0)) for t in timings)
        starts = [t["first_start"] for t in timings if t.get("first_start")]
        ends = [t["last_end"] for t in timings if t.get("last_end")]
        span = (max(ends) - min(starts)) if starts and ends else self.figures["index_wall_s"]
        rows = self.config.data.total_rows
        share = (lambda part: 100.0 * part / active) if active else (lambda part: 0.0)
        self.console.print(
            f"[bold]figures[/]  {segments / span:.2f} segments/s, {rows / span:,.0f} WAL rows/s "
            f"over {span:.1f} s of indexing; worker time: Spark {share(spark_s):.1f}%, "
            f"manifest I/O {share(storage_s):.1f}%, queue operations {share(queue_s):.1f}%; "
            f"{conflicts} manifest race(s) redone, {skipped} segment(s) found already "
            f"published and skipped; retried jobs in the archive: {report.retried}"
        )


@contextlib.contextmanager
def _stderr_to(path: Path) -> Iterator[None]:
    """Point file descriptor 2 at ``path`` for the duration (child processes keep it)."""
    sys.stderr.flush()
    saved = os.dup(2)
    with path.open("ab") as log:
        os.dup2(log.fileno(), 2)
    try:
        yield
    finally:
        sys.stderr.flush()
        os.dup2(saved, 2)
        os.close(saved)


def quiet_third_parties() -> None:
    """Keep the demo's terminal for the demo: gRPC's fork notices and a pandas
    version warning PySpark prints on start are noise here."""
    os.environ.setdefault("GRPC_VERBOSITY", "ERROR")
    os.environ.setdefault("GRPC_ENABLE_FORK_SUPPORT", "false")
    warnings.filterwarnings(
        "ignore", message="PySpark does not yet fully support pandas", category=FutureWarning
    )


def _segment_of(payload: bytes | None) -> str:
    from osqueue.pipeline.task import IndexTask

    if payload is None:
        return "?"
    try:
        return IndexTask.decode(payload).segment
    except OsqueueError:
        return "?"


def _load(path: Path) -> dict[str, Any]:
    try:
        loaded: dict[str, Any] = json.loads(path.read_text())
    except (OSError, ValueError):
        return {}
    return loaded
