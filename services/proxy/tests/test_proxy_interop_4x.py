"""RocketMQ 4.x and 5.x clients on one Ferry cluster: messages a `rocketmq` 0.4.4 producer
sends through the broker's RocketMQ door reach a gRPC SimpleConsumer through the proxy, and
messages a gRPC producer sends reach a 0.4.4 push consumer, with the producer's message id,
tag, keys and user properties intact both ways (each client unchanged, in a venv of its own)."""

from __future__ import annotations

import json
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
from rocketmq_client_support import CONSUMER, RocketMQConsumer, probe_until_consumed, run_producer

from ferry.admin import Admin
from ferry.client import Producer
from ferry.runtime.launcher import LocalCluster, start_local_cluster
from ferry.runtime.testing.client_venvs import rocketmq_remoting_python
from ferry.runtime.testing.pytest_support import wait_for

pytestmark = pytest.mark.integration

ClientRunner = Callable[..., str]
ProxyProcess = Any  # conftest's

TO_GRPC = "InteropToGrpc"
FROM_GRPC = "InteropFromGrpc"
COUNT = 6

# argv: endpoint, topic, group, count; receives until `count` came (60 s at most), acks them,
# prints them as one JSON list
RECEIVE = r"""
import json, sys, time
from rocketmq import ClientConfiguration, Credentials, FilterExpression, SimpleConsumer
endpoint, topic, group, count = sys.argv[1], sys.argv[2], sys.argv[3], int(sys.argv[4])
consumer = SimpleConsumer(ClientConfiguration(endpoint, Credentials()), group,
                          {topic: FilterExpression()}, await_duration=2)
consumer.startup()
got, end = [], time.monotonic() + 60
try:
    while len(got) < count and time.monotonic() < end:
        for m in consumer.receive(16, 20):
            got.append({"id": m.message_id, "body": m.body.decode(), "tag": m.tag,
                        "keys": sorted(m.keys), "props": dict(m.properties)})
            consumer.ack(m)
finally:
    consumer.shutdown()
print(json.dumps(got))
"""

# argv: endpoint, topic, count; one JSON line per sent message
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
        msg.body = f"grpc {i}".encode()
        msg.tag = "FromGrpc"
        msg.keys = f"gk-{i}"
        msg.add_property("user", f"u{i}")
        receipt = producer.send(msg)
        print(json.dumps({"i": i, "id": receipt.message_id}), flush=True)
finally:
    producer.shutdown()
"""


@pytest.fixture(scope="module")
def cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[LocalCluster]:
    """conftest's cluster with the RocketMQ doors on (the proxy fixture starts on this one)."""
    local = start_local_cluster(str(tmp_path_factory.mktemp("interop")), rocketmq_port=0)
    try:
        with Admin(local.namesrv_addr) as admin:
            wait_for(admin.master_addrs, 15, "the broker to register")
            for topic in (TO_GRPC, FROM_GRPC):
                admin.create_topic(topic, 4, 4)
        yield local
    finally:
        local.stop()


@pytest.mark.timeout(300)
def test_a_4x_producers_messages_reach_a_grpc_consumer_intact(
    cluster: LocalCluster, proxy: ProxyProcess, client: ClientRunner, tmp_path: Path
) -> None:
    spec = {
        "namesrv": cluster.rocketmq_addr,
        "group": "PG_INTEROP",
        "topic": TO_GRPC,
        "messages": [
            {
                "mark": i,
                "body": f"remoting {i}",
                "tags": "From4x",
                "keys": f"rk-{i}",
                "props": {"user": f"u{i}", "color": "blue"},
            }
            for i in range(COUNT)
        ],
    }
    sent = run_producer(rocketmq_remoting_python(), tmp_path / "rmq", spec)
    assert [s.get("error") for s in sent] == [None] * COUNT
    ids = {s["mark"]: s["msg_id"] for s in sent}
    got = json.loads(client(RECEIVE, proxy.addr, TO_GRPC, "cg-interop-4x", str(COUNT)))
    by_id = {m["id"]: m for m in got}
    assert sorted(by_id) == sorted(ids.values()), "the 4.x client's ids, each once"
    for i, msg_id in ids.items():
        m = by_id[msg_id]
        assert (m["body"], m["tag"], m["keys"]) == (f"remoting {i}", "From4x", [f"rk-{i}"])
        assert m["props"] == {"user": f"u{i}", "color": "blue"}


@pytest.mark.timeout(300)
def test_a_grpc_producers_messages_reach_a_4x_push_consumer_intact(
    cluster: LocalCluster, proxy: ProxyProcess, client: ClientRunner, tmp_path: Path
) -> None:
    home = tmp_path / "rmq-consumer"
    home.mkdir()
    script = home / "consumer.py"
    script.write_text(CONSUMER)
    consumer = RocketMQConsumer(
        rocketmq_remoting_python(),
        script,
        cluster.rocketmq_addr,
        "CG_INTEROP_4X",
        FROM_GRPC,
        home=home,
    ).start()
    try:
        # a 4.x group starts at the end of each queue: probes until it consumes
        with Producer("pg-interop-probe", cluster.namesrv_addr) as probe:
            probe_until_consumed(probe, FROM_GRPC, [consumer], timeout_s=60)
        lines = client(SEND, proxy.addr, FROM_GRPC, str(COUNT)).splitlines()
        ids = {row["i"]: row["id"] for row in map(json.loads, lines)}
        assert len(ids) == COUNT

        def arrived() -> dict[str, dict[str, Any]] | None:
            found = {m["id"]: m for m in list(consumer.messages) if m["tags"] == "FromGrpc"}
            return found if len(found) >= COUNT else None

        got = wait_for(arrived, 60, "the gRPC producer's messages at the 4.x consumer")
        assert sorted(got) == sorted(ids.values()), "the gRPC client's ids, each once"
        for i, msg_id in ids.items():
            m = got[msg_id]
            assert (m["body"], m["keys"], m["user"]) == (f"grpc {i}", f"gk-{i}", f"u{i}")
            assert m["reconsume_times"] == 0
    finally:
        consumer.stop()
