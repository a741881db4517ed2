"""spark.readStream.format("ferry"): offsets in the checkpoint, read limits, group commits,
Trigger.AvailableNow; and the sink, batch and streaming, read back by a Ferry consumer."""

from __future__ import annotations

import json
import re
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from itest_support import Cluster

from ferry.admin import Admin
from ferry.client import ConsumeFromWhere, Message, MessageExt, Producer, PullConsumer

pytestmark = [pytest.mark.integration, pytest.mark.spark, pytest.mark.timeout(600)]

TOPIC = "SparkStream"
GROUP = "cg-spark-stream"


def produce(cluster: Cluster, topic: str, first: int, count: int) -> None:
    with Producer("pg-spark-stream", cluster.namesrv) as producer:  # round robin over queues
        for i in range(first, first + count):
            producer.send(Message(topic, f"s-{i}".encode(), keys=[f"s-{i}"]))


def stream(spark: Any, cluster: Cluster, topic: str, **options: str) -> Any:
    reader = spark.readStream.format("ferry").option("ferry.namesrv", cluster.namesrv)
    return reader.option("subscribe", topic).options(**options).load()


def drain(cluster: Cluster, topic: str, count: int) -> list[MessageExt]:
    got: list[MessageExt] = []
    with PullConsumer("cg-" + topic, cluster.namesrv, ConsumeFromWhere.FIRST_OFFSET) as consumer:
        consumer.subscribe(topic)
        deadline = time.monotonic() + 60
        while len(got) < count:
            assert time.monotonic() < deadline, f"only {len(got)} of {count} messages"
            got.extend(consumer.poll(timeout=1.0))
    return got


def test_a_query_stopped_midway_and_restarted_from_its_checkpoint_counts_each_message_once(
    spark: Any,
    cluster: Cluster,
    tmp_path: Path,
    start_query: Callable[..., Any],
    run_query: Callable[..., Any],
) -> None:
    with Admin(cluster.namesrv) as admin:
        admin.create_topic(TOPIC, 8, 8)
    produce(cluster, TOPIC, 0, 200)
    out, ckpt = str(tmp_path / "out"), str(tmp_path / "ckpt")
    options = {"startingOffsets": "earliest", "maxOffsetsPerTrigger": "40", "group": GROUP}

    def start(**trigger: Any) -> Any:
        return (
            stream(spark, cluster, TOPIC, **options)
            .writeStream.format("parquet")
            .option("path", out)
            .option("checkpointLocation", ckpt)
            .trigger(**trigger)
            .start()
        )

    first = start_query(lambda: start(processingTime="0 seconds"), batches=2)
    first.stop()  # in the middle: 200 messages take 5 batches of 40
    progress = list(first.recentProgress)
    produce(cluster, TOPIC, 200, 200)

    second = run_query(lambda: start(availableNow=True))
    assert second.exception() is None
    assert not second.isActive
    progress += second.recentProgress

    rows = spark.read.parquet(out).select("body", "queue_id", "queue_offset").collect()
    bodies = sorted(bytes(r.body).decode() for r in rows)
    assert bodies == sorted(f"s-{i}" for i in range(400))  # each exactly once
    assert len({(r.queue_id, r.queue_offset) for r in rows}) == 400
    assert all(p["numInputRows"] <= 40 for p in progress)  # maxOffsetsPerTrigger
    end = progress[-1]["sources"][0]["endOffset"]
    assert re.fullmatch(r".*broker-a:7.*", str(end))

    # the group's committed offsets are where the last batch started: Spark tells a source a
    # batch is done when it plans the next one, which AvailableNow's last batch never has
    read = [p for p in progress if p["numInputRows"]]
    last = json.loads(str(read[-1]["sources"][0]["startOffset"]))[TOPIC]
    with Admin(cluster.namesrv) as admin:
        queues = admin.queues(TOPIC)
        committed = {
            f"{q.broker_name}:{q.queue_id}": admin.consumer_offset(GROUP, q) for q in queues
        }
        lag = sum(admin.max_offset(q) for q in queues) - sum(last.values())
    assert committed == last
    assert 0 < lag <= 40


def test_rows_written_by_the_sink_are_read_back_intact_by_a_consumer(
    spark: Any, cluster: Cluster
) -> None:
    from pyspark.sql.types import (
        ArrayType,
        BinaryType,
        MapType,
        StringType,
        StructField,
        StructType,
    )

    schema = StructType(
        [
            StructField("topic", StringType()),
            StructField("body", BinaryType()),
            StructField("tags", StringType()),
            StructField("keys", ArrayType(StringType())),
            StructField("properties", MapType(StringType(), StringType())),
        ]
    )
    rows = [
        ("SinkA" if i % 2 else "SinkB", bytes([i, 0, 255]), f"t{i % 2}", [f"k{i}"], {"n": str(i)})
        for i in range(60)
    ]
    spark.createDataFrame(rows, schema).repartition(2).write.format("ferry").option(
        "ferry.namesrv", cluster.namesrv
    ).mode("append").save()
    got = drain(cluster, "SinkA", 30) + drain(cluster, "SinkB", 30)
    seen = {}
    for m in got:
        i = int(m.properties["n"])
        seen[i] = m
        assert m.body == bytes([i, 0, 255])
        assert m.topic == ("SinkA" if i % 2 else "SinkB")
        assert (m.tags, m.keys) == (f"t{i % 2}", [f"k{i}"])
        assert re.fullmatch(r"[0-9A-F]{32}", m.msg_id)  # deterministic, per (write, task, row)
    assert sorted(seen) == list(range(60))
    assert len({m.msg_id for m in got}) == 60


def test_a_streaming_query_writes_a_topic_into_another_with_string_bodies(
    spark: Any, cluster: Cluster, tmp_path: Path, run_query: Callable[..., Any]
) -> None:
    from pyspark.sql import functions as F

    with Admin(cluster.namesrv) as admin:
        admin.create_topic("Upper", 2, 2)
    produce(cluster, "Upper", 0, 20)
    query = run_query(
        lambda: (
            stream(spark, cluster, "Upper", startingOffsets="earliest")
            .select(F.upper(F.col("body").cast("string")).alias("body"), "keys", "properties")
            .writeStream.format("ferry")
            .option("ferry.namesrv", cluster.namesrv)
            .option("topic", "Uppered")
            .option("checkpointLocation", str(tmp_path / "ckpt"))
            .trigger(availableNow=True)
            .start()
        )
    )
    assert query.exception() is None
    got = drain(cluster, "Uppered", 20)
    assert sorted(m.body for m in got) == sorted(f"S-{i}".encode() for i in range(20))
    assert all(m.keys == [m.body.decode().lower()] for m in got)
