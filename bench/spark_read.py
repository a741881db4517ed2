"""The Spark connector on a local cluster: batch read throughput and streaming latency.

    uv run python bench/spark_read.py [--runs 3] [--messages 200000] [--master local[2]]

Batch: spark.read.format("ferry") over a topic of 8 queues, 256 B bodies, every column
materialised (sum of body lengths), messages per second. Streaming: one message sent every
200 ms while a query (processingTime 0, foreachBatch) runs; end-to-end latency is from the
message's born timestamp to its row reaching foreachBatch on the driver; also each micro-batch's
triggerExecution time as Spark reports it.
"""

from __future__ import annotations

import argparse
import os
import sys
import tempfile
import threading
import time
from typing import Any

from common import Figure, percentile, report

from ferry.admin import Admin
from ferry.client import Message, Producer
from ferry.runtime.launcher import start_local_cluster

BODY = b"x" * 256


def fill(namesrv: str, topic: str, messages: int) -> int:
    per_thread = messages // 4 // 128

    def work() -> None:
        with Producer("bench-spark", namesrv) as producer:
            batch = [Message(topic, BODY) for _ in range(128)]
            for _ in range(per_thread):
                producer.send_batch(batch)

    threads = [threading.Thread(target=work) for _ in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    return per_thread * 128 * 4


def batch_read(spark: Any, namesrv: str, topic: str, expected: int) -> float:
    started = time.perf_counter()
    df = spark.read.format("ferry").option("ferry.namesrv", namesrv).option("subscribe", topic)
    row = df.load().selectExpr("count(*) AS n", "sum(length(body)) AS bytes").collect()[0]
    elapsed = time.perf_counter() - started
    assert row.n == expected, (row.n, expected)
    return expected / elapsed


def stream_latency(spark: Any, namesrv: str, samples: int) -> tuple[list[float], list[float]]:
    with Admin(namesrv) as admin:
        admin.create_topic("SparkLatency", 8, 8)
    latencies: list[float] = []

    def sink(batch: Any, _batch_id: int) -> None:
        seen = time.time() * 1000
        for r in batch.select("born_timestamp").collect():
            latencies.append(seen - r.born_timestamp.timestamp() * 1000)

    df = (
        spark.readStream.format("ferry")
        .option("ferry.namesrv", namesrv)
        .option("subscribe", "SparkLatency")
        .load()
    )
    ckpt = tempfile.mkdtemp(prefix="ferry-bench-ckpt-")
    query = (
        df.writeStream.foreachBatch(sink)
        .option("checkpointLocation", ckpt)
        .trigger(processingTime="0 seconds")
        .start()
    )
    with Producer("bench-spark-latency", namesrv) as producer:
        deadline = time.monotonic() + 120
        while not query.recentProgress and time.monotonic() < deadline:
            time.sleep(0.1)  # bench-only: until the query has run its first (empty) batch
        for _ in range(samples):
            producer.send(Message("SparkLatency", BODY))
            time.sleep(0.2)  # bench-only: one message per interval, not a readiness wait
        deadline = time.monotonic() + 60
        while len(latencies) < samples and time.monotonic() < deadline:
            time.sleep(0.1)  # bench-only: polling the sink with a deadline
    durations = [
        float(p["durationMs"]["triggerExecution"])
        for p in query.recentProgress
        if p["numInputRows"] > 0
    ]
    query.stop()
    return latencies, durations


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument("--messages", type=int, default=200_000)
    parser.add_argument("--samples", type=int, default=50)
    parser.add_argument("--master", default="local[2]")
    args = parser.parse_args()
    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    from pyspark.sql import SparkSession

    import ferry.spark

    with tempfile.TemporaryDirectory(prefix="ferry-bench-") as data:
        cluster = start_local_cluster(data)
        try:
            namesrv = cluster.namesrv_addr
            with Admin(namesrv) as admin:
                admin.create_topic("SparkRead", 8, 8)
            stored = fill(namesrv, "SparkRead", args.messages)
            spark = (
                SparkSession.builder.master(args.master)
                .appName("bench-spark-read")
                .config("spark.ui.enabled", "false")
                .config("spark.ui.showConsoleProgress", "false")
                .config("spark.sql.shuffle.partitions", "2")
                .config("spark.driver.bindAddress", "127.0.0.1")
                .config("spark.driver.host", "127.0.0.1")
                .config("spark.sql.session.timeZone", "UTC")
                .getOrCreate()
            )
            spark.sparkContext.setLogLevel("ERROR")
            ferry.spark.register(spark)
            batch_read(spark, namesrv, "SparkRead", stored)  # warm up the Python workers
            reads = [batch_read(spark, namesrv, "SparkRead", stored) for _ in range(args.runs)]
            latencies, durations = stream_latency(spark, namesrv, args.samples)
            spark.stop()
        finally:
            cluster.stop()
    report(
        f"spark read {args.master}",
        [
            Figure(f"batch read, {stored:,} msgs of 256 B, 8 queues", "msg/s", reads),
            Figure("stream end-to-end latency p50", "ms", [percentile(latencies, 0.5)]),
            Figure("stream end-to-end latency p99", "ms", [percentile(latencies, 0.99)]),
            Figure("micro-batch triggerExecution p50", "ms", [percentile(durations, 0.5)]),
        ],
    )


if __name__ == "__main__":
    main()
