"""Ferry for Spark: a PySpark (4.x) data source and sink, and pipelines built on them.

import ferry.spark

ferry.spark.register(spark)
df = (spark.read.format("ferry").option("ferry.namesrv", "127.0.0.1:9876")
      .option("subscribe", "orders").load())

Options, the row schema and what is exactly-once: spark/README.md.
"""

from __future__ import annotations

from typing import Any

from ferry.spark.errors import DataLossError

__all__ = ["DataLossError", "register"]


def register(spark: Any) -> None:
    """Adds the `ferry` format to a SparkSession (pyspark is imported only here)."""
    from ferry.spark.source import FerryDataSource

    spark.dataSource.register(FerryDataSource)
