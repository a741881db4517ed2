"""The proxy process against RocketMQ 5's unchanged Python client (rocketmq-python-client 5.1.2,
run from a venv of its own): normal sends through the proxy arrive in Ferry with body, tag,
keys, properties and the client's message id; the calls the client does not make here are
checked with the generated stub: Settings answered, a Status for calls it cannot serve."""

from __future__ import annotations

import json
from collections.abc import Callable
from typing import Any

import pytest

from ferry.admin import Admin
from ferry.client import ConsumeFromWhere, MessageExt, PullConsumer
from ferry.runtime.launcher import LocalCluster
from ferry.runtime.testing.pytest_support import wait_for

pytestmark = pytest.mark.integration

# conftest's fixtures: proxy (a ProxyProcess), client (runs a program with the client's python)
ClientRunner = Callable[..., str]
ProxyProcess = Any

TOPIC = "ProxySend"
COUNT = 5

# argv: endpoint, topic, count; prints one JSON line per sent message
SEND = r"""
import json, sys
from rocketmq import ClientConfiguration, Credentials, Message, Producer
endpoint, topic, count = sys.argv[1], sys.argv[2], int(sys.argv[3])
producer = Producer(ClientConfiguration(endpoint, Credentials()), (topic,))
producer.startup()
try:
    for i in range(count):
        msg = Message()
        msg.topic = topic
        msg.body = f"body {i}".encode()
        msg.tag = f"Tag{i % 2}"
        msg.keys = f"key-{i}"
        msg.add_property("order", str(i))
        msg.add_property("color", "blue")
        receipt = producer.send(msg)
        print(json.dumps({"i": i, "id": receipt.message_id, "offset": receipt.offset}), flush=True)
finally:
    producer.shutdown()
"""

# argv: endpoint, topic; the generated stub's view of calls the producer above does not make
CALLS = r"""
import json, sys
import grpc
from rocketmq.grpc_protocol import definition_pb2 as d, service_pb2 as s, service_pb2_grpc
endpoint, topic = sys.argv[1], sys.argv[2]
stub = service_pb2_grpc.MessagingServiceStub(grpc.insecure_channel(endpoint))
meta = [("x-mq-client-id", "probe@1")]
out = {}
settings = d.Settings(client_type=d.PRODUCER)
settings.publishing.topics.add(name=topic)
settings.publishing.max_body_size = 128 << 20
replies = stub.Telemetry(iter([s.TelemetryCommand(settings=settings)]), metadata=meta, timeout=5)
first = list(replies)[0]  # drained: a stream left unread can hang grpc's client at exit
out["settings"] = [first.status.code, first.settings.publishing.max_body_size]
missing = stub.QueryRoute(s.QueryRouteRequest(topic=d.Resource(name="NoSuchTopic")), timeout=5)
out["missing_topic"] = missing.status.code
beat = stub.Heartbeat(s.HeartbeatRequest(client_type=d.PRODUCER), timeout=5)
out["no_client_id"] = beat.status.code
receive = list(stub.ReceiveMessage(s.ReceiveMessageRequest(), metadata=meta, timeout=5))
out["receive"] = [(r.status.code, r.status.message) for r in receive]
ack = stub.AckMessage(s.AckMessageRequest(), metadata=meta, timeout=5)
out["ack"] = ack.status.code
print(json.dumps(out))
"""


@pytest.fixture(scope="module", autouse=True)
def topic(cluster: LocalCluster) -> str:
    with Admin(cluster.namesrv_addr) as admin:
        admin.create_topic(TOPIC, 4, 4)
    return TOPIC


@pytest.mark.timeout(300)
def test_normal_sends_through_the_proxy_reach_ferry_intact(
    cluster: LocalCluster, proxy: ProxyProcess, client: ClientRunner
) -> None:
    out = client(SEND, proxy.addr, TOPIC, str(COUNT))
    sent = [json.loads(line) for line in out.splitlines()]
    assert [s["i"] for s in sent] == list(range(COUNT))
    ids = [s["id"] for s in sent]
    assert len(set(ids)) == COUNT and all(len(i) == 34 for i in ids)  # the client's own ids

    got: dict[str, MessageExt] = {}
    with PullConsumer(
        "cg-proxy-send", cluster.namesrv_addr, consume_from=ConsumeFromWhere.FIRST_OFFSET
    ) as consumer:
        consumer.subscribe(TOPIC)

        def all_arrived() -> bool:
            for msg in consumer.poll(timeout=1.0):
                got[msg.msg_id] = msg
            return len(got) >= COUNT

        wait_for(all_arrived, 30, "the 5 messages sent through the proxy")
    assert sorted(got) == sorted(ids)
    for s in sent:
        msg, i = got[s["id"]], s["i"]
        assert msg.body == f"body {i}".encode()
        assert msg.tags == f"Tag{i % 2}"
        assert msg.keys == [f"key-{i}"]
        assert msg.properties["order"] == str(i)
        assert msg.properties["color"] == "blue"
        assert msg.properties["UNIQ_KEY"] == s["id"]
        assert msg.queue_offset == s["offset"]


def test_settings_are_answered_and_bad_calls_get_a_status(
    proxy: ProxyProcess, client: ClientRunner
) -> None:
    seen: dict[str, Any] = json.loads(client(CALLS, proxy.addr, TOPIC))
    assert seen["settings"] == [20000, 4 * 1024 * 1024]  # OK, the proxy's limit, never 0
    assert seen["missing_topic"] == 40402  # TOPIC_NOT_FOUND
    assert seen["no_client_id"] == 40017  # CLIENT_ID_REQUIRED
    assert [r[0] for r in seen["receive"]] == [40003]  # ILLEGAL_CONSUMER_GROUP: none named
    assert seen["ack"] == 40003
    assert proxy.proc.poll() is None  # none of it stopped the proxy
