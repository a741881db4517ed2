"""The proxy's metrics and spans, as one grpc.aio server interceptor around every call.

Metrics (metricsExporterType PROM, OTLP_GRPC or LOG, as the brokers'): `rocketmq_rpc_latency`,
a histogram of each call's time in ms by method (request_code) and the Status code of its reply
(response_code, the Code's name; CANCELLED when the client went first, EXCEPTION when the
call failed without a reply); its _count is the calls. With PROM the proxy serves its own
registry at metricsPromExporterHost:metricsPromExporterPort (/metrics).

Spans (when OTEL_* configure an exporter): a SERVER span for each SendMessage (`send <topic>`)
and ReceiveMessage (`receive <topic>`) with the OpenTelemetry messaging attributes. A span
continues the client's trace: a message's system_properties.trace_context (where RocketMQ 5's
clients put it), else the call's `traceparent` metadata (gRPC's W3C propagation). The SDK's
producer span of the send, and the brokers' spans after it, are its children. A receive's span
links to each delivered message's context, as the SDK's receive spans do.

rocketmq-python-client 5.1.2 sets neither: its calls start new traces here.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import AsyncIterator, Awaitable, Callable, Sequence
from typing import Any

import grpc
from opentelemetry import trace

from ferry.protocol.span_attributes import messaging
from ferry.proxy.protocol import Code, MessageType, Pb
from ferry.proxy.service import Malformed
from ferry.runtime import metrics, telemetry
from ferry.runtime.config import ProxyConfig

log = logging.getLogger("ferry.proxy.observe")

TRACER = "ferry-proxy"
TRACEPARENT = "traceparent"
TRACESTATE = "tracestate"
CLIENT_ID = "x-mq-client-id"
LATENCY_HELP = "time of each gRPC call in the proxy, by method and the Status code answered"
CANCELLED = "CANCELLED"  # response_code of a call the client cancelled (or whose deadline passed)
TRACED = frozenset(("SendMessage", "ReceiveMessage"))
_CODE_NAMES = {int(c): c.name for c in Code}
_TYPE_NAMES = {
    MessageType.NORMAL: "normal",
    MessageType.FIFO: "fifo",
    MessageType.DELAY: "delay",
    MessageType.TRANSACTION: "transaction",
}


def code_name(code: int) -> str:
    return _CODE_NAMES.get(code, str(code))


class Observer(grpc.aio.ServerInterceptor):  # type: ignore[misc]
    """Times every call (with metrics on) and traces sends and receives (with tracing on)."""

    def __init__(self, latency: Any | None) -> None:
        self._latency = latency
        self._children: dict[tuple[str, str], Any] = {}  # labels() takes a lock each time

    def observe(self, method: str, code: str, began: float) -> None:
        if self._latency is None:
            return
        child = self._children.get((method, code))
        if child is None:
            child = self._children[(method, code)] = self._latency.labels("grpc", method, code)
        child.observe((time.monotonic() - began) * 1000.0)

    async def intercept_service(
        self,
        continuation: Callable[[Any], Awaitable[Any]],
        details: Any,
    ) -> Any:
        handler = await continuation(details)
        if handler is None:  # not a method of the service: grpc answers UNIMPLEMENTED
            return None
        method = str(details.method).rsplit("/", 1)[-1]
        traced = method in TRACED and telemetry.enabled()
        if handler.unary_unary is not None:
            return handler._replace(unary_unary=self._unary(method, handler.unary_unary, traced))
        if handler.unary_stream is not None:
            inner = handler.unary_stream
            return handler._replace(unary_stream=self._server_stream(method, inner, traced))
        if handler.stream_stream is not None:
            return handler._replace(stream_stream=self._duplex(method, handler.stream_stream))
        return handler

    def _unary(self, method: str, fn: Any, traced: bool) -> Any:
        async def call(request: Pb, context: Any) -> Pb:
            began = time.monotonic()
            code = "EXCEPTION"
            malformed = isinstance(request, Malformed)  # answered BAD_REQUEST: no span
            span = _send_span(request, context) if traced and not malformed else None
            try:
                if span is None:
                    reply = await fn(request, context)
                else:
                    with trace.use_span(span, end_on_exit=False):
                        reply = await fn(request, context)
                code = code_name(int(reply.status.code))
                _end_send(span, reply)
                return reply
            except asyncio.CancelledError:
                code = CANCELLED
                raise
            finally:
                if span is not None and span.is_recording():
                    telemetry.end_span(span, code if code != "OK" else "")
                self.observe(method, code, began)

        return call

    def _server_stream(self, method: str, fn: Any, traced: bool) -> Any:
        async def call(request: Pb, context: Any) -> AsyncIterator[Pb]:
            began = time.monotonic()
            code = "EXCEPTION"
            malformed = isinstance(request, Malformed)
            span = _receive_span(request, context) if traced and not malformed else None
            count = 0
            try:
                async for reply in fn(request, context):
                    which = reply.WhichOneof("content")
                    if which == "status":
                        code = code_name(int(reply.status.code))
                    elif which == "message" and span is not None:
                        count += 1
                        _link(span, reply.message.system_properties.trace_context)
                    yield reply
            except asyncio.CancelledError:
                code = CANCELLED
                raise
            finally:
                if span is not None:
                    span.set_attribute("messaging.batch.message_count", count)
                    failed = code not in ("OK", "MESSAGE_NOT_FOUND")
                    telemetry.end_span(span, code if failed else "")
                self.observe(method, code, began)

        return call

    def _duplex(self, method: str, fn: Any) -> Any:
        async def call(requests: AsyncIterator[Pb], context: Any) -> AsyncIterator[Pb]:
            began = time.monotonic()
            code = "OK"  # a Telemetry stream's commands carry no Status unless refused
            try:
                async for reply in fn(requests, context):
                    if reply.HasField("status"):
                        code = code_name(int(reply.status.code))
                    yield reply
            except asyncio.CancelledError:
                code = CANCELLED  # the client went away: how a Telemetry stream usually ends
                raise
            except BaseException:
                code = "EXCEPTION"
                raise
            finally:
                self.observe(method, code, began)

        return call


def interceptors(config: ProxyConfig) -> list[grpc.aio.ServerInterceptor]:
    """The proxy's interceptor, when metrics or traces are on (none otherwise: no cost)."""
    latency = None
    if metrics.enabled():
        from prometheus_client import Histogram

        latency = Histogram(
            metrics.RPC_LATENCY,
            LATENCY_HELP,
            ("protocol_type", "request_code", "response_code"),
            registry=metrics.registry(),
            buckets=metrics.LATENCY_BUCKETS_MS,
        )
    if latency is None and not telemetry.enabled():
        return []
    return [Observer(latency)]


class MetricsEndpoint:
    """PROM: prometheus_client's HTTP server for the proxy's registry, on its own thread."""

    def __init__(self, config: ProxyConfig) -> None:
        from prometheus_client import start_http_server

        host = config.metrics_prom_exporter_host or config.listen_host
        self._server, self._thread = start_http_server(
            config.metrics_prom_exporter_port, host, metrics.registry()
        )
        self.addr = f"{config.advertised_host}:{self._server.server_address[1]}"

    def close(self) -> None:
        self._server.shutdown()
        self._server.server_close()
        self._thread.join(5)


def metrics_endpoint(config: ProxyConfig) -> MetricsEndpoint | None:
    """The /metrics endpoint with PROM; None otherwise, or when its port cannot be bound (the
    proxy serves without it, as a broker does)."""
    if config.metrics_exporter_type != "PROM" or not metrics.enabled():
        return None
    try:
        return MetricsEndpoint(config)
    except OSError as exc:
        log.error("metrics endpoint not served: %s", exc)
        return None


# ---- spans -------------------------------------------------------------------------------


def _metadata(context: Any) -> dict[str, str]:
    try:
        return {str(k): str(v) for k, v in (context.invocation_metadata() or ())}
    except Exception:  # noqa: BLE001 - a span's inputs never fail the call
        return {}


def _send_span(request: Pb, context: Any) -> trace.Span | None:
    """A span for a SendMessage, in the first message's trace (or the call's)."""
    try:
        meta = _metadata(context)
        msgs: Sequence[Pb] = list(request.messages)
        parent = meta.get(TRACEPARENT, "")
        state = meta.get(TRACESTATE, "")
        if msgs and _w3c(msgs[0].system_properties.trace_context):
            parent, state = msgs[0].system_properties.trace_context, ""
        topic = msgs[0].topic.name if msgs else ""
        rocketmq: dict[str, Any] = {}
        message_id = ""
        if len(msgs) == 1:
            props = msgs[0].system_properties
            message_id = props.message_id
            rocketmq["message.type"] = _TYPE_NAMES.get(props.message_type, "normal")
            if props.HasField("tag"):
                rocketmq["message.tag"] = props.tag
            if props.keys:
                rocketmq["message.keys"] = list(props.keys)
            if props.HasField("message_group"):
                rocketmq["message.group"] = props.message_group
            if props.HasField("delivery_timestamp"):
                rocketmq["message.delivery_timestamp"] = props.delivery_timestamp.ToMilliseconds()
        if msgs[0].topic.resource_namespace if msgs else False:
            rocketmq["namespace"] = msgs[0].topic.resource_namespace
        attributes = messaging(
            "send",
            operation_type="send",
            destination=topic,
            message_id=message_id,
            batch_count=len(msgs),
            client_id=meta.get(CLIENT_ID, ""),
            rocketmq=rocketmq,
        )
        span = telemetry.open_span(
            TRACER, f"send {topic}", parent, state, trace.SpanKind.SERVER, **attributes
        )
        if span is not None:
            for other in msgs[1:]:
                _link(span, other.system_properties.trace_context)
        return span
    except Exception:  # noqa: BLE001 - failed() logs it, once
        telemetry.failed("proxy send span")
        return None


def _end_send(span: trace.Span | None, reply: Pb) -> None:
    """A send with a failed entry is an error span named by the first failure's Code."""
    if span is None:
        return
    try:
        failed = [e for e in reply.entries if e.status.code != Code.OK]
        if failed:
            telemetry.end_span(span, code_name(int(failed[0].status.code)))
    except Exception:  # noqa: BLE001 - failed() logs it, once
        telemetry.failed("proxy send span end")


def _receive_span(request: Pb, context: Any) -> trace.Span | None:
    try:
        meta = _metadata(context)
        topic = request.message_queue.topic.name
        attributes = messaging(
            "receive",
            operation_type="receive",
            destination=topic,
            consumer_group=request.group.name,
            client_id=meta.get(CLIENT_ID, ""),
            rocketmq={"consumption_model": "clustering"},
        )
        return telemetry.open_span(
            TRACER,
            f"receive {topic}",
            meta.get(TRACEPARENT, ""),
            meta.get(TRACESTATE, ""),
            trace.SpanKind.SERVER,
            **attributes,
        )
    except Exception:  # noqa: BLE001 - failed() logs it, once
        telemetry.failed("proxy receive span")
        return None


def _link(span: trace.Span, traceparent: str) -> None:
    if not _w3c(traceparent):
        return
    ctx = trace.get_current_span(telemetry.context_from(traceparent)).get_span_context()
    if ctx.is_valid:
        span.add_link(ctx)


def _w3c(text: str) -> bool:
    """A W3C traceparent's shape (00-<32 hex>-<16 hex>-<2 hex>); anything else is not one."""
    parts = text.split("-")
    return (
        len(text) == 55
        and len(parts) == 4
        and all(len(p) == n for p, n in zip(parts, (2, 32, 16, 2), strict=True))
        and all(c in "0123456789abcdef" for c in text.replace("-", ""))
    )
