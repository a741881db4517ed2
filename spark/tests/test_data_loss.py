"""failOnDataLoss: offsets a query still had to read, deleted by retention, fail the query
(DataLossError, PULL_OFFSET_MOVED); with failOnDataLoss=false it goes on from the min offset."""

from __future__ import annotations

import json
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
from itest_support import Cluster, RawClient, wait_for

from ferry.admin import Admin
from ferry.client import Message, Producer
from ferry.protocol.messages import (
    DeleteExpiredCommitLogRequest,
    GetMinOffsetRequest,
    OffsetReply,
    OkReply,
)
from ferry.runtime.testing.cluster import running_cluster

pytestmark = [pytest.mark.integration, pytest.mark.spark, pytest.mark.timeout(600)]

TOPIC = "SparkAging"
# 64 KiB segments and no reserved time, so a deletion request removes all but the newest; the
# hourly deletion is 12 hours away so nothing else deletes
TINY = {
    "mappedFileSizeCommitLog": str(64 * 1024),
    "fileReservedTime": "0",
    "deleteWhen": f"{(time.localtime().tm_hour + 12) % 24:02d}",
}


@pytest.fixture(scope="module")
def cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Cluster]:
    with running_cluster(tmp_path_factory.mktemp("aging"), overrides=TINY) as c:
        yield c


def produce(cluster: Cluster, first: int, count: int) -> None:
    with Producer("pg-spark-aging", cluster.namesrv) as producer:
        for i in range(first, first + count, 10):
            producer.send_batch(
                [Message(TOPIC, f"{j:04d}".encode() * 250) for j in range(i, i + 10)]
            )


def delete_expired(cluster: Cluster, beyond: int) -> int:
    """Runs retention until the queue's min offset is past `beyond`; returns it."""
    broker = RawClient(cluster.broker_addr)
    try:

        def moved() -> int:
            done, _ = broker.call(DeleteExpiredCommitLogRequest())
            assert isinstance(done, OkReply), done
            reply, _ = broker.call(GetMinOffsetRequest(TOPIC, 0))
            assert isinstance(reply, OffsetReply)
            return reply.offset if reply.offset > beyond else 0

        low: int = wait_for(moved, timeout=60, what="retention past the query's offsets")
        return low
    finally:
        broker.close()


def test_a_query_behind_deleted_offsets_fails_unless_told_to_skip_them(
    spark: Any, cluster: Cluster, tmp_path: Path, run_query: Callable[..., Any]
) -> None:
    from pyspark.errors import PySparkException

    with Admin(cluster.namesrv) as admin:
        admin.create_topic(TOPIC, 1, 1)
    produce(cluster, 0, 10)
    out, ckpt = str(tmp_path / "out"), str(tmp_path / "ckpt")

    def run(**options: str) -> Any:
        df = (
            spark.readStream.format("ferry")
            .option("ferry.namesrv", cluster.namesrv)
            .option("subscribe", TOPIC)
            .option("startingOffsets", "earliest")
            .options(**options)
            .load()
        )
        return run_query(
            lambda: (
                df.writeStream.format("parquet")
                .option("path", out)
                .option("checkpointLocation", ckpt)
                .trigger(availableNow=True)
                .start()
            )
        )

    assert run().exception() is None  # offsets 0..9 read; the checkpoint says 10
    produce(cluster, 10, 290)  # ~300 KB: several segments
    low = delete_expired(cluster, 10)

    failed = run()
    assert failed.exception() is not None
    assert "removed by retention" in str(failed.exception())

    # a batch read from offset 0 fails the same way, before any task runs
    with pytest.raises(PySparkException, match="removed by retention"):
        spark.read.format("ferry").option("ferry.namesrv", cluster.namesrv).option(
            "subscribe", TOPIC
        ).option("startingOffsets", json.dumps({TOPIC: {"broker-a:0": 0}})).load().collect()

    skipped = run(failOnDataLoss="false")
    assert skipped.exception() is None
    bodies = [bytes(r.body[:4]).decode() for r in spark.read.parquet(out).collect()]
    assert sorted(bodies) == [f"{i:04d}" for i in [*range(10), *range(low, 300)]]
