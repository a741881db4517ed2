"""One line that turns on an application's traces: ferry.client.enable_tracing().

The SDK itself only uses the OpenTelemetry API and the global TracerProvider (or the one a
client is given), as OpenTelemetry's instrumentations do. Something must install a provider
that exports spans: the application, `opentelemetry-instrument` (from the OTEL_* variables),
or this module's enable_tracing, which needs the `ferry[tracing]` extra (opentelemetry-sdk and
the OTLP/HTTP exporter) and is imported only when called.
"""

from __future__ import annotations

import os
import sys
from collections.abc import Mapping
from pathlib import Path
from typing import TYPE_CHECKING
from urllib.parse import urlsplit

from opentelemetry import trace

if TYPE_CHECKING:
    from opentelemetry.sdk.trace import TracerProvider
    from opentelemetry.sdk.trace.export import SpanExporter

MISSING = (
    "ferry.client.enable_tracing needs the OpenTelemetry SDK and its OTLP exporter: "
    "pip install 'ferry[tracing]' (opentelemetry-sdk, opentelemetry-exporter-otlp-proto-http)"
)
_ASKING = (
    "OTEL_TRACES_EXPORTER",
    "OTEL_EXPORTER_OTLP_ENDPOINT",
    "OTEL_EXPORTER_OTLP_TRACES_ENDPOINT",
)


def enable_tracing(
    endpoint: str | None = None, *, service_name: str | None = None
) -> TracerProvider:
    """Exports the spans of this process (every Ferry client's, and any other instrumented
    library's) over OTLP/HTTP, and returns the global TracerProvider.

    endpoint: an OTLP/HTTP receiver, e.g. "http://127.0.0.1:8080" (the console of `ferry dev
    up`; "/v1/traces" is added to a bare address) or a collector; None: where the OTEL_*
    variables say (OTEL_EXPORTER_OTLP_TRACES_ENDPOINT, OTEL_EXPORTER_OTLP_ENDPOINT), else
    OpenTelemetry's default, http://localhost:4318. service_name: OTEL_SERVICE_NAME, else the
    script's name. When a provider is installed already (by the application or
    `opentelemetry-instrument`), it is kept, and an explicit endpoint is added to its exports.
    Spans still held are exported at exit.
    """
    try:
        from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter
    except ImportError as exc:  # the exporter needs the SDK: one check for both
        raise ImportError(MISSING) from exc
    url = None if endpoint is None else traces_url(endpoint)
    return _install(OTLPSpanExporter(endpoint=url), service_name, add=url is not None)


def enable_from_environment(service_name: str, environ: Mapping[str, str] | None = None) -> bool:
    """For processes no application sets up (the Python workers of Spark executors): traces
    are exported when the OTEL_* variables ask for it (an OTLP endpoint, or
    OTEL_TRACES_EXPORTER=otlp|console) and the OpenTelemetry SDK is installed. True when a
    provider is installed now or was already."""
    env = os.environ if environ is None else environ
    if _installed():
        return True
    wanted = env.get("OTEL_TRACES_EXPORTER", "otlp")
    if env.get("OTEL_SDK_DISABLED", "").lower() == "true" or wanted == "none":
        return False
    if not any(env.get(key) for key in _ASKING):
        return False
    try:
        exporter = _exporter_from(env, wanted)
    except ImportError:
        return False
    _install(exporter, service_name, add=False)
    return True


def traces_url(endpoint: str) -> str:
    """The OTLP/HTTP traces URL of a receiver's address ("host:port" or a URL)."""
    if "://" not in endpoint:
        endpoint = f"http://{endpoint}"
    if urlsplit(endpoint).path in ("", "/"):
        return endpoint.rstrip("/") + "/v1/traces"
    return endpoint


def _installed() -> bool:
    try:
        from opentelemetry.sdk.trace import TracerProvider
    except ImportError:
        return False
    return isinstance(trace.get_tracer_provider(), TracerProvider)


def _exporter_from(env: Mapping[str, str], wanted: str) -> SpanExporter:
    if wanted == "console":
        from opentelemetry.sdk.trace.export import ConsoleSpanExporter

        return ConsoleSpanExporter()
    protocol = env.get("OTEL_EXPORTER_OTLP_TRACES_PROTOCOL") or env.get(
        "OTEL_EXPORTER_OTLP_PROTOCOL", "http/protobuf"
    )
    if protocol == "grpc":
        from opentelemetry.exporter.otlp.proto.grpc.trace_exporter import (
            OTLPSpanExporter as GrpcSpanExporter,
        )

        return GrpcSpanExporter()
    from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter

    return OTLPSpanExporter()


def _install(exporter: SpanExporter, service_name: str | None, *, add: bool) -> TracerProvider:
    """The global SDK provider with `exporter` behind a batch processor: a new one, or the
    one installed already (then the exporter is added only when `add`)."""
    from opentelemetry.sdk.resources import Resource
    from opentelemetry.sdk.trace import TracerProvider
    from opentelemetry.sdk.trace.export import BatchSpanProcessor

    current = trace.get_tracer_provider()
    if isinstance(current, TracerProvider):
        if add:
            current.add_span_processor(BatchSpanProcessor(exporter))
        return current
    attributes = {}
    if service_name or not os.environ.get("OTEL_SERVICE_NAME"):
        attributes["service.name"] = service_name or _script_name()
    # the resource also takes OTEL_RESOURCE_ATTRIBUTES and OTEL_SERVICE_NAME
    provider = TracerProvider(resource=Resource.create(attributes))
    # a short delay: short-lived scripts (the README's tour) export before they exit anyway
    provider.add_span_processor(BatchSpanProcessor(exporter, schedule_delay_millis=500))
    trace.set_tracer_provider(provider)
    return provider


def _script_name() -> str:
    name = Path(sys.argv[0]).stem if sys.argv and sys.argv[0] else ""
    return name if name and name not in ("-c", "-m") else "ferry-client"
