"""osqueue on Apache Spark: the ``osqueue`` data source and Spark-backed worker handlers.

Needs the ``spark`` extra (``pip install 'osqueue[spark]'``)::

    import osqueue.spark
    osqueue.spark.register(spark)
    df = spark.read.format("osqueue").option("url", "file:///q").option("table", "archive").load()
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from osqueue.errors import MissingExtra

try:
    import pyspark  # noqa: F401
except ImportError as exc:  # pragma: no cover - depends on the environment
    raise MissingExtra("spark", "pyspark") from exc

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

    from .worker import spark_handlers as spark_handlers

__all__ = ["register", "spark_handlers"]


def register(spark: SparkSession) -> None:
    """Make ``format("osqueue")`` available in ``spark`` (idempotent)."""
    from .datasource import OsqueueDataSource

    spark.dataSource.register(OsqueueDataSource)


def __getattr__(name: str) -> Any:
    if name == "spark_handlers":
        from .worker import spark_handlers

        return spark_handlers
    raise AttributeError(f"module 'osqueue.spark' has no attribute {name!r}")
