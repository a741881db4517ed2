"""Short-link click statistics: click events from a topic, counted per short URL and minute of
event time with a watermark, written to Parquet and back to a topic.

A click event is a JSON object as the short-link service sends it (see ../README.md):
{"fullShortUrl": "nurl.ink/a1", "gid": "g1", "statsRecord": "<JSON string>"}, whose statsRecord
holds "uv" (the visitor's cookie id), "remoteAddr" (the visitor's IP) and "clickTime" (epoch ms;
the message's born timestamp when absent).

Per (window_start, full_short_url, gid) the output has pv (clicks), uv (distinct visitors) and
uip (distinct IPs). A minute is written once, when the watermark passes its end. Each micro-batch
goes to <output>/batch_id=<n> (overwritten when Spark replays the batch, so the Parquet output is
exactly-once) and, with --out-topic, to that topic as JSON with deterministic msg ids (at least
once, duplicates detectable by msg id).

python -m ferry.spark.pipelines.click_stats --topic ShortLinkStats --output /data/click-stats \
    --checkpoint /data/ckpt/click-stats [--out-topic ShortLinkMinuteStats] [--master URL]
"""

from __future__ import annotations

import argparse
import logging
from typing import Any

from pyspark.sql import functions as F

from ferry.spark.pipelines.common import add_common_flags, session, source, trigger

log = logging.getLogger("ferry.spark.click_stats")

EVENT_SCHEMA = "fullShortUrl string, gid string, statsRecord string"
RECORD_SCHEMA = "uv string, remoteAddr string, clickTime long"


def parse_clicks(messages: Any) -> Any:
    """Rows of the `ferry` source -> full_short_url, gid, uv, ip, event_time."""
    event = F.from_json(F.col("body").cast("string"), EVENT_SCHEMA)
    parsed = messages.select(event.alias("e"), "born_timestamp")
    record = F.from_json(F.col("e.statsRecord"), RECORD_SCHEMA)
    return (
        parsed.select(
            F.col("e.fullShortUrl").alias("full_short_url"),
            F.col("e.gid").alias("gid"),
            record.alias("r"),
            "born_timestamp",
        )
        .select(
            "full_short_url",
            "gid",
            F.col("r.uv").alias("uv"),
            F.col("r.remoteAddr").alias("ip"),
            F.coalesce(F.timestamp_millis(F.col("r.clickTime")), F.col("born_timestamp")).alias(
                "event_time"
            ),
        )
        .where(F.col("full_short_url").isNotNull())
    )


def minute_stats(clicks: Any, watermark: str, window: str = "1 minute") -> Any:
    return (
        clicks.withWatermark("event_time", watermark)
        .groupBy(F.window("event_time", window), "full_short_url", "gid")
        .agg(
            F.count(F.lit(1)).alias("pv"),
            F.size(F.collect_set("uv")).alias("uv"),  # exact; collect_set is fine per minute
            F.size(F.collect_set("ip")).alias("uip"),
        )
        .select(
            F.col("window.start").alias("window_start"),
            F.col("window.end").alias("window_end"),
            "full_short_url",
            "gid",
            "pv",
            "uv",
            "uip",
        )
    )


def batch_writer(args: argparse.Namespace) -> Any:
    """foreachBatch: Parquet per batch id (idempotent), then the topic (deterministic ids)."""

    def write(batch: Any, batch_id: int) -> None:
        batch.persist()
        try:
            batch.write.mode("overwrite").parquet(f"{args.output}/batch_id={batch_id}")
            if args.out_topic:
                body = F.to_json(F.struct(*batch.columns))
                (
                    batch.select(
                        body.alias("body"),
                        F.col("full_short_url").alias("keys"),
                        F.lit("minute-stats").alias("tags"),
                    )
                    .write.format("ferry")
                    .option("ferry.namesrv", args.namesrv)
                    .option("topic", args.out_topic)
                    .option("ferry.writeId", f"{args.checkpoint}/{batch_id}")
                    .mode("append")
                    .save()
                )
        finally:
            batch.unpersist()

    return write


def start(spark: Any, args: argparse.Namespace) -> Any:
    stats = minute_stats(parse_clicks(source(spark, args)), args.watermark, args.window)
    writer = (
        stats.writeStream.outputMode("append")
        .option("checkpointLocation", args.checkpoint)
        .foreachBatch(batch_writer(args))
    )
    return trigger(writer, args).start()


def parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="click_stats", description=__doc__.split("\n\n")[0])
    add_common_flags(p)
    p.add_argument("--output", required=True, help="Parquet output directory")
    p.add_argument("--out-topic", help="also send each minute's stats to this topic")
    p.add_argument("--watermark", default="1 minute", help="how late a click may arrive")
    p.add_argument("--window", default="1 minute", help="aggregation window")
    return p


def main(argv: list[str] | None = None) -> int:
    args = parser().parse_args(argv)
    spark = session(args.master, "ferry-click-stats")
    query = start(spark, args)
    query.awaitTermination()
    spark.stop()
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
