"""spark.read.format("ferry"): every message exactly once, with its values; offsets options."""

from __future__ import annotations

import json
import time
from typing import Any

import pytest
from itest_support import Cluster

from ferry.admin import Admin
from ferry.client import Message, Producer, SendResult

pytestmark = [pytest.mark.integration, pytest.mark.spark, pytest.mark.timeout(600)]

TOPIC = "SparkBatch"
N = 400


@pytest.fixture(scope="module")
def sent(cluster: Cluster) -> dict[str, SendResult]:
    """N messages over the topic's 8 queues: body -> where it was stored."""
    with Admin(cluster.namesrv) as admin:
        admin.create_topic(TOPIC, 8, 8)
    with Producer("pg-spark-batch", cluster.namesrv) as producer:  # round robin over queues
        return {
            f"m-{i}": producer.send(
                Message(
                    TOPIC,
                    f"m-{i}".encode(),
                    tags=f"tag{i % 3}",
                    keys=[f"k{i}", "all"],
                    properties={"n": str(i)},
                )
            )
            for i in range(N)
        }


def load(spark: Any, cluster: Cluster, **options: str) -> Any:
    r = spark.read.format("ferry").option("ferry.namesrv", cluster.namesrv)
    return r.option("subscribe", TOPIC).options(**options).load()


def test_batch_read_of_8_queues_returns_each_message_once_with_its_values(
    spark: Any, cluster: Cluster, sent: dict[str, SendResult]
) -> None:
    started_ms = int(time.time() * 1000) - 120_000
    df = load(spark, cluster)
    assert df.rdd.getNumPartitions() == 1  # 8 short queue ranges, one task
    rows = df.collect()
    assert len(rows) == N
    by_body = {bytes(r.body).decode(): r for r in rows}
    assert set(by_body) == set(sent)
    assert len({r.queue_id for r in rows}) == 8
    for body, result in sent.items():
        row = by_body[body]
        i = int(body.split("-")[1])
        assert row.topic == TOPIC
        assert row.broker == result.queue.broker_name
        assert (row.queue_id, row.queue_offset) == (result.queue.queue_id, result.queue_offset)
        assert row.msg_id == result.msg_id
        assert row.tags == f"tag{i % 3}"
        assert row.keys == [f"k{i}", "all"]
        assert row.properties["n"] == str(i)
        assert row.born_timestamp.timestamp() * 1000 >= started_ms
        assert row.store_timestamp >= row.born_timestamp


def test_min_partitions_gives_each_queue_range_its_own_partition(
    spark: Any, cluster: Cluster, sent: dict[str, SendResult]
) -> None:
    df = load(spark, cluster, minPartitions="8")
    assert df.rdd.getNumPartitions() == 8
    per_partition = df.rdd.glom().map(lambda rows: {r.queue_id for r in rows}).collect()
    assert sorted(len(queues) for queues in per_partition) == [1] * 8
    assert df.count() == N


def test_large_queue_ranges_are_split_into_more_partitions(
    spark: Any, cluster: Cluster, sent: dict[str, SendResult]
) -> None:
    df = load(spark, cluster, maxOffsetsPerPartition="20")
    assert df.rdd.getNumPartitions() >= N // 20
    offsets = [
        (r.queue_id, r.queue_offset) for r in df.select("queue_id", "queue_offset").collect()
    ]
    assert len(offsets) == len(set(offsets)) == N


def test_starting_and_ending_offsets_select_the_ranges_asked_for(
    spark: Any, cluster: Cluster, sent: dict[str, SendResult]
) -> None:
    broker = next(iter(sent.values())).queue.broker_name
    q0, q1 = f"{broker}:0", f"{broker}:1"
    per_queue = {
        q: sum(1 for r in sent.values() if r.queue.queue_id == i) for i, q in ((0, q0), (1, q1))
    }
    starting = json.dumps({TOPIC: {q0: 10, q1: -2}})
    ending = json.dumps({TOPIC: {q0: 20, q1: -1}})
    rows = load(spark, cluster, startingOffsets=starting, endingOffsets=ending).collect()
    got: dict[int, list[int]] = {}
    for r in rows:
        got.setdefault(r.queue_id, []).append(r.queue_offset)
    assert sorted(got[0]) == list(range(10, 20))
    assert sorted(got[1]) == list(range(per_queue[q1]))
    assert len(rows) == N - per_queue[q0] + 10  # other queues: earliest to latest

    # only queue 0's first 5 messages: every other queue ends where it starts
    ending = json.dumps({TOPIC: {f"{broker}:{i}": (5 if i == 0 else 0) for i in range(8)}})
    rows = load(spark, cluster, endingOffsets=ending).collect()
    assert sorted((r.queue_id, r.queue_offset) for r in rows) == [(0, i) for i in range(5)]


def test_bad_offsets_options_fail_before_any_task_runs(spark: Any, cluster: Cluster) -> None:
    from pyspark.errors import PySparkException

    with pytest.raises(PySparkException, match="beyond its end"):
        load(spark, cluster, startingOffsets=json.dumps({TOPIC: {"broker-a:0": 10**9}})).collect()
    with pytest.raises(PySparkException, match="no queue"):
        load(spark, cluster, endingOffsets=json.dumps({TOPIC: {"broker-a:99": 1}})).collect()
    with pytest.raises(PySparkException, match="streaming reads only"):
        load(spark, cluster, startingOffsets="latest").collect()


def test_ferry_filter_is_pushed_down_to_the_brokers(
    spark: Any, cluster: Cluster, sent: dict[str, SendResult]
) -> None:
    from pyspark.errors import PySparkException

    with Admin(cluster.namesrv) as admin:
        admin.update_broker_config({"enablePropertyFilter": "true"}, cluster="DefaultCluster")
    sql = "n < 10 OR (n >= 390 AND TAGS <> 'tag0')"
    rows = load(spark, cluster, **{"ferry.filter": sql}).collect()
    wanted = [i for i in range(N) if i < 10 or (i >= 390 and i % 3 != 0)]
    assert sorted(int(r.properties["n"]) for r in rows) == wanted
    # the rows keep their place in the queues: the skipped messages were not read
    for r in rows:
        assert sent[bytes(r.body).decode()].queue_offset == r.queue_offset
    with pytest.raises(PySparkException, match="line 1, column 5"):
        load(spark, cluster, **{"ferry.filter": "n < 'x'"}).collect()
