"""The rows' schema, apart from everything that reads them: Spark asks for it in a worker of
its own, which should not have to import the client or pyarrow to answer."""

from __future__ import annotations

from pyspark.sql.types import (
    ArrayType,
    BinaryType,
    IntegerType,
    LongType,
    MapType,
    StringType,
    StructField,
    StructType,
    TimestampType,
)

SCHEMA_DDL = (
    "topic string, broker string, queue_id int, queue_offset long, msg_id string, "
    "tags string, keys array<string>, body binary, properties map<string,string>, "
    "born_timestamp timestamp, store_timestamp timestamp"
)


def spark_schema() -> StructType:
    """SCHEMA_DDL as a StructType, built by hand: parsing DDL needs a JVM, executors' Python
    workers have none."""
    return StructType(
        [
            StructField("topic", StringType()),
            StructField("broker", StringType()),
            StructField("queue_id", IntegerType()),
            StructField("queue_offset", LongType()),
            StructField("msg_id", StringType()),
            StructField("tags", StringType()),
            StructField("keys", ArrayType(StringType())),
            StructField("body", BinaryType()),
            StructField("properties", MapType(StringType(), StringType())),
            StructField("born_timestamp", TimestampType()),
            StructField("store_timestamp", TimestampType()),
        ]
    )
