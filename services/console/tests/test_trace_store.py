"""The trace store: a message's traces with the linked ones, retention and the size bound."""

from __future__ import annotations

from pathlib import Path

from opentelemetry.proto.collector.trace.v1 import trace_service_pb2
from opentelemetry.proto.common.v1 import common_pb2
from opentelemetry.proto.trace.v1 import trace_pb2

from ferry.console.otlp import IncomingSpan, incoming_spans
from ferry.console.trace_store import TraceStore

MiB = 1024 * 1024


def span(
    trace: str,
    span_id: str,
    *,
    parent: str = "",
    msg_id: str = "",
    links: tuple[tuple[str, str], ...] = (),
    start: int = 0,
    pad: int = 0,
) -> IncomingSpan:
    attrs = [common_pb2.KeyValue(key="pad", value=common_pb2.AnyValue(string_value="x" * pad))]
    if msg_id:
        attrs.append(
            common_pb2.KeyValue(
                key="messaging.message.id", value=common_pb2.AnyValue(string_value=msg_id)
            )
        )
    pb = trace_pb2.Span(
        trace_id=bytes.fromhex(trace * 32),
        span_id=bytes.fromhex(span_id * 16),
        parent_span_id=bytes.fromhex(parent * 16) if parent else b"",
        name=f"span {span_id}",
        kind=trace_pb2.Span.SPAN_KIND_PRODUCER,
        start_time_unix_nano=start,
        end_time_unix_nano=start + 10,
        attributes=attrs,
        links=[
            trace_pb2.Span.Link(trace_id=bytes.fromhex(t * 32), span_id=bytes.fromhex(s * 16))
            for t, s in links
        ],
    )
    request = trace_service_pb2.ExportTraceServiceRequest(
        resource_spans=[trace_pb2.ResourceSpans(scope_spans=[trace_pb2.ScopeSpans(spans=[pb])])]
    )
    (incoming,) = incoming_spans(request)
    return incoming


def test_message_lookup_finds_its_trace_and_the_batch_traces_linked_to_it(tmp_path: Path) -> None:
    store = TraceStore(tmp_path / "t.db", max_bytes=64 * MiB, retention_ms=3600_000)
    store.add(
        [
            span("a", "1", msg_id="M1"),  # the send of M1
            span("a", "2", parent="1"),  # the broker's store span, child of the send
            span("b", "3", msg_id="M2"),  # another message
            span("c", "4", links=(("a", "1"), ("b", "3"))),  # a batch receive of both
            span("d", "5"),  # unrelated
        ]
    )
    traces = store.traces_of_message("M1")
    assert traces == ["a" * 32, "c" * 32]
    shown = store.spans(traces)
    assert {s.name for s in shown} == {"span 1", "span 2", "span 4"}
    receive = next(s for s in shown if s.name == "span 4")
    assert [lk.span_id for lk in receive.links] == ["1" * 16, "3" * 16]
    assert receive.kind == 4 and receive.service == "unknown"
    assert store.traces_of_message("nobody") == []
    # a trace id known otherwise (the message's traceparent) counts as found
    assert store.traces_of_message("nobody", ["d" * 32]) == ["d" * 32]
    store.close()


def test_spans_older_than_the_retention_are_deleted(tmp_path: Path) -> None:
    store = TraceStore(tmp_path / "t.db", max_bytes=64 * MiB, retention_ms=60_000)
    store.add([span("a", "1", msg_id="OLD")], now_ms=1_000_000)
    store.add([span("b", "2", msg_id="NEW")], now_ms=1_050_000)
    assert store.expire(now_ms=1_070_000) == 1
    assert store.traces_of_message("OLD") == []
    assert store.traces_of_message("NEW") == ["b" * 32]
    assert store.stats().spans == 1
    store.close()


def test_the_oldest_spans_go_when_the_store_is_full_and_it_stays_under_the_bound(
    tmp_path: Path,
) -> None:
    store = TraceStore(tmp_path / "t.db", max_bytes=MiB, retention_ms=3600_000)
    for i in range(40):  # about 40 * 50 KB = 2 MB into a 1 MiB store
        store.add([span(f"{i % 16:x}", f"{i % 16:x}", msg_id=f"M{i}", pad=50_000)])
        assert store.stats().bytes <= MiB
    assert store.traces_of_message("M0") == []
    assert store.traces_of_message("M39") != []
    assert store.stats().file_bytes < 4 * MiB
    store.close()
    reopened = TraceStore(tmp_path / "t.db", max_bytes=MiB, retention_ms=3600_000)
    assert 0 < reopened.stats().bytes <= MiB
    reopened.close()
