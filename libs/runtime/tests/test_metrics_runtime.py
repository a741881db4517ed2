"""ferry.runtime.metrics and telemetry helpers without any service: the Prometheus text of a
real MeterProvider, merging processes, sampled traceparents, and setup from the environment
(in a child process, since a process has one provider)."""

from __future__ import annotations

import json
import subprocess
import sys
import textwrap

import pytest
from opentelemetry.sdk.metrics import MeterProvider
from opentelemetry.sdk.metrics.export import InMemoryMetricReader

from ferry.protocol.messages import MetricFamily, MetricSample
from ferry.protocol.record import encode_properties
from ferry.runtime import metrics, telemetry

SAMPLED = "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01"
RANDOM_BIT_SAMPLED = "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-03"
NOT_SAMPLED = "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-00"


def test_counters_gauges_and_histograms_render_as_prometheus_text() -> None:
    reader = InMemoryMetricReader()
    provider = MeterProvider(metric_readers=[reader])
    meter = provider.get_meter("t")
    meter.create_counter(metrics.MESSAGES_IN).add(3, {"topic": "A"})
    hist = meter.create_histogram(metrics.RPC_LATENCY, unit="ms")
    for ms in (0.5, 2.0, 2.0, 700.0):
        hist.record(ms, {"request_code": "send_message"})
    meter.create_observable_gauge(
        metrics.CONSUMER_LAG_MESSAGES,
        [metrics.observe("lag", lambda: [(7.0, {"consumer_group": 'g"1'})])],
    )
    metrics.enable_for_tests(reader)
    families = {f.name: f for f in metrics.snapshot()}
    assert families[metrics.MESSAGES_IN].kind == "counter"
    assert families[metrics.CONSUMER_LAG_MESSAGES].kind == "gauge"
    text = metrics.render(metrics.merge([({"process": "p"}, list(families.values()))]))
    assert "# TYPE rocketmq_messages_in_total counter" in text
    assert 'rocketmq_messages_in_total{process="p",topic="A"} 3' in text
    assert 'rocketmq_consumer_lag_messages{consumer_group="g\\"1",process="p"} 7' in text
    assert "# TYPE rocketmq_rpc_latency histogram" in text
    # cumulative buckets, +Inf equal to the count
    assert 'rocketmq_rpc_latency_count{process="p",request_code="send_message"} 4' in text
    assert 'le="+Inf",process="p",request_code="send_message"} 4' in text
    assert 'rocketmq_rpc_latency_sum{process="p",request_code="send_message"} 704.5' in text
    provider.shutdown()


def test_a_failing_observation_gives_no_points_and_no_exception() -> None:
    def broken() -> list[tuple[float, dict[str, str]]]:
        raise RuntimeError("boom")

    callback = metrics.observe("broken", broken)
    assert list(callback(None)) == []  # type: ignore[arg-type]
    assert list(callback(None)) == []  # type: ignore[arg-type]


def test_merge_keeps_one_family_per_name_with_each_process_labels() -> None:
    fam = MetricFamily("m", "counter", "help", [MetricSample("m", {"topic": "t"}, 1.0)])
    merged = metrics.merge([({"process": "a"}, [fam]), ({"process": "b"}, [fam])])
    assert len(merged) == 1
    assert [s.labels["process"] for s in merged[0].samples] == ["a", "b"]
    text = metrics.render(merged)
    assert text.count("# TYPE m counter") == 1


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
