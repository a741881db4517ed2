"""One message's trace across the SDK and the broker's services, as the OpenTelemetry
messaging conventions for RocketMQ describe it.

The SDK's spans come from an in-memory exporter in this process; the services' spans reach an
OTLP/HTTP receiver started by the test (itest_support.OtlpSink), which every service exports to
from the OTEL_* variables. One cluster serves the tests of this module.
"""

from __future__ import annotations

import threading
from collections.abc import Iterator
from pathlib import Path

import pytest
from itest_support import Cluster, OtlpSink, ReceivedSpan, start_cluster, wait_for
from opentelemetry import trace
from opentelemetry.sdk.trace import ReadableSpan
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from opentelemetry.trace import SpanKind

from ferry.admin import Admin
from ferry.client import (
    ConsumeFromWhere,
    ConsumeResult,
    LocalTransactionState,
    Message,
    MessageExt,
    Producer,
    PullConsumer,
    PushConsumer,
    TransactionProducer,
)

pytestmark = pytest.mark.integration

# OTLP's span kinds (SpanKind enum values in the proto)
OTLP_INTERNAL, OTLP_SERVER, OTLP_CLIENT, OTLP_PRODUCER, OTLP_CONSUMER = 1, 2, 3, 4, 5
REMOTING, STORE, INDEX, SCHEDULER, CHECKBACK = (
    "ferry-broker-remoting",
    "ferry-broker-store",
    "ferry-index",
    "ferry-scheduler",
    "ferry-checkback",
)


# short delay levels: a delayed send of level 1 and the first retry come back in 1 s; half
# messages are checked back after 0.5 s
SHORT = {
    "flushDiskType": "SYNC_FLUSH",  # each put waits for its group commit: a `store flush` span
    "messageDelayLevel": "1s 1s 1s 1s",
    "transactionTimeOut": "500",
    "transactionCheckInterval": "200",
}


@pytest.fixture(scope="module")
def traced(tmp_path_factory: pytest.TempPathFactory, sink: OtlpSink) -> Iterator[Cluster]:
    path: Path = tmp_path_factory.mktemp("traced")
    cluster = start_cluster(path, env=sink.env(), overrides=SHORT)
    try:
        yield cluster
    finally:
        cluster.local.stop()


def hex_trace(span: ReadableSpan) -> str:
    assert span.context is not None
    return format(span.context.trace_id, "032x")


def hex_span(span: ReadableSpan) -> str:
    assert span.context is not None
    return format(span.context.span_id, "016x")


def sdk_span(spans: InMemorySpanExporter, name: str, timeout: float = 15) -> ReadableSpan:
    def find() -> ReadableSpan | None:
        return next((s for s in spans.get_finished_spans() if s.name == name), None)

    found: ReadableSpan = wait_for(find, timeout, f"the SDK span {name!r}")
    return found


def service_spans(
    sink: OtlpSink, trace_id: str, wanted: set[tuple[str, str]], timeout: float = 20
) -> list[ReceivedSpan]:
    """The services' spans of one trace once every (service, name) wanted is there."""

    def find() -> list[ReceivedSpan] | None:
        mine = [s for s in sink.snapshot() if s.trace_id == trace_id]
        return mine if wanted <= {(s.service, s.name) for s in mine} else None

    found: list[ReceivedSpan] = wait_for(find, timeout, f"spans {sorted(wanted)}")
    return found


def one(found: list[ReceivedSpan], service: str, name: str) -> ReceivedSpan:
    return next(s for s in found if s.service == service and s.name == name)


def attrs(span: ReadableSpan) -> dict[str, object]:
    return dict(span.attributes or {})


def test_plain_send_and_consume_is_one_trace_with_the_conventions_attributes(
    traced: Cluster, sink: OtlpSink, spans: InMemorySpanExporter
) -> None:
    with Producer("pg-traced", traced.namesrv) as producer:
        result = producer.send(Message("Traced", b"follow me", tags="T1", keys=["k-1"]))
    send = sdk_span(spans, "send Traced")
    assert send.kind is SpanKind.PRODUCER
    assert send.parent is None  # the creation context of the message
    assert attrs(send) | {
        "messaging.system": "rocketmq",
        "messaging.destination.name": "Traced",
        "messaging.operation.name": "send",
        "messaging.operation.type": "send",
        "messaging.message.id": result.msg_id,
        "messaging.rocketmq.message.tag": "T1",
        "messaging.rocketmq.message.keys": ("k-1",),
        "messaging.rocketmq.message.type": "normal",
    } == attrs(send)
    trace_id, send_id = hex_trace(send), hex_span(send)

    with PullConsumer(
        "cg-traced", traced.namesrv, consume_from=ConsumeFromWhere.FIRST_OFFSET
    ) as consumer:
        consumer.subscribe("Traced")
        got = wait_for(lambda: consumer.poll(timeout=1.0), what="the traced message")
    assert got[0].properties["traceparent"].split("-")[1:3] == [trace_id, send_id]
    receive = sdk_span(spans, "receive Traced")
    assert receive.kind is SpanKind.CLIENT
    assert [(format(ln.context.trace_id, "032x"), format(ln.context.span_id, "016x"))
            for ln in receive.links] == [(trace_id, send_id)]  # fmt: skip
    assert attrs(receive)["messaging.consumer.group.name"] == "cg-traced"
    assert attrs(receive)["messaging.rocketmq.consumption_model"] == "clustering"
    assert attrs(receive)["messaging.operation.type"] == "receive"
    assert attrs(receive)["messaging.batch.message_count"] == 1

    found = service_spans(
        sink,
        trace_id,
        {
            (REMOTING, "send Traced"),
            (STORE, "store append"),
            (STORE, "store flush"),
            (INDEX, "index dispatch"),
        },
    )
    remoting = one(found, REMOTING, "send Traced")
    assert remoting.kind == OTLP_SERVER
    assert remoting.parent_span_id == send_id
    assert remoting.attributes["messaging.destination.name"] == "Traced"
    assert remoting.attributes["messaging.operation.type"] == "send"
    assert "messaging.destination.partition.id" in remoting.attributes
    # the broker names the message itself: found by its id with no client tracing too
    assert remoting.attributes["messaging.message.id"] == result.msg_id
    assert remoting.attributes["messaging.system"] == "rocketmq"
    store = one(found, STORE, "store append")
    assert store.parent_span_id == remoting.span_id
    assert store.attributes["messaging.batch.message_count"] == 1
    flush = one(found, STORE, "store flush")  # SYNC_FLUSH: until the group commit covered it
    assert flush.parent_span_id == remoting.span_id
    assert "error.type" not in flush.attributes
    # the index follows the store's feed: its span hangs under the message's creation context
    index = one(found, INDEX, "index dispatch")
    assert index.kind == OTLP_CONSUMER
    assert index.parent_span_id == send_id
    assert (trace_id, send_id) in index.links


def test_push_consumer_process_span_is_a_child_of_the_creation_context(
    traced: Cluster, sink: OtlpSink, spans: InMemorySpanExporter
) -> None:
    done = threading.Event()
    inner: list[str] = []

    def listener(msgs: list[MessageExt]) -> ConsumeResult:
        # the application's own spans nest under `process`
        with trace.get_tracer("app").start_as_current_span("handle") as span:
            inner.append(format(span.get_span_context().span_id, "016x"))
        done.set()
        return ConsumeResult.SUCCESS

    consumer = PushConsumer(
        "cg-traced-push", traced.namesrv, consume_from=ConsumeFromWhere.FIRST_OFFSET
    )
    consumer.subscribe("TracedPush")
    consumer.register_listener(listener)
    with Producer("pg-traced-push", traced.namesrv) as producer:
        result = producer.send(Message("TracedPush", b"push me", tags="P"))
        with consumer:
            assert done.wait(30), "the listener never ran"
    send = sdk_span(spans, "send TracedPush")
    process = sdk_span(spans, "process TracedPush")
    assert process.kind is SpanKind.CONSUMER
    assert process.parent is not None and process.parent.span_id == send.context.span_id
    assert [ln.context.span_id for ln in process.links] == [send.context.span_id]
    assert attrs(process) | {
        "messaging.system": "rocketmq",
        "messaging.operation.name": "process",
        "messaging.operation.type": "process",
        "messaging.consumer.group.name": "cg-traced-push",
        "messaging.rocketmq.consumption_model": "clustering",
        "messaging.message.id": result.msg_id,
        "messaging.rocketmq.message.tag": "P",
        "messaging.rocketmq.consume_result": "SUCCESS",
    } == attrs(process)
    handle = sdk_span(spans, "handle")
    assert handle.parent is not None and hex_span(process) == format(handle.parent.span_id, "016x")
    assert inner == [hex_span(handle)]


def test_batch_consume_links_each_message_creation_context(
    traced: Cluster, spans: InMemorySpanExporter
) -> None:
    with Admin(traced.namesrv) as admin:
        admin.create_topic("TracedBatch", 1, 1)
    with Producer("pg-traced-batch", traced.namesrv) as producer:
        for i in range(3):
            producer.send(Message("TracedBatch", f"b{i}".encode()))
    sends = [s for s in spans.get_finished_spans() if s.name == "send TracedBatch"]
    assert len({hex_trace(s) for s in sends}) == 3  # three messages, three traces

    batches: list[int] = []
    done = threading.Event()

    def listener(msgs: list[MessageExt]) -> ConsumeResult:
        batches.append(len(msgs))
        if sum(batches) >= 3:
            done.set()
        return ConsumeResult.SUCCESS

    consumer = PushConsumer(
        "cg-traced-batch",
        traced.namesrv,
        consume_from=ConsumeFromWhere.FIRST_OFFSET,
        consume_batch_max_size=3,
    )
    consumer.subscribe("TracedBatch")
    consumer.register_listener(listener)
    with consumer:
        assert done.wait(30), "the listener never saw the three messages"
    assert batches == [3]
    process = sdk_span(spans, "process TracedBatch")
    assert process.kind is SpanKind.CONSUMER
    assert process.parent is None  # a batch has no single parent: links only
    assert attrs(process)["messaging.batch.message_count"] == 3
    assert "messaging.message.id" not in attrs(process)
    linked = {(ln.context.trace_id, ln.context.span_id) for ln in process.links}
    assert linked == {(s.context.trace_id, s.context.span_id) for s in sends}


def test_a_delayed_message_is_delivered_by_the_scheduler_in_its_original_trace(
    traced: Cluster, sink: OtlpSink, spans: InMemorySpanExporter
) -> None:
    with Producer("pg-traced-delay", traced.namesrv) as producer:
        producer.send(Message("TracedDelay", b"later", delay_level=1))
    send = sdk_span(spans, "send TracedDelay")
    assert attrs(send)["messaging.rocketmq.message.type"] == "delay"
    assert attrs(send)["messaging.rocketmq.message.delay_time_level"] == 1
    trace_id, send_id = hex_trace(send), hex_span(send)
    with PullConsumer(
        "cg-traced-delay", traced.namesrv, consume_from=ConsumeFromWhere.FIRST_OFFSET
    ) as consumer:
        consumer.subscribe("TracedDelay")
        wait_for(lambda: consumer.poll(timeout=1.0), timeout=30, what="the delayed message")
    receive = sdk_span(spans, "receive TracedDelay")
    assert [format(ln.context.span_id, "016x") for ln in receive.links] == [send_id]

    found = service_spans(
        sink, trace_id, {(REMOTING, "send TracedDelay"), (SCHEDULER, "deliver TracedDelay")}
    )
    deliver = one(found, SCHEDULER, "deliver TracedDelay")
    assert deliver.kind == OTLP_PRODUCER
    assert deliver.parent_span_id == send_id  # the re-delivery hangs under the creation context
    assert deliver.attributes["messaging.destination.name"] == "TracedDelay"
    # both stores of the message are in the trace: held (under remoting's send), then
    # delivered (under the scheduler's deliver)
    held_under = one(found, REMOTING, "send TracedDelay").span_id

    def both_appends() -> set[str] | None:
        parents = {
            s.parent_span_id
            for s in sink.snapshot()
            if s.trace_id == trace_id and s.service == STORE and s.name == "store append"
        }
        return parents if {held_under, deliver.span_id} <= parents else None

    wait_for(both_appends, 15, "the store's appends of the held and the delivered copy")


def test_a_retry_comes_back_in_the_original_trace(
    traced: Cluster, sink: OtlpSink, spans: InMemorySpanExporter
) -> None:
    with Admin(traced.namesrv) as admin:
        admin.create_topic("TracedRetry", 1, 1)
    calls: list[int] = []
    done = threading.Event()

    def fails_once(msgs: list[MessageExt]) -> ConsumeResult:
        calls.append(msgs[0].reconsume_times)
        if len(calls) == 1:
            return ConsumeResult.RECONSUME_LATER
        done.set()
        return ConsumeResult.SUCCESS

    consumer = PushConsumer(
        "cg-traced-retry", traced.namesrv, consume_from=ConsumeFromWhere.FIRST_OFFSET
    )
    consumer.subscribe("TracedRetry")
    consumer.register_listener(fails_once)
    with Producer("pg-traced-retry", traced.namesrv) as producer:
        producer.send(Message("TracedRetry", b"again"))
        with consumer:
            assert done.wait(40), "the retry never came back"
    assert calls == [0, 1]
    send = sdk_span(spans, "send TracedRetry")
    trace_id, send_id = hex_trace(send), hex_span(send)
    processes = [s for s in spans.get_finished_spans() if s.name == "process TracedRetry"]
    assert len(processes) == 2
    for process in processes:  # both deliveries are children of the creation context
        assert process.parent is not None and format(process.parent.span_id, "016x") == send_id
    first, second = sorted(processes, key=lambda s: s.start_time or 0)
    assert attrs(first)["messaging.rocketmq.consume_result"] == "RECONSUME_LATER"
    assert attrs(first)["error.type"] == "RECONSUME_LATER"
    assert attrs(second)["messaging.rocketmq.message.reconsume_times"] == 1

    found = service_spans(sink, trace_id, {(SCHEDULER, "deliver %RETRY%cg-traced-retry")})
    deliver = one(found, SCHEDULER, "deliver %RETRY%cg-traced-retry")
    assert deliver.kind == OTLP_PRODUCER
    assert deliver.parent_span_id == send_id


class CheckedLater:
    """Leaves the transaction open, then commits when the broker checks back."""

    def __init__(self) -> None:
        self.checked = threading.Event()

    def execute_local_transaction(self, msg: Message, arg: object) -> LocalTransactionState:
        return LocalTransactionState.UNKNOWN

    def check_local_transaction(self, msg: MessageExt) -> LocalTransactionState:
        self.checked.set()
        return LocalTransactionState.COMMIT


def test_a_transaction_check_is_in_the_half_message_trace(
    traced: Cluster, sink: OtlpSink, spans: InMemorySpanExporter
) -> None:
    listener = CheckedLater()
    with TransactionProducer("pg-traced-tx", traced.namesrv, listener) as producer:
        producer.send_in_transaction(Message("TracedTx", b"maybe"))
        assert listener.checked.wait(30), "the broker never checked back"
        with PullConsumer(
            "cg-traced-tx", traced.namesrv, consume_from=ConsumeFromWhere.FIRST_OFFSET
        ) as consumer:
            consumer.subscribe("TracedTx")
            wait_for(lambda: consumer.poll(timeout=1.0), timeout=30, what="the committed message")
    send = sdk_span(spans, "send TracedTx")
    assert attrs(send)["messaging.rocketmq.message.type"] == "transaction"
    trace_id, send_id = hex_trace(send), hex_span(send)
    end = sdk_span(spans, "end_transaction")
    assert end.kind is SpanKind.CLIENT
    assert attrs(end)["messaging.rocketmq.transaction.resolution"] == "UNKNOWN"
    check = sdk_span(spans, "check_transaction_state")
    assert check.kind is SpanKind.CLIENT
    assert hex_trace(check) == trace_id
    assert attrs(check)["messaging.rocketmq.transaction.resolution"] == "COMMIT"
    receive = sdk_span(spans, "receive TracedTx")
    assert [format(ln.context.span_id, "016x") for ln in receive.links] == [send_id]

    found = service_spans(
        sink,
        trace_id,
        {
            (REMOTING, "send TracedTx"),
            (REMOTING, "end_transaction"),
            (CHECKBACK, "check_transaction_state"),
            (REMOTING, "check_transaction_state"),
        },
    )
    assert one(found, REMOTING, "send TracedTx").parent_span_id == send_id

    # the answer to the check (COMMIT) is an end under the SDK's check span (an UNKNOWN end
    # changes nothing and makes no span in remoting)
    def end_parents() -> set[str] | None:
        parents = {s.parent_span_id for s in sink.snapshot() if s.name == "end_transaction"}
        return parents if hex_span(check) in parents else None

    wait_for(end_parents, 15, "remoting's span of the check's answer")
    checkback_check = one(found, CHECKBACK, "check_transaction_state")
    relay = one(found, REMOTING, "check_transaction_state")
    assert relay.parent_span_id == checkback_check.span_id
    assert checkback_check.kind == OTLP_CLIENT  # the check-back asks, remoting serves
    assert relay.kind == OTLP_SERVER
