"""OTLP export requests: protobuf and JSON decode to the same spans; bad ones are refused."""

from __future__ import annotations

import gzip
import json

import pytest
from opentelemetry.proto.collector.trace.v1 import trace_service_pb2
from opentelemetry.proto.common.v1 import common_pb2
from opentelemetry.proto.resource.v1 import resource_pb2
from opentelemetry.proto.trace.v1 import trace_pb2

from ferry.console.otlp import (
    MAX_MESSAGE_IDS,
    OtlpError,
    TooLargeError,
    decode_request,
    decompress,
    incoming_spans,
    spans_of,
)

TRACE = "5b8efff798038103d269b633813fc60c"
OTHER = "0af7651916cd43dd8448eb211c80319c"


def _kv(key: str, value: str) -> common_pb2.KeyValue:
    return common_pb2.KeyValue(key=key, value=common_pb2.AnyValue(string_value=value))


def export_request() -> trace_service_pb2.ExportTraceServiceRequest:
    span = trace_pb2.Span(
        trace_id=bytes.fromhex(TRACE),
        span_id=bytes.fromhex("eee19b7ec3c1b174"),
        name="process orders",
        kind=trace_pb2.Span.SPAN_KIND_CONSUMER,
        start_time_unix_nano=1_000,
        end_time_unix_nano=5_000,
        attributes=[_kv("messaging.message.id", "MSG1")],
        links=[
            trace_pb2.Span.Link(
                trace_id=bytes.fromhex(OTHER), span_id=bytes.fromhex("b7ad6b7169203331")
            )
        ],
    )
    return trace_service_pb2.ExportTraceServiceRequest(
        resource_spans=[
            trace_pb2.ResourceSpans(
                resource=resource_pb2.Resource(attributes=[_kv("service.name", "shop")]),
                scope_spans=[
                    trace_pb2.ScopeSpans(
                        scope=common_pb2.InstrumentationScope(name="ferry.client"), spans=[span]
                    )
                ],
            )
        ]
    )


JSON_REQUEST = {
    "resourceSpans": [
        {
            "resource": {"attributes": [{"key": "service.name", "value": {"stringValue": "shop"}}]},
            "scopeSpans": [
                {
                    "scope": {"name": "ferry.client"},
                    "spans": [
                        {
                            "traceId": TRACE,
                            "spanId": "eee19b7ec3c1b174",
                            "name": "process orders",
                            "kind": 5,
                            "startTimeUnixNano": "1000",
                            "endTimeUnixNano": "5000",
                            "attributes": [
                                {"key": "messaging.message.id", "value": {"stringValue": "MSG1"}}
                            ],
                            "links": [{"traceId": OTHER, "spanId": "b7ad6b7169203331"}],
                        }
                    ],
                }
            ],
        }
    ]
}


def test_protobuf_and_json_decode_to_the_same_spans() -> None:
    from_pb = spans_of(
        decode_request(export_request().SerializeToString(), "application/x-protobuf")
    )
    from_json = spans_of(
        decode_request(json.dumps(JSON_REQUEST).encode(), "application/json; charset=utf-8")
    )
    assert from_pb == from_json
    (span,) = from_pb
    assert span.trace_id == TRACE
    assert span.service == "shop"
    assert span.kind == 5
    assert span.message_ids() == ["MSG1"]
    assert span.links[0].trace_id == OTHER
    assert span.end_ns - span.start_ns == 4_000


@pytest.mark.parametrize(
    ("body", "content_type"),
    [
        (b"\xff\xff\xff garbage", "application/x-protobuf"),
        (b"{not json", "application/json"),
        (
            b'{"resourceSpans": [{"scopeSpans": [{"spans": [{"traceId": "zz"}]}]}]}',
            "application/json",
        ),
        (b'{"resourceSpans": "nope"}', "application/json"),
        (b"[]", "text/plain"),
    ],
)
def test_undecodable_requests_raise_a_typed_error(body: bytes, content_type: str) -> None:
    with pytest.raises(OtlpError):
        spans_of(decode_request(body, content_type))


def test_a_span_without_valid_ids_is_refused() -> None:
    request = export_request()
    request.resource_spans[0].scope_spans[0].spans[0].trace_id = b"short"
    with pytest.raises(OtlpError):
        spans_of(decode_request(request.SerializeToString(), "application/x-protobuf"))


def test_gzip_is_undone_but_a_bomb_is_stopped_at_the_limit() -> None:
    raw = export_request().SerializeToString()
    assert decompress(gzip.compress(raw), "gzip", 1024) == raw
    bomb = gzip.compress(b"\0" * 10_000_000)
    assert len(bomb) < 20_000
    with pytest.raises(TooLargeError):
        decompress(bomb, "gzip", 1_000_000)
    with pytest.raises(OtlpError):
        decompress(b"not gzip", "gzip", 1000)
    with pytest.raises(OtlpError):
        decompress(raw, "br", 1000)


def test_message_ids_come_from_attributes_events_and_a_batch_event_and_are_bounded() -> None:
    batch_ids = [f"{i:032X}" for i in range(5000)]
    array = common_pb2.AnyValue(
        array_value=common_pb2.ArrayValue(
            values=[common_pb2.AnyValue(string_value=v) for v in ("ARR1", "ARR2")]
        )
    )
    span = trace_pb2.Span(
        trace_id=bytes.fromhex(TRACE),
        span_id=bytes.fromhex("eee19b7ec3c1b174"),
        name="send Orders",
        attributes=[_kv("messaging.message.id", "ONE")],
        events=[
            trace_pb2.Span.Event(
                name="messages",
                attributes=[
                    common_pb2.KeyValue(key="messaging.message.id", value=array),
                    # a long joined string is read whole, not cut like a shown attribute
                    _kv("ferry.batch.message_ids", ",".join(["ONE", "", "x" * 200, *batch_ids])),
                ],
            )
        ],
    )
    request = export_request()
    request.resource_spans[0].scope_spans[0].spans[0].CopyFrom(span)
    (incoming,) = incoming_spans(request)
    assert incoming.message_ids[:3] == ["ONE", "ARR1", "ARR2"]  # once each, empty and long dropped
    assert incoming.message_ids[3:] == batch_ids[: MAX_MESSAGE_IDS - 3]
    # as a page shows it: the batch's ids whole, every one marked as this span's
    (shown,) = spans_of(request)
    assert shown.message_ids()[:3] == ["ONE", "ARR1", "ARR2"]
    assert shown.message_ids()[-1] == batch_ids[-1]
