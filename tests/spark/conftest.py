"""Spark fixtures: ONE local[2] SparkSession for the whole session, and queue URLs.

Helpers (served brokers, waiting, archive reads) are in ``spark_helpers``.
"""

from __future__ import annotations

import os
import sys
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest
from pyspark.sql import SparkSession

from osqueue.spark import register
from osqueue.storage import MemoryStorage


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    """A Spark test's time limit is its own: the one SparkSession starts in the
    first Spark test's setup (about a minute on a loaded machine), so setup is
    outside the limit (``func_only``)."""
    for item in items:
        if item.get_closest_marker("spark") is not None:
            item.add_marker(pytest.mark.timeout(func_only=True))


@pytest.fixture(scope="session")
def spark() -> Iterator[SparkSession]:
    # Spark starts its Python workers with $PYSPARK_PYTHON: this venv's interpreter.
    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    session = (
        SparkSession.builder.master("local[2]")
        .appName("osqueue-tests")
        .config("spark.ui.enabled", "false")
        .config("spark.ui.showConsoleProgress", "false")
        .config("spark.sql.shuffle.partitions", "2")
        .config("spark.default.parallelism", "2")
        .config("spark.python.worker.reuse", "true")
        .getOrCreate()
    )
    session.sparkContext.setLogLevel("ERROR")
    register(session)
    yield session
    session.stop()


@pytest.fixture
def file_queue(tmp_path: Path) -> str:
    directory = tmp_path / "queue"
    directory.mkdir()
    return directory.as_uri()


@pytest.fixture
def memory_queue() -> Iterator[str]:
    name = f"spark-{uuid.uuid4().hex}"
    yield f"memory://{name}"
    MemoryStorage.drop(name)
