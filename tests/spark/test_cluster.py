"""The ``--spark-master`` path: index workers on a real Spark standalone cluster.

The test starts a master and a worker from the pyspark package's own
``bin/spark-class`` on 127.0.0.1 (free ports, REST server off), waits until
the master's JSON status page shows the worker ALIVE, runs ``osqueue pipeline
index --spark-master spark://...`` as a separate process, and stops both.
"""

from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import sys
import urllib.request
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pyspark
import pytest
from pyspark.sql import SparkSession
from spark_helpers import served_broker, wait_until

from osqueue.pipeline.dataroot import DataRoot
from osqueue.pipeline.generate import enqueue
from osqueue.pipeline.verify import verify
from osqueue.pipeline.wal import GenerateConfig, write_wal

pytestmark = [pytest.mark.spark, pytest.mark.slow]

SPARK_HOME = Path(pyspark.__file__).parent


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port: int = sock.getsockname()[1]
        return port


@dataclass
class Cluster:
    master_url: str
    status_url: str

    def status(self) -> dict[str, Any]:
        try:
            with urllib.request.urlopen(self.status_url, timeout=2) as response:
                status: dict[str, Any] = json.load(response)
                return status
        except OSError:
            return {}


def start(args: list[str], log: Path, env: dict[str, str]) -> subprocess.Popen[bytes]:
    with log.open("wb") as out:
        return subprocess.Popen(
            [str(SPARK_HOME / "bin" / "spark-class"), *args],
            stdout=out,
            stderr=subprocess.STDOUT,
            env=env,
            start_new_session=True,
        )


def stop(process: subprocess.Popen[bytes]) -> None:
    if process.poll() is None:
        os.killpg(process.pid, signal.SIGTERM)
        try:
            process.wait(timeout=20)
        except subprocess.TimeoutExpired:
            os.killpg(process.pid, signal.SIGKILL)
            process.wait()


@pytest.fixture(scope="module")
def cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Cluster]:
    logs = tmp_path_factory.mktemp("spark-cluster")
    env = {
        **os.environ,
        "SPARK_HOME": str(SPARK_HOME),
        "SPARK_LOCAL_IP": "127.0.0.1",
        "SPARK_MASTER_OPTS": "-Dspark.master.rest.enabled=false",
        "PYSPARK_PYTHON": sys.executable,
    }
    port, ui = free_port(), free_port()
    found = Cluster(f"spark://127.0.0.1:{port}", f"http://127.0.0.1:{ui}/json/")
    master_args = ["org.apache.spark.deploy.master.Master", "--host", "127.0.0.1"]
    master_args += ["--port", str(port), "--webui-port", str(ui)]
    master = start(master_args, logs / "master.log", env)
    worker = None
    try:
        wait_until(lambda: found.status().get("status") == "ALIVE", timeout_s=90, what="the master")
        worker_args = ["org.apache.spark.deploy.worker.Worker", found.master_url]
        worker_args += ["--host", "127.0.0.1", "--webui-port", str(free_port())]
        worker_args += ["--cores", "1", "--memory", "1g", "--work-dir", str(logs / "work")]
        worker = start(worker_args, logs / "worker.log", env)
        wait_until(
            lambda: found.status().get("aliveworkers", 0) >= 1, timeout_s=90, what="a worker"
        )
        yield found
    finally:
        if worker is not None:
            stop(worker)
        stop(master)


def test_index_workers_run_on_a_standalone_cluster(
    cluster: Cluster, spark: SparkSession, tmp_path: Path, file_queue: str
) -> None:
    root = DataRoot(str(tmp_path / "lake"))
    segments = write_wal(
        root,
        GenerateConfig(
            namespaces=2, segments_per_namespace=2, rows_per_segment=300, keys_per_namespace=100
        ),
    )
    with served_broker(file_queue) as served:
        enqueue(spark, file_queue, root, segments)
        command = [
            sys.executable,
            "-m",
            "osqueue.cli.pipeline",
            "index",
            file_queue,
            "--burst",
            "--wait-s",
            "0.5",
            "--batch-size",
            "4",
            "--spark-master",
            cluster.master_url,
            "--spark-conf",
            "spark.ui.enabled=false",
            "--spark-conf",
            "spark.executor.memory=512m",
            "--spark-conf",
            "spark.cores.max=1",
        ]
        env = {**os.environ, "SPARK_LOCAL_IP": "127.0.0.1", "PYSPARK_PYTHON": sys.executable}
        done = subprocess.run(command, env=env, capture_output=True, timeout=240, check=False)
        assert done.returncode == 0, done.stdout.decode() + done.stderr.decode()
        assert served.broker.document.stats.completed == len(segments)
    apps = cluster.status().get("completedapps", []) + cluster.status().get("activeapps", [])
    assert "osqueue-index" in [app["name"] for app in apps]
    report = verify(root)
    assert report.ok, report.differences
    assert report.segments == len(segments)
