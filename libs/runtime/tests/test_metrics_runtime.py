"""ferry.runtime.metrics and telemetry helpers without any service: the Prometheus text of a
prometheus_client registry through the group's scrape collector, merging processes, the
export to OpenTelemetry's exporters, sampled traceparents, and setup from the environment (in a
child process, since a process has one registry and one tracer provider)."""

from __future__ import annotations

import io
import json
import os
import subprocess
import sys
import textwrap
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import ClassVar

import pytest
from opentelemetry.proto.collector.metrics.v1.metrics_service_pb2 import (
    ExportMetricsServiceRequest,
)
from opentelemetry.sdk.metrics.export import ConsoleMetricExporter
from opentelemetry.sdk.resources import Resource
from prometheus_client import CollectorRegistry, Histogram, generate_latest
from prometheus_client.metrics_core import Metric

from ferry.protocol.messages import MetricFamily, MetricSample
from ferry.protocol.record import encode_properties
from ferry.runtime import metrics, telemetry
from ferry.runtime.metrics_otlp import PeriodicExport
from ferry.runtime.prometheus import GroupScrape, merge

SAMPLED = "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01"
RANDOM_BIT_SAMPLED = "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-03"
NOT_SAMPLED = "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-00"


def _scrape_text(registry: CollectorRegistry, labels: dict[str, str]) -> str:
    """What the group's target serves for one process with no peers."""
    scrape = GroupScrape(("p", registry), [], labels)
    served = CollectorRegistry()
    served.register(scrape)
    try:
        return generate_latest(served).decode()
    finally:
        scrape.close()


def test_counters_gauges_and_histograms_render_as_prometheus_text() -> None:
    registry = CollectorRegistry()
    counts = {"A": 3}
    metrics.observe(
        registry,
        metrics.MESSAGES_IN,
        "counter",
        "messages stored, by topic",
        lambda: [(float(n), {"topic": t}) for t, n in counts.items()],
    )
    hist = Histogram(
        metrics.RPC_LATENCY,
        "handling time",
        ("request_code",),
        registry=registry,
        buckets=metrics.LATENCY_BUCKETS_MS,
    )
    for ms in (0.5, 2.0, 2.0, 700.0):
        hist.labels("send_message").observe(ms)
    metrics.observe(
        registry,
        metrics.CONSUMER_LAG_MESSAGES,
        "gauge",
        "lag",
        lambda: [(7.0, {"consumer_group": 'g"1'})],
    )
    Histogram("never_observed", "no samples yet", ("x",), registry=registry)
    families = {f.name: f for f in metrics.snapshot(registry)}
    assert families[metrics.MESSAGES_IN].kind == "counter"
    assert families[metrics.CONSUMER_LAG_MESSAGES].kind == "gauge"
    assert "never_observed" not in families  # no sample, no family (as before)
    # prometheus_client's _created series were never part of Ferry's scrape
    assert not [s for f in families.values() for s in f.samples if s.name.endswith("_created")]
    counts["A"] = 5  # read at collection: the counting path only bumps a plain int
    text = _scrape_text(registry, {"cluster": "c"})
    assert "# HELP rocketmq_messages_in_total messages stored, by topic" in text
    assert "# TYPE rocketmq_messages_in_total counter" in text
    assert 'rocketmq_messages_in_total{cluster="c",process="p",topic="A"} 5.0' in text
    assert (
        'rocketmq_consumer_lag_messages{cluster="c",consumer_group="g\\"1",process="p"} 7.0' in text
    )
    assert "# TYPE rocketmq_rpc_latency histogram" in text
    # cumulative buckets, +Inf equal to the count
    assert (
        'rocketmq_rpc_latency_count{cluster="c",process="p",request_code="send_message"} 4.0'
        in text
    )
    labels = 'cluster="c",le="1.0",process="p",request_code="send_message"'
    assert f"rocketmq_rpc_latency_bucket{{{labels}}} 1.0" in text
    assert 'le="+Inf",process="p",request_code="send_message"} 4.0' in text
    assert (
        'rocketmq_rpc_latency_sum{cluster="c",process="p",request_code="send_message"} 704.5'
        in text
    )
    assert "_created" not in text and "never_observed" not in text
    # every process answered: the errors family has no sample
    assert "ferry_scrape_errors{" not in text


def test_a_failing_observation_gives_no_family_and_no_exception() -> None:
    def broken() -> list[tuple[float, dict[str, str]]]:
        raise RuntimeError("boom")

    registry = CollectorRegistry()
    metrics.observe(registry, "broken", "gauge", "never read", broken)
    metrics.observe(registry, "fine", "gauge", "read", lambda: [(1.0, {})])
    assert [f.name for f in metrics.snapshot(registry)] == ["fine"]
    assert [f.name for f in metrics.snapshot(registry)] == ["fine"]


def test_a_second_family_of_one_name_is_refused() -> None:
    registry = CollectorRegistry()
    metrics.observe(registry, "m_total", "counter", "h", list)
    with pytest.raises(ValueError):
        metrics.observe(registry, "m_total", "counter", "h", list)


def test_merge_keeps_one_family_per_name_with_each_process_labels() -> None:
    fam = MetricFamily("m_total", "counter", "help", [MetricSample("m_total", {"topic": "t"}, 1.0)])
    merged = merge([({"process": "a"}, [fam]), ({"process": "b"}, [fam])])
    assert len(merged) == 1
    assert [s.labels["process"] for s in merged[0].samples] == ["a", "b"]
    served = CollectorRegistry()
    for m in merged:
        metric = metrics.metric_of(m)
        assert metric is not None
        served.register(_Fixed(metric))
    text = generate_latest(served).decode()
    assert text.count("# TYPE m_total counter") == 1
    assert 'm_total{process="b",topic="t"} 1.0' in text


def test_a_peer_family_with_a_bad_name_or_kind_costs_only_itself() -> None:
    assert metrics.metric_of(MetricFamily("", "gauge", "h", [MetricSample("", {}, 1.0)])) is None
    odd = metrics.metric_of(MetricFamily("odd", "weird", "h", [MetricSample("odd", {}, 2.0)]))
    assert odd is not None and odd.type == "unknown"


class _Fixed:
    def __init__(self, metric: Metric) -> None:
        self.metric = metric

    def collect(self) -> list[Metric]:
        return [self.metric]


def test_the_registry_exports_to_an_opentelemetry_exporter() -> None:
    registry = CollectorRegistry()
    metrics.observe(
        registry, metrics.THROUGHPUT_IN, "counter", "bytes", lambda: [(300.0, {"topic": "A"})]
    )
    hist = Histogram(
        metrics.FLUSH_LATENCY, "flush", ("flush",), registry=registry, buckets=(1.0, 10.0)
    )
    for ms in (0.5, 5.0, 6.0, 50.0):
        hist.labels("log").observe(ms)
    out = io.StringIO()
    export = PeriodicExport(
        registry, ConsoleMetricExporter(out=out), Resource.create({"service.name": "svc"})
    )
    export.export_once()
    data = json.loads(out.getvalue())
    (resource,) = data["resource_metrics"]
    assert resource["resource"]["attributes"]["service.name"] == "svc"
    found = {m["name"]: m for m in resource["scope_metrics"][0]["metrics"]}
    counter = found[metrics.THROUGHPUT_IN]
    assert counter["unit"] == "By"
    assert counter["data"]["is_monotonic"] is True
    (point,) = counter["data"]["data_points"]
    assert point["value"] == 300.0 and point["attributes"] == {"topic": "A"}
    (flush,) = found[metrics.FLUSH_LATENCY]["data"]["data_points"]
    assert found[metrics.FLUSH_LATENCY]["unit"] == "ms"
    assert flush["attributes"] == {"flush": "log"}
    assert flush["explicit_bounds"] == [1.0, 10.0]
    assert flush["bucket_counts"] == [1, 2, 1]  # per bucket, not cumulative
    assert flush["count"] == 4 and flush["sum"] == 61.5


def test_sampled_reads_the_flags_of_a_traceparent() -> None:
    assert telemetry.sampled(SAMPLED)
    assert telemetry.sampled(RANDOM_BIT_SAMPLED)
    assert not telemetry.sampled(NOT_SAMPLED)
    assert not telemetry.sampled("")
    assert not telemetry.sampled("garbage")


def test_sampled_contexts_are_found_in_raw_records_without_decoding() -> None:
    frame = b"".join(
        b"\x00header" + encode_properties({"KEYS": "k", "traceparent": tp}) + b"body"
        for tp in (SAMPLED, NOT_SAMPLED, RANDOM_BIT_SAMPLED)
    )
    assert telemetry.sampled_contexts(frame) == [SAMPLED, RANDOM_BIT_SAMPLED]
    assert telemetry.sampled_contexts(memoryview(frame), limit=1) == [SAMPLED]
    assert telemetry.sampled_contexts(b"no traces here") == []


def _setup_in_child(env: dict[str, str], config: str = "None") -> dict[str, object]:
    code = textwrap.dedent(
        f"""
        import json, types
        from opentelemetry import metrics as m, trace
        from ferry.runtime import metrics, telemetry
        config = {config}
        traces = telemetry.setup_telemetry("svc", config, environ={env!r})
        exporter = ""
        provider = trace.get_tracer_provider()
        for p in getattr(getattr(provider, "_active_span_processor", None), "_span_processors", ()):
            exporter = type(p.span_exporter).__module__
        print(json.dumps({{"traces": traces, "metrics": metrics.enabled(), "exporter": exporter}}))
        """
    )
    out = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, check=True, timeout=60
    )
    result: dict[str, object] = json.loads(out.stdout.strip().splitlines()[-1])
    return result


def test_nothing_is_installed_without_otel_variables_or_metrics_config() -> None:
    assert _setup_in_child({}) == {"traces": False, "metrics": False, "exporter": ""}


def test_an_endpoint_installs_otlp_http_and_grpc_when_asked() -> None:
    http = _setup_in_child({"OTEL_EXPORTER_OTLP_ENDPOINT": "http://127.0.0.1:9"})
    assert http["traces"] is True
    assert http["metrics"] is False  # metrics need OTEL_METRICS_EXPORTER or the broker keys
    assert str(http["exporter"]).endswith("proto.http.trace_exporter")
    grpc = _setup_in_child(
        {
            "OTEL_EXPORTER_OTLP_ENDPOINT": "http://127.0.0.1:9",
            "OTEL_EXPORTER_OTLP_PROTOCOL": "grpc",
            "OTEL_METRICS_EXPORTER": "otlp",
        }
    )
    assert str(grpc["exporter"]).endswith("proto.grpc.trace_exporter")
    assert grpc["metrics"] is True  # OTLP metrics, asked for by name


def test_broker_metrics_keys_turn_metrics_on() -> None:
    prom = _setup_in_child({}, 'types.SimpleNamespace(metrics_exporter_type="PROM")')
    assert prom == {"traces": False, "metrics": True, "exporter": ""}


def test_log_prints_the_registry_at_shutdown() -> None:
    code = textwrap.dedent(
        """
        import types
        from ferry.runtime import metrics, telemetry
        config = types.SimpleNamespace(metrics_exporter_type="LOG", broker_name="b", broker_id=0)
        telemetry.setup_telemetry("svc", config, environ={})
        metrics.observe(metrics.registry(), "ferry_test_total", "counter", "h", lambda: [(4, {})])
        telemetry.shutdown_telemetry()
        """
    )
    out = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, check=True, timeout=60
    )
    data = json.loads(out.stdout)
    (resource,) = data["resource_metrics"]
    assert resource["resource"]["attributes"]["service.instance.id"] == "b-0"
    (metric,) = resource["scope_metrics"][0]["metrics"]
    assert metric["name"] == "ferry_test_total"
    assert metric["data"]["data_points"][0]["value"] == 4.0


def test_a_failing_handler_marks_its_span_with_the_response_code() -> None:
    from ferry.protocol.errors import NoPermissionError

    exporter = telemetry.capture_spans()
    telemetry.enable_for_tests()
    with pytest.raises(NoPermissionError), telemetry.server_span("t", "guarded", SAMPLED):
        raise NoPermissionError("not writable")
    (span,) = [s for s in exporter.get_finished_spans() if s.name == "guarded"]
    assert span.attributes is not None
    assert span.attributes["error.type"] == "NO_PERMISSION"
    assert span.parent is not None and format(span.parent.span_id, "016x") == SAMPLED[36:52]
    assert telemetry.code_name(2) == "SYSTEM_BUSY"
    assert telemetry.child_span("t", "skipped", NOT_SAMPLED) is None
    # a caller's unsampled trace is followed: no span, its traceparent passes on as it is
    assert telemetry.open_span("t", "skipped", NOT_SAMPLED) is None
    assert not telemetry.traced(NOT_SAMPLED)
    assert telemetry.traced(SAMPLED) and telemetry.traced("")
    exporter.shutdown()


class _OtlpSink(BaseHTTPRequestHandler):
    bodies: ClassVar[list[bytes]] = []

    def do_POST(self) -> None:
        body = self.rfile.read(int(self.headers["Content-Length"]))
        if self.path == "/v1/metrics":
            self.bodies.append(body)
        self.send_response(200)
        self.send_header("Content-Length", "0")
        self.end_headers()

    def log_message(self, *_args: object) -> None:
        pass


def test_otlp_http_sends_counters_and_histograms_to_the_endpoint() -> None:
    server = ThreadingHTTPServer(("127.0.0.1", 0), _OtlpSink)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    endpoint = f"http://127.0.0.1:{server.server_address[1]}"
    code = textwrap.dedent(
        """
        from prometheus_client import Histogram
        from ferry.runtime import metrics, telemetry
        telemetry.setup_telemetry("svc", None)
        registry = metrics.registry()
        metrics.observe(registry, "ferry_test_total", "counter", "h", lambda: [(4, {})])
        hist = Histogram("ferry_test_ms", "h", registry=registry, buckets=(1.0, 10.0))
        hist.observe(5.0)
        telemetry.shutdown_telemetry()
        """
    )
    try:
        env = os.environ | {
            "OTEL_METRICS_EXPORTER": "otlp",
            "OTEL_EXPORTER_OTLP_ENDPOINT": endpoint,
            "OTEL_TRACES_EXPORTER": "none",
        }
        subprocess.run([sys.executable, "-c", code], check=True, timeout=60, env=env)
    finally:
        server.shutdown()
        server.server_close()
        thread.join(5)
    assert _OtlpSink.bodies, "no OTLP metrics request reached the endpoint"
    request = ExportMetricsServiceRequest.FromString(_OtlpSink.bodies[-1])
    (resource,) = request.resource_metrics
    found = {m.name: m for m in resource.scope_metrics[0].metrics}
    assert found["ferry_test_total"].sum.data_points[0].as_double == 4.0
    assert found["ferry_test_total"].sum.is_monotonic
    (point,) = found["ferry_test_ms"].histogram.data_points
    assert list(point.bucket_counts) == [0, 1, 0] and point.count == 1 and point.sum == 5.0
    assert not point.HasField("min")  # Prometheus keeps none: left out, not made up
