"""An application's client spans reach a trace backend the ways OpenTelemetry users expect:
zero-code with `opentelemetry-instrument` (from the OTEL_* variables), or with the SDK's one
line, ferry.client.enable_tracing(endpoint). The application runs in its own process against a
real cluster; an OTLP/HTTP receiver (itest_support.OtlpSink) stands in for the backend.
"""

from __future__ import annotations

import os
import re
import shlex
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest
from itest_support import Cluster, OtlpSink, ReceivedSpan, wait_for

from ferry.admin import Admin

pytestmark = pytest.mark.integration

BIN = Path(sys.executable).parent
README = Path(__file__).parents[2] / "README.md"
CONSOLE = "http://127.0.0.1:8080"
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


def readme_traces(lang: str) -> str:
    """The README's block of that language in its "Traces" section."""
    text = README.read_text(encoding="utf-8")
    section = text.split("## Traces\n", 1)[1].split("\n## ", 1)[0]
    (block,) = re.findall(rf"```{lang}\n(.*?)```", section, re.S)
    return str(block)


@pytest.mark.usefixtures("topic")
def test_opentelemetry_instrument_traces_an_unchanged_app_as_the_readme_says(
    cluster: Cluster, otlp_sink: OtlpSink, tmp_path: Path
) -> None:
    block = readme_traces("sh").replace(CONSOLE, otlp_sink.endpoint)
    words = [w for w in shlex.split(block.replace("\\\n", " ")) if w != "export"]
    settings = dict(w.split("=", 1) for w in words if "=" in w)
    assert [w for w in words if "=" not in w][:3] == ["uv", "run", "opentelemetry-instrument"]
    env = {k: v for k, v in os.environ.items() if not k.startswith("OTEL_")}
    out = run_app(tmp_path, cluster, {**env, **settings}, "", str(BIN / "opentelemetry-instrument"))
    one_id, batch_ids = out.split()
    check(sends(otlp_sink, settings["OTEL_SERVICE_NAME"], 2), one_id, batch_ids)


@pytest.mark.usefixtures("topic")
def test_enable_tracing_is_the_one_line_an_app_adds(
    cluster: Cluster, otlp_sink: OtlpSink, tmp_path: Path
) -> None:
    env = {k: v for k, v in os.environ.items() if not k.startswith("OTEL_")}
    setup = readme_traces("python").replace(CONSOLE, otlp_sink.endpoint)
    assert "enable_tracing" in setup
    out = run_app(tmp_path, cluster, env, setup)
    one_id, batch_ids = out.split()
    check(sends(otlp_sink, "app", 2), one_id, batch_ids)  # the script's name
