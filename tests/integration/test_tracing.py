"""One message's trace crosses the SDK, broker-remoting and broker-store."""

from __future__ import annotations

from collections.abc import Callable, Iterator

import pytest
from itest_support import Cluster, OtlpSink, wait_for
from opentelemetry import trace
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

from ferry.client import ConsumeFromWhere, Message, Producer, PullConsumer


@pytest.fixture
def spans() -> Iterator[InMemorySpanExporter]:
    provider = trace.get_tracer_provider()
    if not isinstance(provider, TracerProvider):
        provider = TracerProvider()
        trace.set_tracer_provider(provider)
    exporter = InMemorySpanExporter()
    provider.add_span_processor(SimpleSpanProcessor(exporter))
    yield exporter
    exporter.shutdown()


def test_send_to_poll_is_one_trace_across_sdk_remoting_and_store(
    cluster_factory: Callable[..., Cluster], otlp_sink: OtlpSink, spans: InMemorySpanExporter
) -> None:
    cluster = cluster_factory(env=otlp_sink.env())
    with Producer("pg-traced", cluster.namesrv) as producer:
        result = producer.send(Message("Traced", b"follow me", tags="T1"))
    send_span = next(s for s in spans.get_finished_spans() if s.name == "send Traced")
    assert send_span.kind is trace.SpanKind.PRODUCER
    trace_id = format(send_span.context.trace_id, "032x")
    assert send_span.attributes is not None
    assert send_span.attributes["messaging.system"] == "rocketmq"
    assert send_span.attributes["messaging.destination.name"] == "Traced"
    assert send_span.attributes["messaging.message.id"] == result.msg_id

    with PullConsumer(
        "cg-traced", cluster.namesrv, consume_from=ConsumeFromWhere.FIRST_OFFSET
    ) as consumer:
        consumer.subscribe("Traced")
        got = wait_for(lambda: consumer.poll(timeout=1.0), what="the traced message")
    assert got[0].properties["traceparent"].split("-")[1] == trace_id
    receive = next(s for s in spans.get_finished_spans() if s.name == "receive Traced")
    assert [format(link.context.trace_id, "032x") for link in receive.links] == [trace_id]

    def services_spans() -> list[object] | None:
        mine = [s for s in otlp_sink.snapshot() if s.trace_id == trace_id]
        services = {s.service for s in mine}
        if {"ferry-broker-remoting", "ferry-broker-store"} <= services:
            return mine
        return None

    remote = wait_for(services_spans, timeout=15, what="remoting and store spans")
    remoting = next(s for s in remote if s.service == "ferry-broker-remoting")
    store = next(s for s in remote if s.service == "ferry-broker-store")
    assert remoting.parent_span_id == format(send_span.context.span_id, "016x")
    assert store.parent_span_id == remoting.span_id
