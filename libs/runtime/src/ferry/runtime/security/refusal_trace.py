"""A refused request in its caller's trace: an error span of the refusing service."""

from __future__ import annotations

from opentelemetry.trace import SpanKind

from ferry.protocol.errors import FerryError
from ferry.protocol.framing import RequestEnvelope
from ferry.protocol.span_attributes import messaging
from ferry.runtime import telemetry


def trace_refusal(service: str, env: RequestEnvelope, refused: FerryError) -> None:
    """When the caller's trace is sampled, a span of `service` naming the refusal."""
    if not env.traceparent or not telemetry.traced(env.traceparent):
        return  # a caller's sampled trace only: refusals must not mint traces
    with telemetry.server_span(
        "ferry.security",
        f"{type(env.body).__name__} refused",
        env.traceparent,
        env.tracestate,
        SpanKind.SERVER,
        **{
            **messaging(),
            "ferry.service": service,
            "ferry.auth.access_key": env.auth.access_key if env.auth else "",
        },
    ) as span:
        telemetry.end_error(span, refused)
