"""The Spark source's read is in each message's trace: the pull loop a Spark task runs
(ferry.spark.rows.read_range, here called in this process against a real cluster, without a
JVM) records one `receive` span per record batch, linked to every message's creation context."""

from __future__ import annotations

import pytest
from itest_support import Cluster
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from opentelemetry.trace import SpanKind

from ferry.admin import Admin
from ferry.client import Message, Producer
from ferry.spark.offsets import Range
from ferry.spark.options import read_options
from ferry.spark.rows import read_range

pytestmark = pytest.mark.integration


def test_a_spark_read_links_each_row_to_its_message_trace(
    cluster: Cluster, spans: InMemorySpanExporter
) -> None:
    with Admin(cluster.namesrv) as admin:
        admin.create_topic("SparkTraced", 1, 1)
    with Producer("pg-spark-traced", cluster.namesrv) as producer:
        for i in range(3):
            producer.send(Message("SparkTraced", f"row-{i}".encode()))
    sends = [s for s in spans.get_finished_spans() if s.name == "send SparkTraced"]
    assert len(sends) == 3

    opts = read_options(
        {"subscribe": "SparkTraced", "ferry.namesrv": cluster.namesrv}, streaming=False
    )
    batches = list(read_range(opts, Range("SparkTraced", "broker-a", 0, 0, 3)))
    assert sum(b.num_rows for b in batches) == 3

    (receive,) = [s for s in spans.get_finished_spans() if s.name == "receive SparkTraced"]
    assert receive.kind is SpanKind.CLIENT
    assert receive.attributes is not None
    assert receive.attributes["messaging.batch.message_count"] == 3
    assert receive.attributes["messaging.consumer.group.name"] == opts.pull_group
    assert {(ln.context.trace_id, ln.context.span_id) for ln in receive.links} == {
        (s.context.trace_id, s.context.span_id) for s in sends if s.context is not None
    }
