"""The sink's pure parts, without a Spark session: deterministic msg ids, the schema check,
rows to messages."""

from __future__ import annotations

import pytest
from pyspark.sql import Row
from pyspark.sql.types import (
    ArrayType,
    BinaryType,
    IntegerType,
    MapType,
    StringType,
    StructField,
    StructType,
)

from ferry.protocol.errors import InvalidParameterError
from ferry.spark.options import write_options
from ferry.spark.writer import check_sink_schema, message_id, to_message


def test_msg_ids_are_the_same_for_the_same_row_and_differ_otherwise() -> None:
    ids = {message_id(w, p, r) for w in ("q1/0", "q1/1") for p in range(3) for r in range(50)}
    assert len(ids) == 300
    assert message_id("q1/0", 2, 7) == message_id("q1/0", 2, 7)
    assert all(len(i) == 32 and i == i.upper() for i in ids)


def test_the_schema_check_names_what_is_missing_or_wrong() -> None:
    opts = write_options({}, "w")
    body = StructField("body", BinaryType())
    topic = StructField("topic", StringType())
    check_sink_schema(StructType([body, topic]), opts)
    check_sink_schema(
        StructType([StructField("body", StringType())]), write_options({"topic": "T"}, "w")
    )
    with pytest.raises(InvalidParameterError, match="body"):
        check_sink_schema(StructType([topic]), opts)
    with pytest.raises(InvalidParameterError, match="topic"):
        check_sink_schema(StructType([body]), opts)
    with pytest.raises(InvalidParameterError, match="keys"):
        check_sink_schema(StructType([body, topic, StructField("keys", IntegerType())]), opts)
    ok = [
        StructField("keys", ArrayType(StringType())),
        StructField("properties", MapType(StringType(), StringType())),
    ]
    check_sink_schema(StructType([body, topic, *ok]), opts)


def test_a_row_becomes_a_message_with_its_id_and_the_topic_option_wins() -> None:
    props = {"p": "1", "TAGS": "old", "DELAY": "3", "traceparent": "00-ab-cd-01"}
    row = Row(topic="A", body="héllo", tags="t", keys="k1", properties=props)
    msg = to_message(row, write_options({"topic": "B"}, "w"), "ID1")
    assert (msg.topic, msg.body, msg.tags, msg.keys) == ("B", "héllo".encode(), "t", ["k1"])
    # system properties a row read from Ferry carries are dropped; trace context is kept
    assert msg.properties == {"p": "1", "traceparent": "00-ab-cd-01", "UNIQ_KEY": "ID1"}
    with pytest.raises(InvalidParameterError, match="null body"):
        to_message(Row(topic="A", body=None), write_options({}, "w"), "ID2")
