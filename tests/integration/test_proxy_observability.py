"""The gRPC proxy as an operated service: its Prometheus endpoint counts and times each method
by the Status code answered, and its spans for SendMessage and ReceiveMessage continue the
client's trace (a message's trace_context first, else the call's `traceparent` metadata), carry
the messaging attributes, and are the parents of the SDK's and the brokers' spans after them.

The calls come from RocketMQ 5's Python client venv: its generated stubs for the calls that
carry a trace context (rocketmq-python-client 5.1.2 itself sets none), and its Producer."""

from __future__ import annotations

import json
import os
import re
import subprocess
import urllib.request
from collections.abc import Iterator

import pytest
from itest_support import OtlpSink, ReceivedSpan, wait_for

from ferry.admin import Admin
from ferry.runtime.launcher import LocalCluster, start_local_cluster
from ferry.runtime.processes import ServiceProcess, service_args, start_service
from ferry.runtime.testing.client_venvs import rocketmq_grpc_python

pytestmark = pytest.mark.integration

TOPIC = "ProxyObserved"
PROXY = "ferry-proxy"
OTLP_SERVER, OTLP_PRODUCER = 2, 4
# W3C contexts the calls carry (sampled)
T_META = "00-" + "a1" * 16 + "-" + "b1" * 8 + "-01"
T_MSG = "00-" + "a2" * 16 + "-" + "b2" * 8 + "-01"
T_OTHER = "00-" + "a3" * 16 + "-" + "b3" * 8 + "-01"
T_RECV = "00-" + "a4" * 16 + "-" + "b4" * 8 + "-01"
CONTEXTS = (T_META, T_MSG, T_OTHER, T_RECV)

# argv: endpoint, topic. The generated stub's calls with trace contexts, then the official
# Producer's send; prints the ids as JSON.
CALLS = r"""
import json, sys, zlib
import grpc
from rocketmq import ClientConfiguration, Credentials, Message, Producer
from rocketmq.grpc_protocol import definition_pb2 as d, service_pb2 as s, service_pb2_grpc
endpoint, topic, t_meta, t_msg, t_other, t_recv = sys.argv[1:7]
stub = service_pb2_grpc.MessagingServiceStub(grpc.insecure_channel(endpoint))
client = ("x-mq-client-id", "observed@1")

def message(i, trace_context=""):
    m = d.Message(topic=d.Resource(name=topic), body=f"obs-{i}".encode())
    p = m.system_properties
    p.message_id = f"{i:034X}"
    p.message_type = d.NORMAL
    p.tag = "ObsTag"
    p.keys.extend([f"k-{i}"])
    p.body_encoding = d.IDENTITY
    p.body_digest.type = d.CRC32
    p.body_digest.checksum = format(zlib.crc32(m.body), "08X")
    if trace_context:
        p.trace_context = trace_context
    return m

out = {}
r = stub.SendMessage(s.SendMessageRequest(messages=[message(1)]), timeout=10,
                     metadata=[client, ("traceparent", t_meta)])
out["meta"] = [r.status.code, r.entries[0].message_id]
r = stub.SendMessage(s.SendMessageRequest(messages=[message(2, t_msg)]), timeout=10,
                     metadata=[client, ("traceparent", t_other)])
out["msg"] = [r.status.code, r.entries[0].message_id]
r = stub.QueryRoute(s.QueryRouteRequest(topic=d.Resource(name="NoSuchObservedTopic")),
                    timeout=10, metadata=[client])
out["missing"] = r.status.code
raw = grpc.insecure_channel(endpoint).unary_unary("/" + s.DESCRIPTOR.services_by_name[
    "MessagingService"].full_name + "/SendMessage")
bad = raw(b"\xff\xff", timeout=10, metadata=[client, ("traceparent", t_meta)])
out["malformed"] = s.SendMessageResponse.FromString(bad).status.code
receive = s.ReceiveMessageRequest(group=d.Resource(name="cg-observed"), batch_size=16)
receive.message_queue.topic.name = topic
receive.message_queue.id = -1
receive.filter_expression.type = d.TAG
receive.filter_expression.expression = "*"
receive.invisible_duration.seconds = 30
receive.long_polling_timeout.seconds = 5
got = []
for _ in range(10):
    meta = [client, ("traceparent", t_recv)]
    for reply in stub.ReceiveMessage(receive, timeout=20, metadata=meta):
        if reply.WhichOneof("content") == "message":
            got.append(reply.message.system_properties.message_id)
    if len(got) >= 2:
        break
out["received"] = got
producer = Producer(ClientConfiguration(endpoint, Credentials()), (topic,))
producer.startup()
msg = Message()
msg.topic = topic
msg.body = b"plain"
out["plain"] = producer.send(msg).message_id
producer.shutdown()
print(json.dumps(out))
"""


class Observed:
    def __init__(self, cluster: LocalCluster, proxy: ServiceProcess) -> None:
        self.cluster = cluster
        self.proxy = proxy
        self.proxy_addr = proxy.endpoints["grpc"]
        self.metrics_addr = proxy.endpoints["metrics"]


@pytest.fixture(scope="module")
def observed(tmp_path_factory: pytest.TempPathFactory, sink: OtlpSink) -> Iterator[Observed]:
    home = tmp_path_factory.mktemp("observed-home")  # the client package writes ~/logs
    env = {**sink.env(), "HOME": str(home)}
    cluster = start_local_cluster(str(tmp_path_factory.mktemp("observed")), env=env)
    try:
        settings = {
            "namesrvAddr": cluster.namesrv_addr,
            "proxyListenPort": "0",
            "metricsExporterType": "PROM",
            "metricsPromExporterPort": "0",
        }
        proxy = start_service("proxy", service_args(None, settings), env=env)
        cluster.processes.append(proxy)
        with Admin(cluster.namesrv_addr) as admin:
            wait_for(admin.master_addrs, 15, "the broker to register")
            admin.create_topic(TOPIC, 4, 4)
        yield Observed(cluster, proxy)
    finally:
        cluster.stop()


@pytest.fixture(scope="module")
def calls(observed: Observed, tmp_path_factory: pytest.TempPathFactory) -> dict[str, object]:
    home = tmp_path_factory.mktemp("calls-home")
    script = home / "calls.py"
    script.write_text(CALLS)
    done = subprocess.run(
        [str(rocketmq_grpc_python()), str(script), observed.proxy_addr, TOPIC, *CONTEXTS],
        capture_output=True,
        text=True,
        timeout=180,
        check=False,
        env={**os.environ, "HOME": str(home)},
    )
    assert done.returncode == 0, done.stderr[-3000:]
    out: dict[str, object] = json.loads(done.stdout.splitlines()[-1])
    return out


def trace_of(traceparent: str) -> tuple[str, str]:
    _, trace_id, span_id, _ = traceparent.split("-")
    return trace_id, span_id


def spans_in(sink: OtlpSink, trace_id: str, wanted: set[tuple[str, str]]) -> list[ReceivedSpan]:
    def find() -> list[ReceivedSpan] | None:
        mine = [s for s in sink.snapshot() if s.trace_id == trace_id]
        return mine if wanted <= {(s.service, s.name) for s in mine} else None

    found: list[ReceivedSpan] = wait_for(find, 30, f"spans {sorted(wanted)} of {trace_id}")
    return found


def one(spans: list[ReceivedSpan], service: str, name: str, kind: int) -> ReceivedSpan:
    found = [s for s in spans if (s.service, s.name, s.kind) == (service, name, kind)]
    assert len(found) == 1, found
    return found[0]


@pytest.mark.timeout(300)
def test_a_send_continues_the_calls_traceparent_down_to_the_broker(
    calls: dict[str, object], sink: OtlpSink
) -> None:
    code, message_id = calls["meta"]  # type: ignore[misc]
    assert code == 20000
    trace_id, caller = trace_of(T_META)
    wanted = {(PROXY, f"send {TOPIC}"), ("ferry-broker-remoting", f"send {TOPIC}")}
    spans = spans_in(sink, trace_id, wanted)
    proxy = one(spans, PROXY, f"send {TOPIC}", OTLP_SERVER)
    assert proxy.parent_span_id == caller
    assert {
        "messaging.system": "rocketmq",
        "messaging.operation.name": "send",
        "messaging.operation.type": "send",
        "messaging.destination.name": TOPIC,
        "messaging.message.id": message_id,
        "messaging.client.id": "observed@1",
        "messaging.rocketmq.message.type": "normal",
        "messaging.rocketmq.message.tag": "ObsTag",
        "messaging.rocketmq.message.keys": ["k-1"],
    }.items() <= proxy.attributes.items()
    # the proxy's producer (Ferry's SDK) sends within the proxy's span; the broker after it
    by_id = {s.span_id: s for s in spans}
    broker = one(spans, "ferry-broker-remoting", f"send {TOPIC}", OTLP_SERVER)
    chain = []
    span: ReceivedSpan | None = broker
    while span is not None:
        chain.append((span.service, span.kind))
        span = by_id.get(span.parent_span_id)
    # broker <- the SDK's producer span in the proxy <- the proxy's span <- the caller's
    assert chain == [
        ("ferry-broker-remoting", OTLP_SERVER),
        (PROXY, OTLP_PRODUCER),
        (PROXY, OTLP_SERVER),
    ], chain


@pytest.mark.timeout(300)
def test_a_messages_trace_context_comes_before_the_calls(
    calls: dict[str, object], sink: OtlpSink
) -> None:
    assert calls["msg"][0] == 20000  # type: ignore[index]
    trace_id, caller = trace_of(T_MSG)
    spans = spans_in(sink, trace_id, {(PROXY, f"send {TOPIC}")})
    proxy = one(spans, PROXY, f"send {TOPIC}", OTLP_SERVER)
    assert proxy.parent_span_id == caller
    other_trace, _ = trace_of(T_OTHER)
    assert not [s for s in sink.snapshot() if s.trace_id == other_trace]


@pytest.mark.timeout(300)
def test_a_receive_continues_the_calls_trace_and_links_the_messages(
    calls: dict[str, object], sink: OtlpSink
) -> None:
    received = calls["received"]
    assert isinstance(received, list) and len(received) >= 2
    trace_id, caller = trace_of(T_RECV)
    spans = spans_in(sink, trace_id, {(PROXY, f"receive {TOPIC}")})
    receives = [s for s in spans if s.name == f"receive {TOPIC}" and s.service == PROXY]
    assert all(s.parent_span_id == caller for s in receives)
    assert all(s.kind == OTLP_SERVER for s in receives)
    got = [s for s in receives if s.attributes.get("messaging.batch.message_count", 0) > 0]
    assert got, [s.attributes for s in receives]
    attributes = got[0].attributes
    assert attributes["messaging.consumer.group.name"] == "cg-observed"
    assert attributes["messaging.operation.type"] == "receive"
    assert attributes["messaging.rocketmq.consumption_model"] == "clustering"
    # linked to the delivered messages' traces: the two sends above
    linked = {trace for r in got for trace, _ in r.links}
    assert {trace_of(T_META)[0], trace_of(T_MSG)[0]} & linked, linked


@pytest.mark.timeout(300)
def test_the_official_clients_send_starts_a_trace_at_the_proxy(
    calls: dict[str, object], sink: OtlpSink
) -> None:
    plain = calls["plain"]

    def found() -> ReceivedSpan | None:
        return next(
            (
                s
                for s in sink.snapshot()
                if s.service == PROXY
                and s.kind == OTLP_SERVER
                and s.attributes.get("messaging.message.id") == plain
            ),
            None,
        )

    span: ReceivedSpan = wait_for(found, 30, "the proxy's span of the official client's send")
    assert span.parent_span_id == ""  # 5.1.2 sends no trace context
    assert span.name == f"send {TOPIC}"


def scrape(addr: str) -> dict[tuple[str, str], float]:
    """rocketmq_rpc_latency_count by (request_code, response_code)."""
    with urllib.request.urlopen(f"http://{addr}/metrics", timeout=10) as page:
        text = page.read().decode()
    out: dict[tuple[str, str], float] = {}
    for line in text.splitlines():
        if line.startswith("rocketmq_rpc_latency_count{"):
            labels = dict(re.findall(r'(\w+)="([^"]*)"', line))
            assert labels["protocol_type"] == "grpc"
            out[(labels["request_code"], labels["response_code"])] = float(line.rsplit(" ", 1)[1])
    return out


@pytest.mark.timeout(300)
def test_metrics_count_each_method_by_status_code(
    observed: Observed, calls: dict[str, object]
) -> None:
    counts = scrape(observed.metrics_addr)
    assert counts[("SendMessage", "OK")] >= 3, counts  # two stub sends, the Producer's
    assert counts[("QueryRoute", "TOPIC_NOT_FOUND")] >= 1, counts
    assert counts[("QueryRoute", "OK")] >= 1, counts  # the Producer's route
    assert ("ReceiveMessage", "OK") in counts, counts
    # latencies: the histogram's buckets and sum are there for each
    with urllib.request.urlopen(f"http://{observed.metrics_addr}/metrics", timeout=10) as page:
        text = page.read().decode()
    assert re.search(r'rocketmq_rpc_latency_bucket\{[^}]*request_code="SendMessage"', text)
    assert re.search(r'rocketmq_rpc_latency_sum\{[^}]*request_code="SendMessage"', text)


def test_a_malformed_send_gets_bad_request_and_no_span_failure(
    observed: Observed, calls: dict[str, object]
) -> None:
    assert calls["malformed"] == 40000  # BAD_REQUEST
    said = observed.proxy.recent_output()
    assert "telemetry hook" not in said and "Traceback" not in said, said[-3000:]
