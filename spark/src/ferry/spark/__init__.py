"""Ferry for Spark: a PySpark (4.x) data source and sink, and pipelines built on them.

import ferry.spark

ferry.spark.register(spark)
df = (spark.read.format("ferry").option("ferry.namesrv", "127.0.0.1:9876")
      .option("subscribe", "orders").load())

Options, the row schema and what is exactly-once: spark/README.md.
"""

from __future__ import annotations

import os
import sys
from typing import Any

from ferry.spark.errors import DataLossError

__all__ = ["DataLossError", "register", "worker_python"]

PYSPARK_PYTHON_CONF = "spark.pyspark.python"


def worker_python(sc: Any) -> str | None:
    """The interpreter the source's Python workers run: the user's choice (Spark's
    spark.pyspark.python, else PYSPARK_PYTHON), else on a local master this very interpreter
    (its packages include ferry; the `python3` on PATH may be another one), else None: PySpark's
    own default, as executors on other machines may not have this interpreter's path."""
    chosen = sc.getConf().get(PYSPARK_PYTHON_CONF) or os.environ.get("PYSPARK_PYTHON")
    if chosen:
        return str(chosen)
    if str(sc.master).startswith("local"):
        return sys.executable
    return None


def register(spark: Any) -> None:
    """Adds the `ferry` format to a SparkSession (pyspark is imported only here), its workers
    running worker_python().

    A SparkContext reads PYSPARK_PYTHON once, when it is created, into its pythonExec, and
    registering a data source captures pythonExec at that moment for every worker the source
    will ever start. PySpark has no public way to change it on a running context, so
    pythonExec is set for the registration alone and put back: the session's other Python
    work (UDFs, RDDs) keeps the interpreter PySpark chose."""
    from ferry.spark.source import FerryDataSource

    sc = getattr(spark, "sparkContext", None)  # Spark Connect: the server's Python runs it
    wanted = None if sc is None else worker_python(sc)
    if sc is None or wanted is None or wanted == sc.pythonExec:
        spark.dataSource.register(FerryDataSource)
        return
    before, sc.pythonExec = sc.pythonExec, wanted
    try:
        spark.dataSource.register(FerryDataSource)
    finally:
        sc.pythonExec = before
