"""OpenTelemetry bootstrap from the standard OTEL_* variables, and trace-context helpers.

Only main() calls setup_telemetry. With no exporter configured nothing is installed, the API's
no-op tracer is used, and `enabled()` lets hot paths skip span work altogether.
"""

from __future__ import annotations

import logging
import os
import re
from collections.abc import Iterator, Mapping
from contextlib import contextmanager, nullcontext
from typing import Any

from opentelemetry import context as otel_context
from opentelemetry import trace
from opentelemetry.trace.propagation.tracecontext import TraceContextTextMapPropagator

from ferry.protocol.codes import ResponseCode
from ferry.runtime.metrics import resource_attributes, setup_metrics, shutdown_metrics

log = logging.getLogger("ferry.telemetry")
_PROPAGATOR = TraceContextTextMapPropagator()
_state = {"enabled": False}


def setup_telemetry(
    service_name: str, config: object | None = None, environ: Mapping[str, str] | None = None
) -> bool:
    """Installs a TracerProvider exporting over OTLP when an endpoint or exporter is set, and
    the metrics `config` (a BrokerConfig's metricsExporterType) or OTEL_METRICS_EXPORTER ask
    for. The sampler is the SDK's, from OTEL_TRACES_SAMPLER (parentbased_always_on by default;
    parentbased_traceidratio with OTEL_TRACES_SAMPLER_ARG=0.01 samples 1%). True when traces
    are exported."""
    env = os.environ if environ is None else environ
    if env.get("OTEL_SDK_DISABLED", "").lower() == "true":
        return False
    try:
        setup_metrics(service_name, config, env)
    except Exception:  # telemetry never stops a service
        log.warning("metrics are off: their setup failed", exc_info=True)
    try:
        return _setup_traces(service_name, config, env)
    except Exception:
        log.warning("traces are off: their setup failed", exc_info=True)
        return False


def _setup_traces(service_name: str, config: object | None, env: Mapping[str, str]) -> bool:
    exporter_name = env.get("OTEL_TRACES_EXPORTER", "")
    endpoint = env.get("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT") or env.get(
        "OTEL_EXPORTER_OTLP_ENDPOINT"
    )
    if exporter_name in ("", "none") and not endpoint:
        return False
    if exporter_name == "none":
        return False
    from opentelemetry.sdk.resources import Resource
    from opentelemetry.sdk.trace import TracerProvider
    from opentelemetry.sdk.trace.export import BatchSpanProcessor, ConsoleSpanExporter, SpanExporter

    resource = Resource.create(resource_attributes(service_name, config, env))
    provider = TracerProvider(resource=resource)
    exporter: SpanExporter
    if exporter_name == "console":
        exporter = ConsoleSpanExporter()
    else:
        protocol = env.get("OTEL_EXPORTER_OTLP_TRACES_PROTOCOL") or env.get(
            "OTEL_EXPORTER_OTLP_PROTOCOL", "http/protobuf"
        )
        if protocol == "grpc":
            from opentelemetry.exporter.otlp.proto.grpc.trace_exporter import (
                OTLPSpanExporter as GrpcExporter,
            )

            exporter = GrpcExporter()
        else:
            from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter

            exporter = OTLPSpanExporter()
    provider.add_span_processor(BatchSpanProcessor(exporter, schedule_delay_millis=200))
    trace.set_tracer_provider(provider)
    _state["enabled"] = True
    return True


def enable_for_tests() -> None:
    """Marks tracing on when a test installed its own provider."""
    _state["enabled"] = True


def capture_spans() -> Any:
    """For tests: an InMemorySpanExporter receiving every span this process ends from now on
    (a global SDK TracerProvider is installed if there is none). Shut it down when done."""
    from opentelemetry.sdk.trace import TracerProvider
    from opentelemetry.sdk.trace.export import SimpleSpanProcessor
    from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

    provider = trace.get_tracer_provider()
    if not isinstance(provider, TracerProvider):
        provider = TracerProvider()
        trace.set_tracer_provider(provider)
    exporter = InMemorySpanExporter()
    provider.add_span_processor(SimpleSpanProcessor(exporter))
    return exporter


def enabled() -> bool:
    return _state["enabled"]


def traced(traceparent: str) -> bool:
    """Whether a request with this traceparent gets spans here: tracing is on, and the caller
    sent no context (a new trace, the sampler decides) or a sampled one."""
    return _state["enabled"] and (not traceparent or sampled(traceparent))


def shutdown_telemetry() -> None:
    """Flushes what the exporters still hold; never raises."""
    provider = trace.get_tracer_provider()
    shutdown = getattr(provider, "shutdown", None)
    if shutdown is not None:
        try:
            shutdown()
        except Exception:
            log.debug("tracer provider shutdown failed", exc_info=True)
    shutdown_metrics()


def sampled(traceparent: str) -> bool:
    """Whether a W3C traceparent says its trace is sampled (flags bit 0), without parsing the
    rest: what hot paths check before they make a span of their own."""
    return len(traceparent) == 55 and traceparent[-1] in _SAMPLED_LAST_DIGITS


_SAMPLED_LAST_DIGITS = frozenset("13579bdfBDF")


def failed(what: str) -> None:
    """Logs a telemetry hook's failure once per kind; the message path goes on."""
    if what not in _failures:
        _failures.add(what)
        log.warning("telemetry hook %s failed (logged once; messages go on)", what, exc_info=True)


_failures: set[str] = set()


def context_from(traceparent: str, tracestate: str = "") -> otel_context.Context | None:
    if not traceparent:
        return None
    carrier = {"traceparent": traceparent}
    # a malformed tracestate is dropped here: OpenTelemetry would log a warning for each one,
    # one line per request for whoever sends them
    if tracestate and _TRACESTATE.fullmatch(tracestate):
        carrier["tracestate"] = tracestate
    return _PROPAGATOR.extract(carrier)


# W3C trace-context list members (key=value, keys simple or tenant@system), comma-separated
_TS_KEY = r"(?:[a-z][_0-9a-z\-*/]{0,255}|[a-z0-9][_0-9a-z\-*/]{0,240}@[a-z][_0-9a-z\-*/]{0,13})"
_TS_VALUE = r"[\x20-\x2b\x2d-\x3c\x3e-\x7e]{0,255}[\x21-\x2b\x2d-\x3c\x3e-\x7e]"
_TS_MEMBER = rf"[ \t]*(?:{_TS_KEY}={_TS_VALUE})?[ \t]*"
_TRACESTATE = re.compile(rf"{_TS_MEMBER}(?:,{_TS_MEMBER}){{0,31}}")
_INT64_MIN, _INT64_MAX = -(2**63), 2**63 - 1


def span_attributes(attributes: Mapping[str, Any]) -> dict[str, Any]:
    """Attributes as OTLP can carry them: an int outside int64 (a count a peer sent) becomes
    its decimal text instead of an export error for the whole batch of spans."""
    out = dict(attributes)
    for key, value in out.items():
        if type(value) is int and not _INT64_MIN <= value <= _INT64_MAX:
            out[key] = str(value)
    return out


def current_traceparent() -> tuple[str, str]:
    carrier: dict[str, str] = {}
    _PROPAGATOR.inject(carrier)
    return carrier.get("traceparent", ""), carrier.get("tracestate", "")


@contextmanager
def _span(
    tracer_name: str,
    name: str,
    parent: otel_context.Context | None,
    kind: trace.SpanKind,
    attributes: Mapping[str, Any],
) -> Iterator[trace.Span]:
    try:
        span = trace.get_tracer(tracer_name).start_span(
            name, context=parent, kind=kind, attributes=span_attributes(attributes)
        )
    except Exception:  # noqa: BLE001 - failed() logs it, once
        failed(f"span {name}")
        yield trace.INVALID_SPAN
        return
    with trace.use_span(span, end_on_exit=True):
        try:
            yield span
        except Exception as exc:
            end_error(span, exc)
            raise


def error_type(exc: BaseException) -> str:
    """error.type of a failure: a Ferry error's response code name, else the class name."""
    code = getattr(exc, "code", None)
    name = getattr(code, "name", None)
    return name if isinstance(name, str) else type(exc).__name__


def code_name(code: int) -> str:
    """error.type of an ErrorReply: its response code's name (SYSTEM_BUSY, ...)."""
    try:
        return ResponseCode(code).name
    except ValueError:
        return str(code)


def end_error(span: trace.Span, exc: BaseException) -> None:
    try:
        span.set_attribute("error.type", error_type(exc))
        span.set_status(trace.Status(trace.StatusCode.ERROR, str(exc)))
    except Exception:  # noqa: BLE001 - failed() logs it, once
        failed("error status")


def server_span(
    tracer_name: str,
    name: str,
    traceparent: str,
    tracestate: str = "",
    kind: trace.SpanKind = trace.SpanKind.SERVER,
    **attributes: Any,
) -> Any:
    """A span continuing the caller's trace, or a no-op when tracing is off or the caller's
    trace is not sampled (services follow the caller's decision, as parent-based samplers do,
    without paying for a span nobody keeps)."""
    if not _state["enabled"] or (traceparent and not sampled(traceparent)):
        return nullcontext()
    return _span(tracer_name, name, context_from(traceparent, tracestate), kind, attributes)


def open_span(
    tracer_name: str,
    name: str,
    traceparent: str,
    tracestate: str = "",
    kind: trace.SpanKind = trace.SpanKind.SERVER,
    **attributes: Any,
) -> trace.Span | None:
    """A span that outlives the handler (ended with end_span when the reply comes back from
    another service), continuing the caller's trace; None when tracing is off or the caller's
    trace is not sampled (then pass the caller's traceparent on as it is)."""
    if not _state["enabled"] or (traceparent and not sampled(traceparent)):
        return None
    try:
        tracer = trace.get_tracer(tracer_name)
        return tracer.start_span(
            name,
            context=context_from(traceparent, tracestate),
            kind=kind,
            attributes=span_attributes(attributes),
        )
    except Exception:  # noqa: BLE001 - failed() logs it, once
        failed(f"open_span {name}")
        return None


def child_span(
    tracer_name: str,
    name: str,
    traceparent: str,
    tracestate: str = "",
    kind: trace.SpanKind = trace.SpanKind.INTERNAL,
    **attributes: Any,
) -> trace.Span | None:
    """Like open_span, but only under a sampled parent: hot paths (a store batch, a feed
    dispatch) make no root spans and no spans nobody keeps."""
    if not _state["enabled"] or not sampled(traceparent):
        return None
    return open_span(tracer_name, name, traceparent, tracestate, kind, **attributes)


def traceparent_of(span: trace.Span) -> tuple[str, str]:
    """The W3C context that makes `span` the parent of the next hop."""
    carrier: dict[str, str] = {}
    _PROPAGATOR.inject(carrier, context=trace.set_span_in_context(span))
    return carrier.get("traceparent", ""), carrier.get("tracestate", "")


def end_span(span: trace.Span | None, error_type: str = "") -> None:
    if span is None:
        return
    try:
        if error_type:
            span.set_attribute("error.type", error_type)
            span.set_status(trace.Status(trace.StatusCode.ERROR))
        span.end()
    except Exception:  # noqa: BLE001 - failed() logs it, once
        failed("end_span")


_TRACEPARENT_KEY = b"traceparent\x01"  # how the key starts a property in a stored record
MAX_FEED_LINKS = 32


def sampled_contexts(records: Any, limit: int = MAX_FEED_LINKS) -> list[str]:
    """The sampled traceparents in the properties of raw stored records, found with a byte
    search (no record is decoded): what a follower of the store's feed links to."""
    buf = bytes(records) if isinstance(records, memoryview) else records
    out: list[str] = []
    pos = buf.find(_TRACEPARENT_KEY)
    while pos >= 0 and len(out) < limit:
        start = pos + len(_TRACEPARENT_KEY)
        value = buf[start : start + 55]
        try:
            text = value.decode("ascii")
        except UnicodeDecodeError:
            text = ""
        if sampled(text):
            out.append(text)
        pos = buf.find(_TRACEPARENT_KEY, start)
    return out


def feed_span(tracer_name: str, name: str, records: Any, **attributes: Any) -> trace.Span | None:
    """A CONSUMER span for one batch a follower applies from the store's feed (index,
    scheduler, ha-replicator): the child of the first sampled message's context, linked to
    every sampled message's; None when tracing is off or no message is sampled."""
    if not _state["enabled"]:
        return None
    try:
        contexts = sampled_contexts(records)
        if not contexts:
            return None
        links = []
        for tp in contexts:
            ctx = context_from(tp)
            span_context = trace.get_current_span(ctx).get_span_context() if ctx else None
            if span_context is not None and span_context.is_valid:
                links.append(trace.Link(span_context))
        return trace.get_tracer(tracer_name).start_span(
            name,
            context=context_from(contexts[0]),
            kind=trace.SpanKind.CONSUMER,
            links=links,
            attributes={"ferry.feed.traced_messages": len(contexts), **attributes},
        )
    except Exception:  # noqa: BLE001 - failed() logs it, once
        failed(f"feed_span {name}")
        return None
