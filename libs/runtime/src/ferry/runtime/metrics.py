"""Metrics on prometheus_client: one CollectorRegistry per process, made in main(), and the
snapshot of it that a MetricsRequest answers with.

Metrics are on when broker.conf's metricsExporterType is not DISABLE (PROM: broker-remoting's
scrape target asks each process for its snapshot; OTLP_GRPC, LOG: the registry is exported on
a timer through OpenTelemetry's exporters, metrics_otlp.py) or when OTEL_METRICS_EXPORTER names
otlp or console. Otherwise no registry is made, `enabled()` is False and callers skip their
metrics altogether. Names follow RocketMQ 5's broker metrics where one exists; latencies are in
milliseconds, as RocketMQ's are.

Counters a service already keeps as plain ints are read at collection (`observe`), so the paths
that count pay nothing more; latencies are prometheus_client Histograms.
"""

from __future__ import annotations

import logging
import os
from collections.abc import Callable, Iterable, Mapping
from typing import TYPE_CHECKING, Any

from ferry.protocol.messages import MetricFamily, MetricSample

if TYPE_CHECKING:
    from prometheus_client import CollectorRegistry
    from prometheus_client.metrics_core import Metric

# prometheus_client (75 ms of a service's 400 ms start-up, with the http.server it brings) is
# imported only once metrics are on: most processes never turn them on.

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
COMMITLOG_MAX_OFFSET = "rocketmq_storage_commitlog_max_offset"  # Ferry's
UNFLUSHED_BYTES = "rocketmq_storage_unflushed_bytes"  # Ferry's
REPLICATION_LAG_BYTES = "rocketmq_ha_replication_lag_bytes"  # Ferry's
DELAYED_MESSAGES = "rocketmq_delayed_messages"  # Ferry's: held by the scheduler
SCHEDULED_DELIVERED = "rocketmq_scheduled_delivered_messages_total"  # Ferry's
TRANSACTION_CHECKS = "rocketmq_transaction_checks_total"  # Ferry's: by the check-back
TRANSACTION_DISCARDED = "rocketmq_transaction_check_max_messages_total"  # Ferry's
AUTH_REFUSALS = "rocketmq_auth_refusals_total"  # Ferry's: by reason and request type

# OTLP carries a unit beside the name; the Prometheus names keep theirs out, as RocketMQ's do
UNITS = {
    RPC_LATENCY: "ms",
    FLUSH_LATENCY: "ms",
    CONSUMER_LAG_LATENCY: "ms",
    THROUGHPUT_IN: "By",
    THROUGHPUT_OUT: "By",
    COMMITLOG_MAX_OFFSET: "By",
    UNFLUSHED_BYTES: "By",
    REPLICATION_LAG_BYTES: "By",
}

# ms; RocketMQ's rpc latency buckets, widened for long polls
LATENCY_BUCKETS_MS = (1.0, 3.0, 5.0, 10.0, 20.0, 50.0, 100.0, 200.0, 500.0, 1000.0, 3000.0, 30000.0)
FLUSH_BUCKETS_MS = (0.1, 0.25, 0.5, 1.0, 2.0, 5.0, 10.0, 25.0, 50.0, 100.0, 500.0, 1000.0)

Points = Iterable[tuple[float, Mapping[str, str]]]

# the process's registry (None: metrics off) and its OTLP/LOG export, if any
_state: dict[str, Any] = {"registry": None, "export": None}


def setup_metrics(
    service_name: str, config: object | None = None, environ: Mapping[str, str] | None = None
) -> bool:
    """Makes this process's registry when metrics are wanted; True when one was made."""
    env = os.environ if environ is None else environ
    if env.get("OTEL_SDK_DISABLED", "").lower() == "true":
        return False
    kind = str(getattr(config, "metrics_exporter_type", "DISABLE"))
    otel = env.get("OTEL_METRICS_EXPORTER", "none").lower()
    push = kind in ("OTLP_GRPC", "LOG") or otel in ("otlp", "console")
    if kind != "PROM" and not push:
        return False
    from prometheus_client import CollectorRegistry

    registry = CollectorRegistry(auto_describe=False)
    if push:
        from ferry.runtime.metrics_otlp import start_export

        attributes = resource_attributes(service_name, config, env)
        target = str(getattr(config, "metrics_grpc_exporter_target", ""))
        _state["export"] = start_export(registry, attributes, kind, target, env)
    _state["registry"] = registry
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


def enabled() -> bool:
    return _state["registry"] is not None


def registry() -> CollectorRegistry:
    """This process's registry; only while metrics are on."""
    reg = _state["registry"]
    if reg is None:
        raise RuntimeError("metrics are off: setup_metrics made no registry")
    return reg  # type: ignore[no-any-return]


def shutdown_metrics() -> None:
    export = _state.get("export")
    if export is not None:
        _state["export"] = None
        try:
            export.close()
        except Exception:
            log.debug("metrics export shutdown failed", exc_info=True)


class Observed:
    """A prometheus_client collector of one family whose points are read at collection (a
    scrape or an export), from (value, labels) that `points` gives. A failure is logged once
    and gives no family, never an exception in the scrape."""

    def __init__(self, name: str, kind: str, help: str, points: Callable[[], Points]) -> None:
        self.name = name
        # prometheus_client names a counter family without _total and adds it when writing
        self._family = name.removesuffix("_total") if kind == "counter" else name
        self._kind = kind
        self._help = help
        self._points = points
        self._failed = False

    def describe(self) -> list[Metric]:
        """The family without samples: lets the registry refuse a second one of this name."""
        from prometheus_client.metrics_core import Metric

        return [Metric(self._family, self._help, self._kind)]

    def collect(self) -> list[Metric]:
        from prometheus_client.metrics_core import Metric

        try:
            points = list(self._points())
        except Exception:
            if not self._failed:
                self._failed = True
                log.warning("metric %s could not be observed", self.name, exc_info=True)
            return []
        family = Metric(self._family, self._help, self._kind)
        for value, labels in points:
            family.add_sample(self.name, dict(labels), float(value))
        return [family]


def observe(
    registry: CollectorRegistry, name: str, kind: str, help: str, points: Callable[[], Points]
) -> Observed:
    """Registers a family read at collection (kind: counter or gauge)."""
    collector = Observed(name, kind, help, points)
    registry.register(collector)
    return collector


# ---- snapshots: a registry's families on the wire and back -----------------------------------


def snapshot(registry: CollectorRegistry | None = None) -> list[MetricFamily]:
    """This process's metrics now, as wire families (empty with metrics off). Families with no
    sample yet are left out, and so are prometheus_client's `_created` samples: neither was
    ever part of Ferry's scrape."""
    reg = _state["registry"] if registry is None else registry
    if reg is None:
        return []
    try:
        collected = list(reg.collect())
    except Exception:
        log.warning("metrics collection failed", exc_info=True)
        return []
    families = [family_of(metric) for metric in collected]
    return [fam for fam in families if fam.samples]


def family_of(metric: Metric) -> MetricFamily:
    """A prometheus_client family as sent on the wire: a counter under its full name."""
    name = f"{metric.name}_total" if metric.type == "counter" else metric.name
    created = f"{metric.name}_created"
    samples = [
        MetricSample(s.name, dict(s.labels), float(s.value))
        for s in metric.samples
        if s.name != created
    ]
    return MetricFamily(name, metric.type, metric.documentation, samples)


_KINDS = ("counter", "gauge", "histogram", "summary")


def metric_of(fam: MetricFamily) -> Metric | None:
    """A wire family as a prometheus_client family; None when prometheus_client refuses its name
    (a peer's bad answer costs its family, never the scrape)."""
    from prometheus_client.metrics_core import Metric

    kind = fam.kind if fam.kind in _KINDS else "unknown"
    name = fam.name.removesuffix("_total") if kind == "counter" else fam.name
    try:
        metric = Metric(name, fam.help, kind)
    except ValueError:
        log.warning("metric family %r left out of the scrape: not a valid name", fam.name)
        return None
    for s in fam.samples:
        metric.add_sample(s.name, dict(s.labels), float(s.value))
    return metric
