"""An application's client spans reach a trace backend the ways OpenTelemetry users expect:
zero-code with `opentelemetry-instrument` (from the OTEL_* variables), or with the SDK's one
line, ferry.client.enable_tracing(endpoint). The application runs in its own process against a
real cluster; an OTLP/HTTP receiver (itest_support.OtlpSink) stands in for the backend.
"""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest
from itest_support import Cluster, OtlpSink, ReceivedSpan, wait_for

from ferry.client import Admin

pytestmark = pytest.mark.integration

BIN = Path(sys.executable).parent
OTLP_PRODUCER = 4  # SpanKind.PRODUCER in OTLP

APP = """
import os
import sys

from ferry.client import Message, Producer
{setup}
with Producer("traced-app", os.environ["NAMESRV_ADDR"]) as producer:
    one = producer.send(Message("TracedApp", b"one", tags="A"))
    batch = producer.send_batch([Message("TracedApp", b"b%d" % i) for i in range(3)])
print(one.msg_id)
print(batch.msg_id)
"""


def run_app(tmp_path: Path, cluster: Cluster, env: dict[str, str], setup: str, *cmd: str) -> str:
    script = tmp_path / "app.py"
    script.write_text(textwrap.dedent(APP.format(setup=setup)))
    done = subprocess.run(
        [*cmd, sys.executable, str(script)],
        capture_output=True,
        text=True,
        env={**env, "NAMESRV_ADDR": cluster.namesrv},
        timeout=60,
        check=False,
    )
    assert done.returncode == 0, done.stderr
    return done.stdout


def sends(sink: OtlpSink, service: str, count: int) -> list[ReceivedSpan]:
    def found() -> list[ReceivedSpan] | None:
        mine = [s for s in sink.snapshot() if s.service == service and s.name == "send TracedApp"]
        return mine if len(mine) >= count else None

    spans: list[ReceivedSpan] = wait_for(found, 20, f"{count} send spans of {service}")
    return spans


def check(spans: list[ReceivedSpan], one_id: str, batch_ids: str) -> None:
    """The single send's span names its message; the batch's counts its three."""
    assert all(s.kind == OTLP_PRODUCER for s in spans)
    by_id = {s.attributes.get("messaging.message.id"): s for s in spans}
    single = by_id[one_id]
    assert single.attributes["messaging.system"] == "rocketmq"
    assert single.attributes["messaging.rocketmq.message.tag"] == "A"
    (batch,) = [s for s in spans if s.attributes.get("messaging.batch.message_count") == 3]
    assert "messaging.message.id" not in batch.attributes
    assert len(batch_ids.split(",")) == 3


@pytest.fixture
def topic(cluster: Cluster) -> None:
    with Admin(cluster.namesrv) as admin:
        admin.create_topic("TracedApp", 1, 1)


@pytest.mark.usefixtures("topic")
def test_opentelemetry_instrument_traces_the_clients_of_an_unchanged_app(
    cluster: Cluster, otlp_sink: OtlpSink, tmp_path: Path
) -> None:
    env = {
        **os.environ,
        "OTEL_SERVICE_NAME": "instrumented-app",
        "OTEL_TRACES_EXPORTER": "otlp",
        "OTEL_METRICS_EXPORTER": "none",
        "OTEL_LOGS_EXPORTER": "none",
        "OTEL_EXPORTER_OTLP_PROTOCOL": "http/protobuf",
        "OTEL_EXPORTER_OTLP_ENDPOINT": otlp_sink.endpoint,
        "OTEL_BSP_SCHEDULE_DELAY": "100",
    }
    out = run_app(tmp_path, cluster, env, "", str(BIN / "opentelemetry-instrument"))
    one_id, batch_ids = out.split()
    check(sends(otlp_sink, "instrumented-app", 2), one_id, batch_ids)


@pytest.mark.usefixtures("topic")
def test_enable_tracing_is_the_one_line_an_app_adds(
    cluster: Cluster, otlp_sink: OtlpSink, tmp_path: Path
) -> None:
    env = {k: v for k, v in os.environ.items() if not k.startswith("OTEL_")}
    setup = f"import ferry.client\nferry.client.enable_tracing({otlp_sink.endpoint!r})\n"
    out = run_app(tmp_path, cluster, env, setup)
    one_id, batch_ids = out.split()
    check(sends(otlp_sink, "app", 2), one_id, batch_ids)  # the script's name
