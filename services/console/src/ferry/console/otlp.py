"""OTLP/HTTP trace export requests (protobuf or JSON) decoded into plain span records.

OTLP/JSON is the protobuf JSON mapping except that trace and span ids are hex strings; they
are turned into base64 first so that one protobuf parser serves both encodings.
"""

from __future__ import annotations

import base64
import json
import zlib
from dataclasses import dataclass, field
from typing import Any

from google.protobuf import json_format  # type: ignore[import-untyped]
from google.protobuf.message import DecodeError  # type: ignore[import-untyped]
from opentelemetry.proto.collector.trace.v1 import trace_service_pb2
from opentelemetry.proto.trace.v1 import trace_pb2

from ferry.protocol.errors import InvalidParameterError

PROTOBUF = "application/x-protobuf"
JSON = "application/json"
MAX_ATTRIBUTE_CHARS = 2048  # a longer attribute value is cut (a body put in an attribute)
MAX_EVENTS = 32
MAX_LINKS = 128
MESSAGE_ID = "messaging.message.id"
# the broker's send span lists a batch's ids in one event attribute, joined by ","
BATCH_MESSAGE_IDS = "ferry.batch.message_ids"
MAX_MESSAGE_IDS = 4096  # ids indexed per span: a 4 MiB batch of 1 KiB messages
MAX_ID_CHARS = 128
MAX_BATCH_IDS_CHARS = MAX_MESSAGE_IDS * (MAX_ID_CHARS + 1)
_ID_KEYS = ("traceId", "spanId", "parentSpanId", "trace_id", "span_id", "parent_span_id")


class OtlpError(InvalidParameterError):
    """An export request that cannot be decoded."""


class TooLargeError(InvalidParameterError):
    """An export request (or its decompressed form) above the configured limit."""


@dataclass(frozen=True)
class SpanLink:
    trace_id: str
    span_id: str
    attributes: dict[str, Any] = field(default_factory=dict)


@dataclass(frozen=True)
class SpanRecord:
    trace_id: str
    span_id: str
    parent_span_id: str
    name: str
    kind: int
    service: str
    scope: str
    start_ns: int
    end_ns: int
    status_code: int
    status_message: str
    attributes: dict[str, Any]
    events: list[dict[str, Any]]
    links: list[SpanLink]

    def message_ids(self) -> list[str]:
        """The message ids this span is about: messaging.message.id (one or many), in its
        attributes or events, and a batch event's ferry.batch.message_ids."""
        found: list[str] = []
        for attrs in (self.attributes, *(e["attributes"] for e in self.events)):
            value = attrs.get(MESSAGE_ID)
            if isinstance(value, str):
                found.append(value)
            elif isinstance(value, list):
                found.extend(v for v in value if isinstance(v, str))
            batch = attrs.get(BATCH_MESSAGE_IDS)
            if isinstance(batch, str):
                found.extend(batch.split(","))
        return [m for m in dict.fromkeys(found) if m]


def decompress(body: bytes, encoding: str, limit: int) -> bytes:
    """The request body with its Content-Encoding (gzip, deflate or none) undone, refusing
    to inflate past `limit` bytes."""
    encoding = encoding.strip().lower()
    if encoding in ("", "identity"):
        return body
    if encoding not in ("gzip", "deflate"):
        raise OtlpError(f"unsupported Content-Encoding {encoding!r}")
    inflater = zlib.decompressobj(wbits=31 if encoding == "gzip" else 15)
    try:
        out = inflater.decompress(body, limit + 1)
    except zlib.error as exc:
        raise OtlpError(f"bad {encoding} body: {exc}") from None
    if len(out) > limit or inflater.unconsumed_tail:
        raise TooLargeError(f"the decompressed request is larger than {limit} bytes")
    return out


def decode_request(body: bytes, content_type: str) -> Any:
    """An ExportTraceServiceRequest from a protobuf or OTLP/JSON body."""
    request = trace_service_pb2.ExportTraceServiceRequest()
    media = content_type.split(";", 1)[0].strip().lower()
    if media == PROTOBUF:
        try:
            request.ParseFromString(body)
        except DecodeError as exc:
            raise OtlpError(f"not an OTLP protobuf export request: {exc}") from None
        return request
    if media == JSON:
        try:
            tree = json.loads(body)
        except (ValueError, RecursionError) as exc:
            raise OtlpError(f"not JSON: {exc}") from None
        try:
            json_format.ParseDict(_hex_ids_to_base64(tree), request, ignore_unknown_fields=True)
        except (json_format.ParseError, ValueError, TypeError, RecursionError) as exc:
            raise OtlpError(f"not an OTLP/JSON export request: {exc}") from None
        return request
    raise OtlpError(f"unsupported Content-Type {content_type!r}; use {PROTOBUF} or {JSON}")


def _hex_ids_to_base64(node: Any) -> Any:
    if isinstance(node, dict):
        out = {}
        for key, value in node.items():
            if key in _ID_KEYS and isinstance(value, str):
                try:
                    out[key] = base64.b64encode(bytes.fromhex(value)).decode()
                except ValueError:
                    raise OtlpError(f"{key} {value[:40]!r} is not hex") from None
            else:
                out[key] = _hex_ids_to_base64(value)
        return out
    if isinstance(node, list):
        return [_hex_ids_to_base64(v) for v in node]
    return node


def any_value(value: Any, depth: int = 0) -> Any:
    """A plain Python value of an OTLP AnyValue (long strings cut)."""
    kind = value.WhichOneof("value")
    if kind == "string_value":
        text: str = value.string_value
        return text if len(text) <= MAX_ATTRIBUTE_CHARS else text[:MAX_ATTRIBUTE_CHARS] + "…"
    if kind in ("bool_value", "int_value", "double_value"):
        return getattr(value, kind)
    if kind == "bytes_value":
        return value.bytes_value[: MAX_ATTRIBUTE_CHARS // 2].hex()
    if depth > 4:
        return "…"
    if kind == "array_value":
        return [any_value(v, depth + 1) for v in value.array_value.values[:256]]
    if kind == "kvlist_value":
        return {kv.key: any_value(kv.value, depth + 1) for kv in value.kvlist_value.values[:256]}
    return None


def attributes(kvs: Any) -> dict[str, Any]:
    """Plain values; a batch's id list is kept whole (up to MAX_MESSAGE_IDS ids), so that the
    page shows and marks every message of it."""
    return {
        kv.key: (
            kv.value.string_value[:MAX_BATCH_IDS_CHARS]
            if kv.key == BATCH_MESSAGE_IDS and kv.value.WhichOneof("value") == "string_value"
            else any_value(kv.value)
        )
        for kv in kvs
    }


def _service(rs: Any) -> str:
    for kv in rs.resource.attributes:
        if kv.key == "service.name":
            return str(any_value(kv.value))[:128] or "unknown"
    return "unknown"


def _check_ids(s: Any) -> None:
    if len(s.trace_id) != 16 or len(s.span_id) != 8:
        raise OtlpError(f"span {s.name[:80]!r} has no valid trace or span id")


def spans_of(request: Any) -> list[SpanRecord]:
    """Every span of an export request, with its resource's service.name."""
    out: list[SpanRecord] = []
    for rs in request.resource_spans:
        service = _service(rs)
        for ss in rs.scope_spans:
            for s in ss.spans:
                _check_ids(s)
                out.append(convert(s, service, ss.scope.name[:128]))
    return out


@dataclass(frozen=True, slots=True)
class IncomingSpan:
    """What the trace store indexes of a received span, and the span itself as protobuf
    bytes: turned into a SpanRecord only when a page shows it, which keeps ingest cheap."""

    trace_id: str
    span_id: str
    parent_span_id: str
    name: str
    service: str
    scope: str
    start_ns: int
    end_ns: int
    message_ids: list[str]
    linked_traces: list[str]
    blob: bytes


def _ids_in(kvs: Any, out: list[str]) -> None:
    for kv in kvs:
        if kv.key == MESSAGE_ID:
            kind = kv.value.WhichOneof("value")
            if kind == "string_value":
                out.append(kv.value.string_value)
            elif kind == "array_value":
                out.extend(v.string_value for v in kv.value.array_value.values)
        elif kv.key == BATCH_MESSAGE_IDS and kv.value.WhichOneof("value") == "string_value":
            out.extend(kv.value.string_value.split(","))


def message_ids_of(s: Any) -> list[str]:
    """The message ids a span names: messaging.message.id (one, or a list), in its attributes
    or its events, and a batch's ids in an event's ferry.batch.message_ids; at most
    MAX_MESSAGE_IDS, each at most 128 characters."""
    found: list[str] = []
    _ids_in(s.attributes, found)
    for event in s.events[:MAX_EVENTS]:
        _ids_in(event.attributes, found)
    unique = dict.fromkeys(m for m in found if 0 < len(m) <= MAX_ID_CHARS)
    return list(unique)[:MAX_MESSAGE_IDS]


def incoming_spans(request: Any) -> list[IncomingSpan]:
    out: list[IncomingSpan] = []
    for rs in request.resource_spans:
        service = _service(rs)
        for ss in rs.scope_spans:
            scope = ss.scope.name[:128]
            for s in ss.spans:
                _check_ids(s)
                trace_id = s.trace_id.hex()
                msg_ids = message_ids_of(s)
                linked = {lk.trace_id.hex() for lk in s.links if len(lk.trace_id) == 16}
                linked.discard(trace_id)
                start = int(s.start_time_unix_nano)
                out.append(
                    IncomingSpan(
                        trace_id,
                        s.span_id.hex(),
                        s.parent_span_id.hex(),
                        s.name[:256],
                        service,
                        scope,
                        start,
                        max(int(s.end_time_unix_nano), start),
                        msg_ids,
                        sorted(linked)[:MAX_LINKS],
                        s.SerializeToString(),
                    )
                )
    return out


def span_from_blob(blob: bytes, service: str, scope: str) -> SpanRecord:
    return convert(trace_pb2.Span.FromString(blob), service, scope)


def convert(s: Any, service: str, scope: str) -> SpanRecord:
    start = int(s.start_time_unix_nano)
    return SpanRecord(
        trace_id=s.trace_id.hex(),
        span_id=s.span_id.hex(),
        parent_span_id=s.parent_span_id.hex(),
        name=s.name[:256],
        kind=int(s.kind),
        service=service,
        scope=scope,
        start_ns=start,
        end_ns=max(int(s.end_time_unix_nano), start),
        status_code=int(s.status.code),
        status_message=s.status.message[:MAX_ATTRIBUTE_CHARS],
        attributes=attributes(s.attributes),
        events=[
            {
                "name": e.name[:256],
                "time_ns": int(e.time_unix_nano),
                "attributes": attributes(e.attributes),
            }
            for e in s.events[:MAX_EVENTS]
        ],
        links=[
            SpanLink(lk.trace_id.hex(), lk.span_id.hex(), attributes(lk.attributes))
            for lk in s.links[:MAX_LINKS]
            if len(lk.trace_id) == 16 and len(lk.span_id) == 8
        ],
    )
