"""metricsExporterType=OTLP_GRPC or LOG (or OTEL_METRICS_EXPORTER=otlp/console): this process's
prometheus_client registry exported on a timer through OpenTelemetry's metric exporters.

prometheus_client only serves scrapes, and the OpenTelemetry SDK takes no outside metric
source, so the registry's families are turned into the SDK's cumulative MetricsData here and
handed to the exporter. Prometheus histograms keep no min or max: those are left unset.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Iterable, Mapping
from typing import Any

from opentelemetry.sdk.metrics.export import (
    AggregationTemporality,
    Gauge,
    Histogram,
    HistogramDataPoint,
    MetricExporter,
    MetricsData,
    NumberDataPoint,
    ResourceMetrics,
    ScopeMetrics,
    Sum,
)
from opentelemetry.sdk.metrics.export import Metric as OtelMetric
from opentelemetry.sdk.resources import Resource
from opentelemetry.sdk.util.instrumentation import InstrumentationScope
from prometheus_client import CollectorRegistry
from prometheus_client.metrics_core import Metric

from ferry.runtime.metrics import UNITS, family_of

log = logging.getLogger("ferry.metrics")

DEFAULT_INTERVAL_MS = 60_000  # the SDK's OTEL_METRIC_EXPORT_INTERVAL default
SCOPE = InstrumentationScope("ferry")
CUMULATIVE = AggregationTemporality.CUMULATIVE
UNSET: Any = None  # a histogram's min and max: OTLP leaves a None field out


def start_export(
    registry: CollectorRegistry,
    attributes: Mapping[str, str],
    kind: str,
    target: str,
    env: Mapping[str, str],
) -> PeriodicExport:
    """The exporter asked for (OTLP over gRPC or HTTP, or the console), running."""
    exporter: MetricExporter
    if kind == "LOG" or (kind != "OTLP_GRPC" and env.get("OTEL_METRICS_EXPORTER") == "console"):
        from opentelemetry.sdk.metrics.export import ConsoleMetricExporter

        exporter = ConsoleMetricExporter()
    else:
        exporter = _otlp_exporter(env, kind, target)
    interval_ms = float(env.get("OTEL_METRIC_EXPORT_INTERVAL") or DEFAULT_INTERVAL_MS)
    export = PeriodicExport(registry, exporter, Resource.create(dict(attributes)), interval_ms)
    export.start()
    return export


def _otlp_exporter(env: Mapping[str, str], kind: str, target: str) -> MetricExporter:
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


class PeriodicExport:
    """Every interval, the registry's families to the exporter; a last export at close."""

    def __init__(
        self,
        registry: CollectorRegistry,
        exporter: MetricExporter,
        resource: Resource,
        interval_ms: float = DEFAULT_INTERVAL_MS,
    ) -> None:
        self._registry = registry
        self._exporter = exporter
        self._resource = resource
        self._interval_s = max(interval_ms, 10.0) / 1000
        self._start_ns = time.time_ns()
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="ferry-metrics-export", daemon=True)
        self._warned = False

    def start(self) -> None:
        self._thread.start()

    def _run(self) -> None:
        while not self._stop.wait(self._interval_s):
            self.export_once()

    def export_once(self) -> None:
        try:
            data = metrics_data(self._registry.collect(), self._resource, self._start_ns)
            self._exporter.export(data)
        except Exception:
            if not self._warned:
                self._warned = True
                log.warning("metrics export failed", exc_info=True)

    def close(self) -> None:
        self._stop.set()
        if self._thread.is_alive():
            self._thread.join(5)
        self.export_once()
        self._exporter.shutdown()


def metrics_data(collected: Iterable[Metric], resource: Resource, start_ns: int) -> MetricsData:
    now_ns = time.time_ns()
    converted = [_otel_metric(m, start_ns, now_ns) for m in collected]
    scope = ScopeMetrics(SCOPE, [m for m in converted if m is not None], "")
    return MetricsData([ResourceMetrics(resource, [scope], "")])


def _otel_metric(metric: Metric, start_ns: int, now_ns: int) -> OtelMetric | None:
    fam = family_of(metric)
    if not fam.samples:
        return None
    data: Any
    if fam.kind == "histogram":
        data = Histogram(_histogram_points(fam.name, fam.samples, start_ns, now_ns), CUMULATIVE)
    elif fam.kind in ("counter", "gauge"):
        points = [
            NumberDataPoint(dict(s.labels), start_ns, now_ns, s.value)
            for s in fam.samples
            if s.name == fam.name
        ]
        data = Sum(points, CUMULATIVE, True) if fam.kind == "counter" else Gauge(points)
    else:
        return None
    return OtelMetric(fam.name, fam.help, UNITS.get(fam.name, ""), data)


def _histogram_points(
    name: str, samples: Iterable[Any], start_ns: int, now_ns: int
) -> list[HistogramDataPoint]:
    """Prometheus' cumulative _bucket/_sum/_count samples, per label set, as OTLP points
    (per-bucket counts, the +Inf bucket last)."""
    series: dict[tuple[tuple[str, str], ...], dict[str, Any]] = {}
    for s in samples:
        labels = {k: v for k, v in s.labels.items() if k != "le"}
        one = series.setdefault(tuple(sorted(labels.items())), {"buckets": {}, "sum": 0.0})
        if s.name == f"{name}_bucket":
            one["buckets"][float(s.labels["le"])] = s.value
        elif s.name == f"{name}_sum":
            one["sum"] = s.value
    points: list[HistogramDataPoint] = []
    for key, one in series.items():
        bounds = sorted(one["buckets"])
        cumulative = [int(one["buckets"][b]) for b in bounds]
        counts = [c - prev for c, prev in zip(cumulative, [0, *cumulative], strict=False)]
        finite = [b for b in bounds if b != float("inf")]
        total = cumulative[-1] if cumulative else 0
        point = HistogramDataPoint(
            dict(key), start_ns, now_ns, total, one["sum"], counts, finite, min=UNSET, max=UNSET
        )
        points.append(point)
    return points
