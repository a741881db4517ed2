"""Topic-to-Parquet archiver: every message of the topics, once, in Parquet partitioned by
topic and store date.

Exactly-once output: the source's offsets per queue are in the checkpoint and Spark's file sink
records each batch's files in <output>/_spark_metadata, so a batch replayed after a crash
replaces its files instead of adding to them. Readers must read the directory with Spark (which
honours _spark_metadata), not glob the files.

python -m ferry.spark.pipelines.archiver --topic Orders --output /data/archive \
    --checkpoint /data/ckpt/archive [--trigger-seconds 60] [--master URL]
"""

from __future__ import annotations

import argparse
from typing import Any

from pyspark.sql import functions as F

from ferry.spark.pipelines.common import add_common_flags, session, source, trigger


def archive_rows(messages: Any) -> Any:
    return messages.withColumn("store_date", F.to_date("store_timestamp"))


def start(spark: Any, args: argparse.Namespace) -> Any:
    writer = (
        archive_rows(source(spark, args))
        .writeStream.format("parquet")
        .option("path", args.output)
        .option("checkpointLocation", args.checkpoint)
        .partitionBy("topic", "store_date")
        .outputMode("append")
    )
    return trigger(writer, args).start()


def parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="archiver", description=__doc__.split("\n\n")[0])
    add_common_flags(p)
    p.add_argument("--output", required=True, help="Parquet output directory")
    return p


def main(argv: list[str] | None = None) -> int:
    args = parser().parse_args(argv)
    spark = session(args.master, "ferry-archiver")
    start(spark, args).awaitTermination()
    spark.stop()
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
