"""Spans of the SDK, read from an in-memory exporter of a provider passed to the client."""

from __future__ import annotations

from collections.abc import Iterator

import pytest
from opentelemetry import trace
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

from ferry.client.message import Message, MessageExt, MessageQueue
from ferry.client.outgoing import Outgoing, send_request
from ferry.client.publish import Target
from ferry.client.tracing import Tracing
from ferry.protocol.errors import SystemBusyError


@pytest.fixture
def exporter() -> Iterator[InMemorySpanExporter]:
    exp = InMemorySpanExporter()
    yield exp
    exp.clear()


@pytest.fixture
def tracing(exporter: InMemorySpanExporter) -> Tracing:
    provider = TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(exporter))
    return Tracing(provider, "client-1")


@pytest.mark.parametrize("provider", [trace.NoOpTracerProvider(), trace.ProxyTracerProvider()])
def test_no_provider_installed_means_no_span_work(provider: trace.TracerProvider) -> None:
    off = Tracing(provider)
    assert not off.enabled
    assert off.start_send("t", [Message("t", b"x")], ["ID"]) is None
    props: dict[str, str] = {}
    off.inject(None, props)
    assert props == {}


def test_send_span_has_messaging_attributes_and_its_context_is_injected(
    tracing: Tracing, exporter: InMemorySpanExporter
) -> None:
    msg = Message("orders", b"x", tags="created", keys=["k1", "k2"])
    span = tracing.start_send("orders", [msg], ["MSGID"])
    props: dict[str, str] = {}
    tracing.inject(span, props)
    tracing.end(span, address="127.0.0.1:10911", queue_id=3)
    (finished,) = exporter.get_finished_spans()
    assert finished.name == "send orders"
    assert finished.kind == trace.SpanKind.PRODUCER
    attrs = dict(finished.attributes or {})
    assert attrs["messaging.system"] == "rocketmq"
    assert attrs["messaging.destination.name"] == "orders"
    assert attrs["messaging.operation.name"] == "send"
    assert attrs["messaging.operation.type"] == "send"
    assert attrs["messaging.message.id"] == "MSGID"
    assert attrs["messaging.rocketmq.message.tag"] == "created"
    assert attrs["messaging.rocketmq.message.keys"] == ("k1", "k2")
    assert attrs["server.port"] == 10911
    trace_id = format(finished.context.trace_id, "032x")
    span_id = format(finished.context.span_id, "016x")
    assert props["traceparent"].split("-")[1:3] == [trace_id, span_id]


def test_batch_send_span_counts_messages_and_failure_sets_error_type(
    tracing: Tracing, exporter: InMemorySpanExporter
) -> None:
    msgs = [Message("t", b"a"), Message("t", b"b")]
    span = tracing.start_send("t", msgs, ["A", "B"])
    tracing.end(span, SystemBusyError("busy"))
    (finished,) = exporter.get_finished_spans()
    attrs = dict(finished.attributes or {})
    assert attrs["messaging.batch.message_count"] == 2
    assert attrs["error.type"] == "SystemBusyError"
    assert finished.status.status_code == trace.StatusCode.ERROR
    # each message of the batch is findable by its id: one event lists them
    (event,) = finished.events
    assert event.name == "messages"
    assert dict(event.attributes or {}) == {"ferry.batch.message_ids": "A,B"}


def test_receive_span_links_to_each_message_creation_context(
    tracing: Tracing, exporter: InMemorySpanExporter
) -> None:
    contexts = []
    received = []
    for i in range(3):
        span = tracing.start_send("t", [Message("t", b"x")], [f"ID{i}"])
        props = {"UNIQ_KEY": f"ID{i}"}
        tracing.inject(span, props)
        tracing.end(span)
        assert span is not None
        contexts.append(span.get_span_context())
        received.append(MessageExt("t", b"x", properties=props, queue=MessageQueue("t", "b", 0)))
    received.append(MessageExt("t", b"untraced", queue=MessageQueue("t", "b", 0)))
    exporter.clear()
    tracing.record_receive("group-1", received, 0, "CLUSTERING")
    (receive,) = exporter.get_finished_spans()
    assert receive.name == "receive t"
    assert receive.kind == trace.SpanKind.CLIENT
    attrs = dict(receive.attributes or {})
    assert attrs["messaging.consumer.group.name"] == "group-1"
    assert attrs["messaging.batch.message_count"] == 4
    assert attrs["messaging.operation.type"] == "receive"
    assert [link.context.span_id for link in receive.links] == [c.span_id for c in contexts]


def test_empty_receive_records_no_span(tracing: Tracing, exporter: InMemorySpanExporter) -> None:
    tracing.record_receive("g", [], 0, "CLUSTERING")
    assert exporter.get_finished_spans() == ()


def test_instrumentation_errors_never_escape(tracing: Tracing) -> None:
    # a carrier that refuses writes must not break a send
    class Frozen(dict[str, str]):
        def __setitem__(self, key: str, value: str) -> None:
            raise RuntimeError("read-only")

    span = tracing.start_send("t", [Message("t", b"x")], ["ID"])
    tracing.inject(span, Frozen())
    tracing.end(span)


def test_process_span_links_to_the_producer_and_records_the_verdict(
    tracing: Tracing, exporter: InMemorySpanExporter
) -> None:
    send = tracing.start_send("orders", [Message("orders", b"x")], ["MSGID"])
    props: dict[str, str] = {}
    tracing.inject(send, props)
    tracing.end(send)
    msg = MessageExt("orders", b"x", properties=props, msg_id="MSGID", reconsume_times=2)
    span = tracing.start_process("cg", [msg], "CLUSTERING")
    assert span is not None
    tracing.end(span, RuntimeError("listener failed"))
    sent, processed = exporter.get_finished_spans()
    assert processed.name == "process orders"
    assert processed.kind == trace.SpanKind.CONSUMER
    attrs = dict(processed.attributes or {})
    assert attrs["messaging.operation.type"] == "process"
    assert attrs["messaging.consumer.group.name"] == "cg"
    assert attrs["messaging.rocketmq.message.reconsume_times"] == 2
    assert attrs["error.type"] == "RuntimeError"
    assert [link.context.span_id for link in processed.links] == [sent.context.span_id]


def test_a_traced_send_names_its_message_ids_to_the_broker() -> None:
    target = Target(MessageQueue("t", "broker-a", 0), "127.0.0.1:10911", "")
    parent = "00-" + "1" * 32 + "-" + "2" * 16 + "-01"
    traced = Outgoing("t", ["A", "B"], b"", 2, parent, "", None, True)
    untraced = traced._replace(traceparent="")
    assert send_request("g", traced, target, 4).msg_ids == "A,B"
    # untraced: nothing more on the wire (the broker finds them when it traces the send)
    assert send_request("g", untraced, target, 4).msg_ids == ""
