"""What every pipeline shares: the session, the source and the flags that configure them."""

from __future__ import annotations

import argparse
import os
import sys
from typing import Any

import ferry.spark
from ferry.spark.options import DEFAULT_NAMESRV


def add_common_flags(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--master",
        help="Spark master; default: spark-submit's, else local[*]",
    )
    parser.add_argument(
        "-n",
        "--namesrv",
        default=os.environ.get("NAMESRV_ADDR", DEFAULT_NAMESRV),
        help="name server(s), host:port[;host:port] (default $NAMESRV_ADDR or 127.0.0.1:9876)",
    )
    parser.add_argument("--topic", required=True, help="topic(s) to read, comma-separated")
    parser.add_argument("--checkpoint", required=True, help="the query's checkpoint directory")
    parser.add_argument("--group", help="consumer group to commit progress as (lag shows)")
    parser.add_argument(
        "--starting-offsets", default="earliest", help="earliest, latest or JSON per queue"
    )
    parser.add_argument("--max-offsets-per-trigger", type=int, help="messages per micro-batch")
    parser.add_argument(
        "--trigger-seconds",
        type=float,
        default=0.0,
        help="micro-batch interval; 0 reads what is there now and stops (AvailableNow)",
    )
    parser.add_argument(
        "--no-fail-on-data-loss", action="store_true", help="skip offsets retention removed"
    )


def session(master: str | None, app: str) -> Any:
    """A session on `master`; without one, spark-submit's master (it launches Python with a
    gateway to its JVM) or local[*]."""
    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    from pyspark.sql import SparkSession

    builder = SparkSession.builder.appName(app).config("spark.sql.session.timeZone", "UTC")
    if master is None and "PYSPARK_GATEWAY_PORT" not in os.environ:
        master = "local[*]"
    if master is not None:
        builder = builder.master(master)
    spark = builder.getOrCreate()
    ferry.spark.register(spark)
    return spark


def source(spark: Any, args: argparse.Namespace) -> Any:
    reader = (
        spark.readStream.format("ferry")
        .option("ferry.namesrv", args.namesrv)
        .option("subscribe", args.topic)
        .option("startingOffsets", args.starting_offsets)
        .option("failOnDataLoss", str(not args.no_fail_on_data_loss).lower())
    )
    if args.group:
        reader = reader.option("group", args.group)
    if args.max_offsets_per_trigger:
        reader = reader.option("maxOffsetsPerTrigger", str(args.max_offsets_per_trigger))
    return reader.load()


def trigger(writer: Any, args: argparse.Namespace) -> Any:
    if args.trigger_seconds > 0:
        return writer.trigger(processingTime=f"{args.trigger_seconds} seconds")
    return writer.trigger(availableNow=True)
