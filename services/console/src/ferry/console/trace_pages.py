"""The OTLP/HTTP receiver (/v1/traces) and the trace pages: recent traces, one trace, and the
path of one message (its traces and every trace linked to them) as a waterfall."""

from __future__ import annotations

import hmac
import re
from dataclasses import asdict

from starlette.concurrency import run_in_threadpool
from starlette.requests import Request
from starlette.responses import JSONResponse, Response

from ferry.console.cluster_pages import console, console_wide
from ferry.console.otlp import (
    JSON,
    PROTOBUF,
    SpanRecord,
    TooLargeError,
    decode_request,
    decompress,
    incoming_spans,
)
from ferry.console.waterfall import layout
from ferry.console.web import BadRequest, param
from ferry.protocol.errors import FerryError
from ferry.protocol.names import check_topic

_TRACE_ID = re.compile(r"^[0-9a-f]{32}$")
_TRACEPARENT = re.compile(r"^[0-9a-f]{2}-([0-9a-f]{32})-[0-9a-f]{16}-[0-9a-f]{2}$")
MAX_MSG_ID_CHARS = 128


async def receive_traces(request: Request) -> Response:
    """OTLP/HTTP export: 200 with an empty ExportTraceServiceResponse (in the request's
    encoding); 400 for what cannot be decoded, 413 above the size limit, 415 for other types;
    401 without the bearer token when otlpToken is set."""
    st = console(request)
    token = st.config.otlp_token
    if token and not hmac.compare_digest(
        request.headers.get("authorization", "").encode(), f"Bearer {token}".encode()
    ):
        return Response(
            "an export needs Authorization: Bearer <otlpToken>",
            status_code=401,
            headers={"WWW-Authenticate": "Bearer"},
        )
    content_type = request.headers.get("content-type", "")
    media = content_type.split(";", 1)[0].strip().lower()
    if media not in (PROTOBUF, JSON):
        return Response(
            f"unsupported Content-Type {content_type[:80]!r}; use {PROTOBUF} or {JSON}",
            status_code=415,
        )
    body = await request.body()
    limit = st.config.otlp_max_request_bytes
    try:
        raw = decompress(body, request.headers.get("content-encoding", ""), limit)
        export = decode_request(raw, content_type)
        spans = incoming_spans(export)
    except TooLargeError as exc:
        return Response(exc.message, status_code=413)
    await run_in_threadpool(st.traces.add, spans)
    if media == JSON:
        return Response("{}", media_type=JSON)
    return Response(b"", media_type=PROTOBUF)  # an empty ExportTraceServiceResponse


def traces_page(request: Request) -> Response:
    st = console_wide(request)
    msg_id = param(request, "msg_id", max_chars=MAX_MSG_ID_CHARS)
    if msg_id:
        return message_trace(request, msg_id)
    return st.renderer.page(
        "traces.html", recent=st.traces.recent_traces(), stats=st.traces.stats()
    )


def trace_page(request: Request) -> Response:
    st = console_wide(request)
    trace_id = request.path_params["trace_id"].lower()
    if not _TRACE_ID.match(trace_id):
        raise BadRequest("a trace id is 32 hex digits")
    ids = st.traces.linked_traces(trace_id)
    spans = st.traces.spans(ids)
    return st.renderer.page(
        "trace.html", title=f"trace {trace_id}", msg_id="", waterfall=layout(spans), note=""
    )


def message_trace_page(request: Request) -> Response:
    msg_id = request.path_params["msg_id"]
    if len(msg_id) > MAX_MSG_ID_CHARS:
        raise BadRequest(f"a message id is at most {MAX_MSG_ID_CHARS} characters")
    return message_trace(request, msg_id)


def message_traces(request: Request, msg_id: str) -> tuple[list[str], list[SpanRecord], str]:
    """Traces whose spans name the message, plus the trace in its traceparent property when
    its topic is given (a message sent by a client that exports nowhere still shows the
    broker's spans), plus the traces linked to or from them: (trace ids, spans, note)."""
    st = console_wide(request)
    topic = param(request, "topic")
    extra: list[str] = []
    note = ""
    if topic:
        check_topic(topic)
        try:
            for msg in st.admin.query_msg_by_unique_key(topic, msg_id):
                match = _TRACEPARENT.match(msg.properties.get("traceparent", ""))
                if match:
                    extra.append(match.group(1))
        except FerryError as exc:
            note = f"the message itself was not found: {exc}"
    ids = st.traces.traces_of_message(msg_id, extra)
    return ids, st.traces.spans(ids), note


def message_trace(request: Request, msg_id: str) -> Response:
    st = console_wide(request)
    _ids, spans, note = message_traces(request, msg_id)
    return st.renderer.page(
        "trace.html",
        title=f"message {msg_id}",
        msg_id=msg_id,
        waterfall=layout(spans),
        note=note,
    )


def message_trace_api(request: Request) -> Response:
    """The message's path as JSON: {msg_id, traces: [trace id], spans: [span], note}, each
    span with its service, name, kind, times (ns), attributes, events and links."""
    msg_id = request.path_params["msg_id"]
    if len(msg_id) > MAX_MSG_ID_CHARS:
        raise BadRequest(f"a message id is at most {MAX_MSG_ID_CHARS} characters")
    ids, spans, note = message_traces(request, msg_id)
    return JSONResponse(
        {"msg_id": msg_id, "traces": ids, "spans": [asdict(s) for s in spans], "note": note}
    )
