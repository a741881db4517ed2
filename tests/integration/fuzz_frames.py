"""Hypothesis strategies for what a hostile or broken peer sends Ferry's ports: random frames,
mutated valid envelopes, and envelopes of every request type with generated field values;
for the console, page requests with odd paths and queries and OTLP export bodies.

The request types come from the tagged union (typing.get_args(AnyRequest)), so a new request
type is fuzzed without touching this file. Types whose purpose is to change stored data or the
cluster's configuration (CHANGES_DATA) are left out of the well-formed envelopes: a valid
"delete this topic" is obeyed, and the fuzz run checks that nothing stored changes.
"""

from __future__ import annotations

import enum
import gzip
import types
import typing
import urllib.parse
from typing import Any

import msgspec
from hypothesis import strategies as st
from opentelemetry.proto.collector.trace.v1 import trace_service_pb2

from ferry.protocol.messages import AnyRequest, wire_tag
from ferry.protocol.record import encode_properties, encode_record
from ferry.protocol.version import PROTOCOL_ID

Frames = list[bytes]

# Requests that, well-formed, change what is stored or how the cluster is configured.
CHANGES_DATA = frozenset(
    {
        "register_broker",
        "unregister_broker",
        "update_topic",
        "delete_topic_in_broker",
        "delete_topic_in_namesrv",
        "store_delete_topic",
        "store_update_config",
        "update_broker_config",
        "clean_expired_consumequeue",
        "delete_expired_commitlog",
        "wipe_write_perm",
        "add_write_perm",
        "reset_offset",
        "delete_subscription_group",
        "update_subscription_group",
        "update_consumer_offset",
        "index_rebuild",
        "scheduler_adopt_progress",
        "store_append_raw",
        "consumer_send_msg_back",
        "end_transaction",
        "controller_register_broker",
        "controller_heartbeat",
        "controller_elect_master",
        "controller_clean_broker_data",
    }
)
REQUEST_TYPES: tuple[type[Any], ...] = typing.get_args(AnyRequest)
SAFE_TYPES = tuple(t for t in REQUEST_TYPES if wire_tag(t) not in CHANGES_DATA)
# The topic whose messages a fuzz run checks afterwards: never generated here.
KEPT_TOPIC = "Kept"
NAMES = ["", "Fuzz", "TBW102", "DefaultCluster", "broker-a", "%RETRY%fuzz", "bad topic!", "x" * 300]
BAD_UTF8 = (b"\xff", b"\xc3\x28", b"\xed\xa0\x80", b"\xf8\x88\x80\x80\x80")

_ints = st.one_of(
    st.integers(-2, 70),
    st.integers(-(2**63), 2**64 - 1),
    st.sampled_from([2**31 - 1, 2**31, 2**32, 2**63 - 1, -(2**31)]),
)
_wild: st.SearchStrategy[Any] = st.recursive(
    st.one_of(
        st.none(), st.booleans(), _ints, st.floats(), st.text(max_size=8), st.binary(max_size=8)
    ),
    lambda inner: st.one_of(
        st.lists(inner, max_size=3), st.dictionaries(st.text(max_size=4), inner, max_size=3)
    ),
    max_leaves=6,
)


def _names() -> st.SearchStrategy[str]:
    return st.one_of(st.sampled_from(NAMES), st.text(max_size=24)).filter(lambda s: s != KEPT_TOPIC)


def value_of(tp: Any, depth: int = 0) -> st.SearchStrategy[Any]:
    """Values of a field's type, as msgpack-ready plain data (structs as maps)."""
    origin = typing.get_origin(tp)
    args = typing.get_args(tp)
    if tp is Any:
        return _wild
    if tp is type(None):
        return st.none()
    if origin in (typing.Union, types.UnionType):
        return st.one_of(*(value_of(a, depth) for a in args))
    if origin is typing.Literal:
        return st.sampled_from(args)
    if origin in (list, tuple, set, frozenset):
        return st.lists(value_of(args[0] if args else Any, depth + 1), max_size=4)
    if origin is dict:
        return st.dictionaries(
            value_of(args[0], depth + 1), value_of(args[1], depth + 1), max_size=3
        )
    if isinstance(tp, type) and issubclass(tp, enum.Enum):
        return st.one_of(st.sampled_from([m.value for m in tp]), _ints)
    if tp is bool:
        return st.booleans()
    if tp is int:
        return _ints
    if tp is float:
        return st.floats()
    if tp is str:
        return _names()
    if tp in (bytes, bytearray, memoryview):
        return st.binary(max_size=64)
    if isinstance(tp, type) and issubclass(tp, msgspec.Struct):
        return _struct_map(tp, depth + 1) if depth < 4 else st.just({})
    return _wild


def _struct_map(tp: type[msgspec.Struct], depth: int) -> st.SearchStrategy[dict[str, Any]]:
    info = msgspec.inspect.type_info(tp)
    assert isinstance(info, msgspec.inspect.StructType)
    required: dict[str, st.SearchStrategy[Any]] = {}
    optional: dict[str, st.SearchStrategy[Any]] = {}
    for field in msgspec.structs.fields(tp):
        # now and then a value of the wrong type: what a broken client would send
        values = (
            st.one_of(value_of(field.type, depth), _wild) if depth else value_of(field.type, depth)
        )
        (required if field.required else optional)[field.encode_name] = values
    if info.tag_field is not None:
        required[info.tag_field] = st.just(info.tag)
    return st.fixed_dictionaries(required, optional=optional)


def body_of(tp: type[Any]) -> st.SearchStrategy[dict[str, Any]]:
    return _struct_map(tp, 0)


_PAYLOADS: st.SearchStrategy[list[bytes]] = st.one_of(
    st.just([]),
    st.lists(st.binary(max_size=128), min_size=1, max_size=2),
    st.builds(
        lambda body, props: [encode_record(b"Fuzz", body, encode_properties(props))],
        st.binary(max_size=64),
        st.dictionaries(st.text(max_size=8), st.text(max_size=8), max_size=3),
    ),
)


def envelope_headers(request_types: tuple[type[Any], ...] = SAFE_TYPES) -> st.SearchStrategy[bytes]:
    """Encoded request envelopes, each body one of request_types with generated values."""
    bodies = st.one_of(*(body_of(t) for t in request_types))
    env = st.fixed_dictionaries(
        {"id": _ints, "body": bodies},
        optional={
            "traceparent": st.one_of(
                st.text(max_size=60), st.just("00-" + "ab" * 16 + "-" + "cd" * 8 + "-01")
            ),
            "tracestate": st.text(max_size=20),
            "oneway": st.booleans(),
        },
    )
    return env.map(msgspec.msgpack.encode)


def well_formed(request_types: tuple[type[Any], ...] = SAFE_TYPES) -> st.SearchStrategy[Frames]:
    return st.builds(
        lambda header, payload: [b"", PROTOCOL_ID, header, *payload],
        envelope_headers(request_types),
        _PAYLOADS,
    )


@st.composite
def _mutated_header(draw: st.DrawFn, headers: st.SearchStrategy[bytes]) -> bytes:
    raw = bytearray(draw(headers))
    for _ in range(draw(st.integers(1, 4))):
        op = draw(st.sampled_from(["flip", "insert", "delete", "truncate", "bad_utf8", "grow"]))
        at = draw(st.integers(0, max(len(raw) - 1, 0)))
        if op == "flip" and raw:
            raw[at] = draw(st.integers(0, 255))
        elif op == "insert":
            raw[at:at] = draw(st.binary(min_size=1, max_size=8))
        elif op == "delete" and raw:
            del raw[at : at + draw(st.integers(1, 8))]
        elif op == "truncate":
            del raw[at:]
        elif op == "grow":  # a length or count byte set large: a string, array or map overruns
            raw[at:at] = draw(st.sampled_from([b"\xdb\x7f\xff\xff\xff", b"\xdd\xff\xff\xff\xff"]))
        elif op == "bad_utf8":
            # a string's first byte made invalid UTF-8 (fixstr headers are 0xa1..0xbf)
            starts = [i for i, b in enumerate(raw[:-1]) if 0xA1 <= b <= 0xBF]
            if starts:
                i = draw(st.sampled_from(starts)) + 1
                bad = draw(st.sampled_from(BAD_UTF8))
                raw[i : i + len(bad)] = bad
    return bytes(raw)


def mutated(request_types: tuple[type[Any], ...] = SAFE_TYPES) -> st.SearchStrategy[Frames]:
    """A valid envelope with bytes flipped, inserted, cut, strings made invalid UTF-8, or its
    frames reshaped (no delimiter, another protocol id, extra frames)."""
    header = _mutated_header(envelope_headers(request_types))  # built once, drawn often
    shapes = st.sampled_from(["plain", "no_delim", "other_proto", "extra", "split"])
    return st.builds(_shape, shapes, header, st.binary(max_size=32))


def _shape(shape: str, header: bytes, extra: bytes) -> Frames:
    if shape == "no_delim":
        return [PROTOCOL_ID, header]
    if shape == "other_proto":
        return [b"", PROTOCOL_ID[:-1] + b"9", header]
    if shape == "extra":
        return [b"", PROTOCOL_ID, header, extra, b""]
    if shape == "split":
        return [b"", PROTOCOL_ID, header[: len(header) // 2], header[len(header) // 2 :]]
    return [b"", PROTOCOL_ID, header]


def random_frames() -> st.SearchStrategy[Frames]:
    """Frames of random bytes, with or without the delimiter and protocol id in front."""
    prefix = st.sampled_from([[], [b""], [b"", PROTOCOL_ID], [PROTOCOL_ID]])
    return st.builds(
        lambda p, rest: p + rest, prefix, st.lists(st.binary(max_size=64), max_size=4)
    ).filter(lambda frames: len(frames) > 0)


def any_frames(request_types: tuple[type[Any], ...] = SAFE_TYPES) -> st.SearchStrategy[Frames]:
    return st.one_of(random_frames(), mutated(request_types), well_formed(request_types))


# ---- the console --------------------------------------------------------------------------

# GET pages (the POST forms change data and are left out), with {} for a path segment
PAGES = [
    "/", "/healthz", "/topics", "/topic/{}", "/groups", "/group", "/group/{}", "/producers",
    "/messages", "/message/{}", "/dlq", "/traces", "/trace/{}", "/trace/message/{}",
    "/api/trace/message/{}", "/static/{}",
]  # fmt: skip
PARAMS = ["begin", "end", "group", "id", "key", "mode", "msg_id", "show", "topic"]
RAW_SEGMENTS = ("..", "%", "%ff", "%00")  # sent as they are: broken escapes, a parent dir
_segment = st.one_of(
    st.text(max_size=40),
    st.sampled_from([*RAW_SEGMENTS, "0" * 32, "AC1100" + "0" * 26, "x" * 2000]),
)


@st.composite
def page_paths(draw: st.DrawFn) -> str:
    page = draw(st.sampled_from(PAGES))
    seg = draw(_segment)
    quoted = seg if seg in RAW_SEGMENTS else urllib.parse.quote(seg, safe="")
    path = page.replace("{}", quoted)
    query = draw(st.dictionaries(st.sampled_from(PARAMS), _segment, max_size=3))
    if query:
        path += "?" + urllib.parse.urlencode(query)
    if draw(st.booleans()):
        path += draw(st.sampled_from(["&%", "?%zz=1", "&begin=%ff%fe", "#frag"]))
    return path


def _valid_export(name: str, attr: str, n_spans: int) -> bytes:
    req = trace_service_pb2.ExportTraceServiceRequest()
    rs = req.resource_spans.add()
    kv = rs.resource.attributes.add()
    kv.key, kv.value.string_value = "service.name", name
    ss = rs.scope_spans.add()
    for i in range(n_spans):
        span = ss.spans.add()
        span.trace_id = bytes([i + 1]) * 16
        span.span_id = bytes([i + 2]) * 8
        span.name = name
        a = span.attributes.add()
        a.key, a.value.string_value = "messaging.message.id", attr
    out: bytes = req.SerializeToString()
    return out


@st.composite
def otlp_bodies(draw: st.DrawFn) -> tuple[bytes, str, str]:
    """(body, Content-Type, Content-Encoding) of an OTLP/HTTP export, valid or broken."""
    valid = _valid_export(
        draw(st.text(max_size=12)), draw(st.text(max_size=12)), draw(st.integers(0, 3))
    )
    kind = draw(st.sampled_from(["random", "valid", "mutated", "json", "json_random"]))
    if kind == "random":
        body = draw(st.binary(max_size=256))
    elif kind == "valid":
        body = valid
    elif kind == "mutated":
        raw = bytearray(valid)
        for _ in range(draw(st.integers(1, 4))):
            if raw:
                raw[draw(st.integers(0, len(raw) - 1))] = draw(st.integers(0, 255))
        body = bytes(raw)
    elif kind == "json":
        tree = {"resourceSpans": [{"scopeSpans": [{"spans": [draw(_wild_span())]}]}]}
        body = msgspec.json.encode(tree)
    else:
        body = draw(st.binary(max_size=128))
    media = "application/json" if kind.startswith("json") else "application/x-protobuf"
    media = draw(st.sampled_from([media, media, "text/plain", media + "; charset=utf-8"]))
    encoding = draw(st.sampled_from(["", "", "gzip", "deflate", "br", "gzip"]))
    if encoding == "gzip" and draw(st.booleans()):
        body = gzip.compress(body)
    return body, media, encoding


def _wild_span() -> st.SearchStrategy[dict[str, Any]]:
    ids = st.one_of(st.text(max_size=40), st.just("ab" * 16), st.just("cd" * 8), _wild)
    return st.fixed_dictionaries(
        {},
        optional={
            "traceId": ids,
            "spanId": ids,
            "parentSpanId": ids,
            "name": st.one_of(st.text(max_size=20), _wild),
            "startTimeUnixNano": st.one_of(_ints.map(str), _wild),
            "attributes": st.lists(
                st.fixed_dictionaries({"key": st.text(max_size=8), "value": _wild}), max_size=3
            ),
        },
    )


def plain_value(tp: Any) -> Any:
    """The simplest well-typed value of a field's type: how one valid instance of every
    request type is built (sample_request)."""
    origin = typing.get_origin(tp)
    args = typing.get_args(tp)
    if origin in (typing.Union, types.UnionType):
        return plain_value(next((a for a in args if a is not type(None)), type(None)))
    if origin is typing.Literal:
        return args[0]
    if origin in (list, tuple, set, frozenset):
        return []
    if origin is dict:
        return {}
    if isinstance(tp, type) and issubclass(tp, enum.Enum):
        return next(iter(tp))
    if isinstance(tp, type) and issubclass(tp, msgspec.Struct):
        return sample_request(tp)
    defaults: dict[Any, Any] = {bool: False, int: 0, float: 0.0, str: "x", bytes: b""}
    return defaults.get(tp)


def sample_request(tp: type[Any]) -> Any:
    """A valid instance of a request (or nested struct) type: defaults where it has them."""
    kwargs = {f.name: plain_value(f.type) for f in msgspec.structs.fields(tp) if f.required}
    return tp(**kwargs)
