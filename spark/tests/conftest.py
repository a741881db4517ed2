"""Fixtures for the Spark tests: one local[2] session (ECOSYSTEM.md's recipe) and one real
cluster per test module."""

from __future__ import annotations

import contextlib
import os
import sys
from collections.abc import Callable, Iterator
from typing import Any

import pytest
from itest_support import Cluster, wait_for

import ferry.spark
from ferry.runtime.testing.cluster import running_cluster


def spark_session(app: str) -> Any:
    os.environ["PYSPARK_PYTHON"] = sys.executable  # workers must run the venv's interpreter
    from pyspark.sql import SparkSession

    spark = (
        SparkSession.builder.master("local[2]")
        .appName(app)
        .config("spark.ui.enabled", "false")
        .config("spark.ui.showConsoleProgress", "false")
        .config("spark.sql.shuffle.partitions", "2")
        .config("spark.default.parallelism", "2")
        .config("spark.driver.bindAddress", "127.0.0.1")
        .config("spark.driver.host", "127.0.0.1")
        .config("spark.sql.session.timeZone", "UTC")
        .getOrCreate()
    )
    spark.sparkContext.setLogLevel("ERROR")
    ferry.spark.register(spark)
    return spark


@pytest.fixture(scope="session")
def spark() -> Iterator[Any]:
    """One session for every Spark test module: starting one costs seconds to minutes on a
    loaded machine, and the queries of different modules share nothing but it."""
    session = spark_session("ferry-spark-tests")
    yield session
    session.stop()


@pytest.fixture(scope="module")
def cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Cluster]:
    with running_cluster(tmp_path_factory.mktemp("cluster")) as c:
        yield c


# Spark gives a new Python worker a fixed 10 s to connect back (PythonWorkerFactory); a
# streaming query's source runner is such a worker, and on a loaded machine its imports alone
# can take longer. A query that died of that before reading anything is started again.
WORKER_CONNECT = ("to connect back", "CANNOT_OPEN_SOCKET")
STARTS = 3


def _died_starting(query: Any) -> bool:
    error = query.exception()
    return (
        error is not None
        and any(text in str(error) for text in WORKER_CONNECT)
        and not any(p["numInputRows"] for p in query.recentProgress)
    )


def run_to_end(make: Callable[[], Any], timeout: float = 300) -> Any:
    """Starts a query (AvailableNow) with make() and waits until it ends; returns it."""
    from pyspark.errors import PySparkException

    for attempt in range(STARTS):
        query = make()
        with contextlib.suppress(PySparkException):  # callers look at query.exception()
            query.awaitTermination(timeout)
        if attempt + 1 < STARTS and _died_starting(query):
            continue
        return query
    raise AssertionError("unreachable")


def start_running(make: Callable[[], Any], batches: int, timeout: float = 300) -> Any:
    """Starts a query with make() and waits until it has read something in `batches`
    micro-batches; returns it, still running."""
    for attempt in range(STARTS):
        query = make()

        def progressed(q: Any = query) -> bool:
            return (
                not q.isActive or sum(1 for p in q.recentProgress if p["numInputRows"]) >= batches
            )

        wait_for(progressed, timeout=timeout, what=f"{batches} micro-batches")
        if attempt + 1 < STARTS and _died_starting(query):
            continue
        assert query.isActive, query.exception()
        return query
    raise AssertionError("unreachable")


@pytest.fixture
def run_query() -> Callable[..., Any]:
    return run_to_end


@pytest.fixture
def start_query() -> Callable[..., Any]:
    return start_running
