"""The console as a process next to a real cluster: limits hold, bad input gets 4xx, and
nothing a client sends takes it down."""

from __future__ import annotations

import gzip
import json
import os
import subprocess
import sys
import urllib.error
import urllib.request
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest

from ferry.client import Message, Producer
from ferry.runtime.launcher import LocalCluster, start_local_cluster, start_service

pytestmark = pytest.mark.integration

TOPIC = "LimitsTopic"


@pytest.fixture(scope="module")
def cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[LocalCluster]:
    env = {
        **os.environ,
        "FERRY_maxQueryMessages": "5",
        "FERRY_bodyPreviewBytes": "1024",
        "FERRY_otlpMaxRequestBytes": "65536",
        "FERRY_sampleIntervalMs": "500",
    }
    local = start_local_cluster(
        str(tmp_path_factory.mktemp("console")),
        overrides={"mappedFileSizeCommitLog": str(16 * 1024 * 1024)},
        env=env,
        console_port=0,
    )
    try:
        yield local
    finally:
        local.stop()


def get(
    url: str, data: bytes | None = None, headers: dict[str, str] | None = None
) -> tuple[int, bytes]:
    request = urllib.request.Request(url, data=data, headers=headers or {})
    try:
        with urllib.request.urlopen(request, timeout=30) as reply:
            return reply.status, reply.read()
    except urllib.error.HTTPError as err:
        return err.code, err.read()


def test_a_huge_body_is_previewed_within_the_limit_and_queries_are_capped(
    cluster: LocalCluster,
) -> None:
    big = b"x" * (3 * 1024 * 1024)
    with Producer("LimitsProducers", cluster.namesrv_addr) as producer:
        result = producer.send(Message(TOPIC, big, keys="big"))
        for i in range(7):
            producer.send(Message(TOPIC, f"small {i}".encode()))
    status, page = get(f"{cluster.console_url}/message/{result.offset_msg_id}")
    assert status == 200
    assert len(page) < 64 * 1024  # the 3 MiB body is not in the page
    assert b"first 1024 shown" in page
    status, page = get(f"{cluster.console_url}/messages?mode=time&topic={TOPIC}&begin=0")
    assert status == 200
    assert page.count(b'class="msg-link"') == 5  # maxQueryMessages
    assert b"(the first 5)" in page


def test_bad_requests_get_4xx_and_the_console_keeps_serving(cluster: LocalCluster) -> None:
    url = cluster.console_url
    bad = [
        "/topic/%00%01",
        "/messages?mode=time&topic=" + "t" * 5000,
        "/messages?mode=id&id=" + "z" * 100,
        "/messages?mode=key&topic=LimitsTopic",
        "/message/" + "f" * 32,
        "/trace/message/" + "m" * 500,
        "/api/trace/message/" + "m" * 500,
        "/group/%25%25%25?topic=***",
        "/nope",
    ]
    with ThreadPoolExecutor(16) as pool:
        codes = list(pool.map(lambda p: get(url + p)[0], bad * 8))
    assert all(400 <= c < 500 for c in codes), codes
    status, _ = get(url + "/message/" + "f" * 32, data=b"topic=x")  # resend of nothing
    assert 400 <= status < 500
    status, _ = get(url + "/topics", data=b"topic=Evil", headers={"Origin": "http://elsewhere"})
    assert status == 400  # a form posted from another site
    status, page = get(url + "/")
    assert status == 200 and b"broker-a" in page


def test_the_otlp_receiver_takes_json_and_refuses_what_it_cannot_hold(
    cluster: LocalCluster,
) -> None:
    url = cluster.console_url + "/v1/traces"
    pb = {"Content-Type": "application/x-protobuf"}
    assert get(url, b"\x00" * 70_000, pb)[0] == 413  # otlpMaxRequestBytes
    bomb = gzip.compress(b"\x00" * 5_000_000)
    assert get(url, bomb, {**pb, "Content-Encoding": "gzip"})[0] == 413
    assert get(url, b"\xff\xfe garbage", pb)[0] == 400
    assert get(url, b"{}", {"Content-Type": "text/plain"})[0] == 415
    span = {
        "traceId": "5b8efff798038103d269b633813fc60c",
        "spanId": "eee19b7ec3c1b174",
        "name": "send FromJson",
        "kind": 4,
        "startTimeUnixNano": "1000000",
        "endTimeUnixNano": "2000000",
        "attributes": [{"key": "messaging.message.id", "value": {"stringValue": "JSON-MSG"}}],
    }
    body = json.dumps(
        {
            "resourceSpans": [
                {
                    "resource": {
                        "attributes": [{"key": "service.name", "value": {"stringValue": "js"}}]
                    },
                    "scopeSpans": [{"spans": [span]}],
                }
            ]
        }
    ).encode()
    status, reply = get(url, body, {"Content-Type": "application/json"})
    assert (status, reply) == (200, b"{}")
    status, page = get(cluster.console_url + "/traces?msg_id=JSON-MSG")
    assert status == 200 and b"send FromJson" in page and b"1 spans in 1 trace" in page
    status, raw = get(cluster.console_url + "/api/trace/message/JSON-MSG")
    found = json.loads(raw)
    assert status == 200 and found["traces"] == [span["traceId"]]
    (got,) = found["spans"]
    assert (got["name"], got["service"], got["kind"]) == ("send FromJson", "js", 4)
    assert got["attributes"] == {"messaging.message.id": "JSON-MSG"}
    status, raw = get(cluster.console_url + "/api/trace/message/NOTHING-HERE")
    assert status == 200 and json.loads(raw)["traces"] == []


def test_bad_settings_stop_the_console_before_it_serves(tmp_path: Path) -> None:
    for args in (
        ["--port", "70000"],
        ["--set", "traceRetentionHours=0"],
        ["--set", "nope"],
        ["--set", "controllerAddr=no-port-here"],
    ):
        done = subprocess.run(
            [sys.executable, "-m", "ferry.console", "--data-dir", str(tmp_path), *args],
            capture_output=True,
            text=True,
            timeout=60,
            check=False,
        )
        assert done.returncode == 2, (args, done.stderr)
        assert "ferry-console:" in done.stderr


def test_with_an_otlp_token_only_exports_that_carry_it_are_taken(
    cluster: LocalCluster, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """otlpToken: a bearer token the services send as the OTel SDK's standard
    OTEL_EXPORTER_OTLP_TRACES_HEADERS; exports without it get 401 and store nothing."""
    from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter
    from opentelemetry.sdk.resources import Resource
    from opentelemetry.sdk.trace import TracerProvider
    from opentelemetry.sdk.trace.export import SimpleSpanProcessor

    token = "otlp-token-5678"
    env = {**os.environ, "FERRY_otlpToken": token}
    console = start_service(
        "console",
        ["-n", cluster.namesrv_addr, "--port", "0", "--data-dir", str(tmp_path)],
        env=env,
    )
    try:
        url = console.endpoints["url"]
        span = {
            "traceId": "6b8efff798038103d269b633813fc60c",
            "spanId": "fee19b7ec3c1b174",
            "name": "send Untokened",
            "startTimeUnixNano": "1000000",
            "endTimeUnixNano": "2000000",
            "attributes": [{"key": "messaging.message.id", "value": {"stringValue": "NO-TOKEN"}}],
        }
        body = json.dumps({"resourceSpans": [{"scopeSpans": [{"spans": [span]}]}]}).encode()
        as_json = {"Content-Type": "application/json"}
        assert get(url + "/v1/traces", body, as_json)[0] == 401
        assert get(url + "/v1/traces", body, {**as_json, "Authorization": "Bearer nope"})[0] == 401
        _, raw = get(url + "/api/trace/message/NO-TOKEN")
        assert json.loads(raw)["traces"] == []

        monkeypatch.setenv("OTEL_EXPORTER_OTLP_TRACES_HEADERS", f"Authorization=Bearer%20{token}")
        provider = TracerProvider(resource=Resource.create({"service.name": "tokened"}))
        provider.add_span_processor(
            SimpleSpanProcessor(OTLPSpanExporter(endpoint=url + "/v1/traces"))
        )
        attributes = {"messaging.message.id": "WITH-TOKEN"}
        with provider.get_tracer("t").start_as_current_span("send Tokened", attributes=attributes):
            pass
        provider.shutdown()
        _, raw = get(url + "/api/trace/message/WITH-TOKEN")
        (got,) = json.loads(raw)["spans"]
        assert (got["name"], got["service"]) == ("send Tokened", "tokened")
        assert token not in "\n".join(console.output)
    finally:
        console.stop()
