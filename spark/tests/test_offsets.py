"""Offsets and options, without Spark: resolving earliest/latest/JSON, splitting ranges into
tasks, sharing a read limit among queues."""

from __future__ import annotations

import json

import pytest

from ferry.protocol.errors import InvalidParameterError
from ferry.spark import DataLossError
from ferry.spark.offsets import (
    EARLIEST,
    LATEST,
    PACK_UNDER,
    Range,
    cap,
    pack,
    plan_ranges,
    resolve,
    total_between,
)
from ferry.spark.options import read_options

BOUNDS = {"T": {"b:0": (0, 100), "b:1": (5, 20)}}


def test_words_and_json_resolve_against_each_queues_min_and_max() -> None:
    assert resolve("earliest", BOUNDS, option="startingOffsets", missing=LATEST) == {
        "T": {"b:0": 0, "b:1": 5}
    }
    assert resolve("latest", BOUNDS, option="startingOffsets", missing=EARLIEST) == {
        "T": {"b:0": 100, "b:1": 20}
    }
    spec = json.dumps({"T": {"b:0": 42}})
    assert resolve(spec, BOUNDS, option="endingOffsets", missing=LATEST) == {
        "T": {"b:0": 42, "b:1": 20}
    }
    spec = json.dumps({"T": {"b:0": -1, "b:1": -2}})
    assert resolve(spec, BOUNDS, option="startingOffsets", missing=EARLIEST) == {
        "T": {"b:0": 100, "b:1": 5}
    }


def test_a_start_before_the_min_offset_is_data_loss_unless_allowed() -> None:
    spec = json.dumps({"T": {"b:1": 2}})
    with pytest.raises(DataLossError, match="removed by retention"):
        resolve(spec, BOUNDS, option="startingOffsets", missing=EARLIEST)
    lenient = resolve(
        spec, BOUNDS, option="startingOffsets", missing=EARLIEST, fail_on_data_loss=False
    )
    assert lenient["T"]["b:1"] == 5


@pytest.mark.parametrize(
    ("spec", "match"),
    [
        ('{"T": {"b:0": 101}}', "beyond its end"),
        ('{"T": {"b:9": 1}}', "no queue"),
        ('{"U": {"b:0": 1}}', "not subscribed"),
        ('{"T": {"b0": 1}}', "<broker>:<queue id>"),
        ('{"T": {"b:0": "1"}}', "offset of T"),
        ("soon", "earliest, latest or JSON"),
    ],
)
def test_bad_offsets_are_refused_with_a_reason(spec: str, match: str) -> None:
    with pytest.raises(InvalidParameterError, match=match):
        resolve(spec, BOUNDS, option="startingOffsets", missing=EARLIEST)


def test_ranges_are_one_per_queue_and_split_when_long() -> None:
    start = {"T": {"b:0": 0, "b:1": 5}}
    end = {"T": {"b:0": 100, "b:1": 5}, "N": {"b:0": 3}}  # N: a queue the query never saw
    ranges = plan_ranges(start, end, max_per_partition=1000)
    assert ranges == [Range("N", "b", 0, 0, 3, new_queue=True), Range("T", "b", 0, 0, 100)]
    split = plan_ranges(start, end, max_per_partition=30)
    assert [(r.start, r.end) for r in split if r.topic == "T"] == [
        (0, 25),
        (25, 50),
        (50, 75),
        (75, 100),
    ]
    assert len(plan_ranges(start, end, max_per_partition=1000, min_partitions=6)) >= 6


def test_short_ranges_share_partitions_up_to_a_limit_and_long_ones_stay_alone() -> None:
    short = [Range("T", "b", q, 0, 10) for q in range(4)]
    long = Range("T", "b", 9, 0, PACK_UNDER + 1)
    assert pack([*short, long, *short], max_per_partition=100_000) == [
        tuple(short),
        (long,),
        tuple(short),
    ]
    assert pack(short, max_per_partition=25) == [tuple(short[:2]), tuple(short[2:])]
    assert pack(short, max_per_partition=100_000, min_partitions=2) == [(r,) for r in short]


def test_a_read_limit_is_shared_in_proportion_and_never_exceeded() -> None:
    start = {"T": {"a:0": 0, "a:1": 10, "a:2": 50}}
    available = {"T": {"a:0": 300, "a:1": 110, "a:2": 50}}
    capped = cap(start, available, 100)
    assert total_between(start, capped) == 100
    assert capped["T"] == {"a:0": 75, "a:1": 35, "a:2": 50}
    assert cap(start, available, 10_000) == available
    one = cap(start, available, 1)
    assert total_between(start, one) == 1


def test_options_follow_the_kafka_source_defaults_and_refuse_nonsense() -> None:
    batch = read_options({"subscribe": "a, b"}, streaming=False)
    assert (batch.topics, batch.starting, batch.ending) == (("a", "b"), "earliest", "latest")
    assert batch.fail_on_data_loss
    stream = read_options({"subscribe": "a", "maxOffsetsPerTrigger": "50"}, streaming=True)
    assert (stream.starting, stream.max_per_trigger) == ("latest", 50)
    for bad, streaming in [
        ({}, False),
        ({"subscribe": "a", "endingOffsets": "latest"}, True),
        ({"subscribe": "a", "startingOffsets": "latest"}, False),
        ({"subscribe": "a", "maxOffsetsPerTrigger": "0"}, True),
        ({"subscribe": "a", "failOnDataLoss": "maybe"}, True),
        ({"subscribe": "a", "ferry.namesrv": "nohost"}, True),
    ]:
        with pytest.raises(InvalidParameterError):
            read_options(bad, streaming=streaming)
