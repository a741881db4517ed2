"""OpenTelemetry metrics: one MeterProvider per process, set up in main(), and the snapshot a
Prometheus scrape renders.

Metrics are on when broker.conf's metricsExporterType is not DISABLE (PROM: an on-demand
reader answered through MetricsRequest, OTLP_GRPC, LOG) or when OTEL_METRICS_EXPORTER names
otlp or console. Otherwise nothing is installed, `enabled()` is False and callers skip their
instruments altogether. Names follow RocketMQ 5's broker metrics where one exists; latencies
are in milliseconds, as RocketMQ's are.
"""

from __future__ import annotations

import logging
import os
from collections.abc import Callable, Iterable, Mapping, Sequence
from typing import Any

from opentelemetry import metrics as otel_metrics
from opentelemetry.metrics import CallbackOptions, Meter, Observation

from ferry.protocol.messages import MetricFamily, MetricSample

log = logging.getLogger("ferry.metrics")

# RocketMQ 5 broker metric names (BrokerMetricsConstant), and Ferry's own beside them.
MESSAGES_IN = "rocketmq_messages_in_total"
MESSAGES_OUT = "rocketmq_messages_out_total"
THROUGHPUT_IN = "rocketmq_throughput_in_total"
THROUGHPUT_OUT = "rocketmq_throughput_out_total"
RPC_LATENCY = "rocketmq_rpc_latency"
CONSUMER_LAG_MESSAGES = "rocketmq_consumer_lag_messages"
CONSUMER_LAG_LATENCY = "rocketmq_consumer_lag_latency"
SEND_TO_DLQ = "rocketmq_send_to_dlq_messages_total"
COMMIT_MESSAGES = "rocketmq_commit_messages_total"
ROLLBACK_MESSAGES = "rocketmq_rollback_messages_total"
HALF_MESSAGES = "rocketmq_half_messages"
FLUSH_LATENCY = "rocketmq_storage_flush_latency"  # Ferry's: RocketMQ has no flush histogram
REPLICATION_LAG_BYTES = "rocketmq_ha_replication_lag_bytes"  # Ferry's
DELAYED_MESSAGES = "rocketmq_delayed_messages"  # Ferry's: held by the scheduler

# ms; RocketMQ's rpc latency buckets, widened for long polls
LATENCY_BUCKETS_MS = (1.0, 3.0, 5.0, 10.0, 20.0, 50.0, 100.0, 200.0, 500.0, 1000.0, 3000.0, 30000.0)
FLUSH_BUCKETS_MS = (0.1, 0.25, 0.5, 1.0, 2.0, 5.0, 10.0, 25.0, 50.0, 100.0, 500.0, 1000.0)

_state: dict[str, Any] = {"enabled": False, "reader": None, "provider": None}
_failed_callbacks: set[str] = set()


def setup_metrics(
    service_name: str, config: object | None = None, environ: Mapping[str, str] | None = None
) -> bool:
    """Installs a MeterProvider when metrics are wanted; True when one was installed."""
    env = os.environ if environ is None else environ
    if env.get("OTEL_SDK_DISABLED", "").lower() == "true":
        return False
    kind = str(getattr(config, "metrics_exporter_type", "DISABLE"))
    otel = env.get("OTEL_METRICS_EXPORTER", "none").lower()
    from opentelemetry.sdk.metrics import MeterProvider
    from opentelemetry.sdk.metrics.export import (
        ConsoleMetricExporter,
        InMemoryMetricReader,
        MetricExporter,
        MetricReader,
        PeriodicExportingMetricReader,
    )
    from opentelemetry.sdk.metrics.view import View
    from opentelemetry.sdk.resources import Resource

    readers: list[MetricReader] = []
    snapshot_reader: InMemoryMetricReader | None = None
    if kind == "PROM":
        snapshot_reader = InMemoryMetricReader()
        readers.append(snapshot_reader)
    exporter: MetricExporter | None = None
    if kind == "OTLP_GRPC" or otel == "otlp":
        exporter = _otlp_exporter(env, kind, getattr(config, "metrics_grpc_exporter_target", ""))
    elif kind == "LOG" or otel == "console":
        exporter = ConsoleMetricExporter()
    if exporter is not None:
        readers.append(PeriodicExportingMetricReader(exporter))
    if not readers:
        return False
    views = [
        View(instrument_name=RPC_LATENCY, aggregation=_buckets(LATENCY_BUCKETS_MS)),
        View(instrument_name=FLUSH_LATENCY, aggregation=_buckets(FLUSH_BUCKETS_MS)),
    ]
    resource = Resource.create(resource_attributes(service_name, config, env))
    provider = MeterProvider(resource=resource, metric_readers=readers, views=views)
    otel_metrics.set_meter_provider(provider)
    _state.update(enabled=True, reader=snapshot_reader, provider=provider)
    return True


def resource_attributes(
    service_name: str, config: object | None, env: Mapping[str, str]
) -> dict[str, str]:
    """service.name, and for a broker's processes service.instance.id = brokerName-brokerId
    (a master's and its slave's processes have the same names)."""
    attributes = {"service.name": env.get("OTEL_SERVICE_NAME") or service_name}
    broker = getattr(config, "broker_name", None)
    if broker is not None:
        attributes["service.instance.id"] = f"{broker}-{getattr(config, 'broker_id', 0)}"
    return attributes


def _buckets(bounds: Sequence[float]) -> Any:
    from opentelemetry.sdk.metrics.view import ExplicitBucketHistogramAggregation

    return ExplicitBucketHistogramAggregation(boundaries=bounds)


def _otlp_exporter(env: Mapping[str, str], kind: str, target: str) -> Any:
    protocol = env.get("OTEL_EXPORTER_OTLP_METRICS_PROTOCOL") or env.get(
        "OTEL_EXPORTER_OTLP_PROTOCOL", "http/protobuf"
    )
    if kind == "OTLP_GRPC" or protocol == "grpc":
        from opentelemetry.exporter.otlp.proto.grpc.metric_exporter import (
            OTLPMetricExporter as GrpcMetricExporter,
        )

        if target:
            return GrpcMetricExporter(endpoint=target, insecure=not target.startswith("https"))
        return GrpcMetricExporter()
    from opentelemetry.exporter.otlp.proto.http.metric_exporter import OTLPMetricExporter

    return OTLPMetricExporter()


def enable_for_tests(reader: Any) -> None:
    """Marks metrics on with a test's own provider and on-demand reader."""
    _state.update(enabled=True, reader=reader)


def enabled() -> bool:
    return bool(_state["enabled"])


def meter(name: str) -> Meter:
    return otel_metrics.get_meter(name)


def shutdown_metrics() -> None:
    provider = _state.get("provider")
    if provider is not None:
        try:
            provider.shutdown()
        except Exception:
            log.debug("meter provider shutdown failed", exc_info=True)


def observe(
    name: str, fn: Callable[[], Iterable[tuple[float, Mapping[str, str]]]]
) -> Callable[[CallbackOptions], Iterable[Observation]]:
    """An observable instrument's callback around fn, yielding (value, labels); a failure is
    logged once and gives no points, never an exception in the exporter."""

    def callback(_options: CallbackOptions) -> Iterable[Observation]:
        try:
            return [Observation(value, dict(labels)) for value, labels in fn()]
        except Exception:
            if name not in _failed_callbacks:
                _failed_callbacks.add(name)
                log.warning("metric %s could not be observed", name, exc_info=True)
            return []

    return callback


# ---- snapshots and the Prometheus text format ------------------------------------------------


def snapshot() -> list[MetricFamily]:
    """This process's metrics now, as Prometheus families (empty without an on-demand reader)."""
    reader = _state.get("reader")
    if reader is None:
        return []
    try:
        data = reader.get_metrics_data()
    except Exception:
        log.warning("metrics collection failed", exc_info=True)
        return []
    if data is None:
        return []
    return families_of(data)


def families_of(data: Any) -> list[MetricFamily]:
    from opentelemetry.sdk.metrics.export import Gauge, Histogram, Sum

    out: list[MetricFamily] = []
    for rm in data.resource_metrics:
        for sm in rm.scope_metrics:
            for metric in sm.metrics:
                name, body = metric.name, metric.data
                samples: list[MetricSample] = []
                if isinstance(body, Histogram):
                    kind = "histogram"
                    for p in body.data_points:
                        labels = _labels(p.attributes)
                        running = 0
                        for bound, count in zip(p.explicit_bounds, p.bucket_counts, strict=False):
                            running += count
                            le = {**labels, "le": _number(bound)}
                            samples.append(MetricSample(f"{name}_bucket", le, float(running)))
                        le = {**labels, "le": "+Inf"}
                        samples.append(MetricSample(f"{name}_bucket", le, float(p.count)))
                        samples.append(MetricSample(f"{name}_sum", labels, float(p.sum)))
                        samples.append(MetricSample(f"{name}_count", labels, float(p.count)))
                elif isinstance(body, Sum | Gauge):
                    monotonic = isinstance(body, Sum) and body.is_monotonic
                    kind = "counter" if monotonic else "gauge"
                    for q in body.data_points:
                        samples.append(MetricSample(name, _labels(q.attributes), float(q.value)))
                else:
                    continue
                out.append(MetricFamily(name, kind, metric.description or name, samples))
    return out


def _labels(attributes: Any) -> dict[str, str]:
    return {str(k): str(v) for k, v in (attributes or {}).items()}


def _number(value: float) -> str:
    return repr(float(value))


def merge(
    parts: Iterable[tuple[Mapping[str, str], Sequence[MetricFamily]]],
) -> list[MetricFamily]:
    """Families from several processes as one exposition: samples of one name together, each
    with its process's extra labels."""
    by_name: dict[str, MetricFamily] = {}
    for extra, families in parts:
        for fam in families:
            samples = [MetricSample(s.name, {**extra, **s.labels}, s.value) for s in fam.samples]
            known = by_name.get(fam.name)
            if known is None:
                by_name[fam.name] = MetricFamily(fam.name, fam.kind, fam.help, samples)
            else:
                known.samples.extend(samples)
    return [by_name[name] for name in sorted(by_name)]


def render(families: Sequence[MetricFamily]) -> str:
    """Prometheus text exposition format 0.0.4."""
    lines: list[str] = []
    for fam in families:
        lines.append(f"# HELP {fam.name} {_escape_help(fam.help)}")
        lines.append(f"# TYPE {fam.name} {fam.kind}")
        for s in fam.samples:
            if s.labels:
                inner = ",".join(f'{k}="{_escape_label(v)}"' for k, v in sorted(s.labels.items()))
                lines.append(f"{s.name}{{{inner}}} {_value(s.value)}")
            else:
                lines.append(f"{s.name} {_value(s.value)}")
    return "\n".join(lines) + "\n"


def _escape_help(text: str) -> str:
    return text.replace("\\", "\\\\").replace("\n", "\\n")


def _escape_label(text: str) -> str:
    return text.replace("\\", "\\\\").replace("\n", "\\n").replace('"', '\\"')


def _value(value: float) -> str:
    return str(int(value)) if value.is_integer() else repr(value)
