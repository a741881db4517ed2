"""OpenTelemetry bootstrap from the standard OTEL_* variables, and trace-context helpers.

Only main() calls setup_telemetry. With no exporter configured nothing is installed, the API's
no-op tracer is used, and `enabled()` lets hot paths skip span work altogether.
"""

from __future__ import annotations

import logging
import os
from collections.abc import Iterator, Mapping
from contextlib import contextmanager, nullcontext
from typing import Any

from opentelemetry import context as otel_context
from opentelemetry import trace
from opentelemetry.trace.propagation.tracecontext import TraceContextTextMapPropagator

log = logging.getLogger("ferry.telemetry")
_PROPAGATOR = TraceContextTextMapPropagator()
_state = {"enabled": False}


def setup_telemetry(service_name: str, environ: Mapping[str, str] | None = None) -> bool:
    """Installs a TracerProvider exporting over OTLP when an endpoint or exporter is set."""
    env = os.environ if environ is None else environ
    if env.get("OTEL_SDK_DISABLED", "").lower() == "true":
        return False
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

    resource = Resource.create({"service.name": env.get("OTEL_SERVICE_NAME") or service_name})
    provider = TracerProvider(resource=resource)
    exporter: SpanExporter
    if exporter_name == "console":
        exporter = ConsoleSpanExporter()
    else:
        protocol = env.get("OTEL_EXPORTER_OTLP_TRACES_PROTOCOL") or env.get(
            "OTEL_EXPORTER_OTLP_PROTOCOL", "http/protobuf"
        )
        if protocol == "grpc":
            try:
                from opentelemetry.exporter.otlp.proto.grpc.trace_exporter import (  # type: ignore[import-not-found]
                    OTLPSpanExporter as GrpcExporter,
                )
            except ImportError:
                log.warning("OTLP/gRPC exporter is not installed; traces are not exported")
                return False
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


def enabled() -> bool:
    return _state["enabled"]


def shutdown_telemetry() -> None:
    provider = trace.get_tracer_provider()
    shutdown = getattr(provider, "shutdown", None)
    if shutdown is not None:
        shutdown()


def context_from(traceparent: str, tracestate: str = "") -> otel_context.Context | None:
    if not traceparent:
        return None
    carrier = {"traceparent": traceparent}
    if tracestate:
        carrier["tracestate"] = tracestate
    return _PROPAGATOR.extract(carrier)


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
    tracer = trace.get_tracer(tracer_name)
    with tracer.start_as_current_span(
        name, context=parent, kind=kind, attributes=dict(attributes)
    ) as span:
        yield span


def server_span(
    tracer_name: str,
    name: str,
    traceparent: str,
    tracestate: str = "",
    kind: trace.SpanKind = trace.SpanKind.SERVER,
    **attributes: Any,
) -> Any:
    """A span continuing the caller's trace, or a no-op when tracing is off."""
    if not _state["enabled"]:
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
    another service), continuing the caller's trace; None when tracing is off."""
    if not _state["enabled"]:
        return None
    tracer = trace.get_tracer(tracer_name)
    return tracer.start_span(
        name, context=context_from(traceparent, tracestate), kind=kind, attributes=dict(attributes)
    )


def traceparent_of(span: trace.Span) -> tuple[str, str]:
    """The W3C context that makes `span` the parent of the next hop."""
    carrier: dict[str, str] = {}
    _PROPAGATOR.inject(carrier, context=trace.set_span_in_context(span))
    return carrier.get("traceparent", ""), carrier.get("tracestate", "")


def end_span(span: trace.Span | None, error_type: str = "") -> None:
    if span is None:
        return
    if error_type:
        span.set_attribute("error.type", error_type)
        span.set_status(trace.Status(trace.StatusCode.ERROR))
    span.end()
