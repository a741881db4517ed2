"""Several proxies in front of one cluster, as RocketMQ 5 deploys them: what one proxy hands
out, another settles. A message sent through proxy A is received through proxy B, and the
receipt handle B gave is acked through proxy A (the handle names the broker; no proxy keeps
state of its own), after which the message does not come back."""

from __future__ import annotations

import json
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from ferry.admin import Admin
from ferry.runtime.launcher import LocalCluster

pytestmark = pytest.mark.integration

ClientRunner = Callable[..., str]
TOPIC = "ProxyStateless"

# argv: endpoint A, endpoint B, topic, group. Sends 3 through A (the official Producer);
# receives them through B (the official SimpleConsumer, invisible 3 s); acks them through A
# with the generated stub; receives through B again past the invisible time. One JSON object.
PROGRAM = r"""
import json, sys, time
import grpc
from rocketmq import ClientConfiguration, Credentials, FilterExpression, Message, Producer
from rocketmq import SimpleConsumer
from rocketmq.grpc_protocol import definition_pb2 as d, service_pb2 as s, service_pb2_grpc
a, b, topic, group = sys.argv[1:5]
out = {"sent": [], "got": [], "acks": [], "again": []}
producer = Producer(ClientConfiguration(a, Credentials()), (topic,))
producer.startup()
for i in range(3):
    msg = Message()
    msg.topic, msg.body, msg.tag = topic, f"m{i}".encode(), "T"
    out["sent"].append(producer.send(msg).message_id)
producer.shutdown()
consumer = SimpleConsumer(ClientConfiguration(b, Credentials()), group,
                          {topic: FilterExpression()}, await_duration=2)
consumer.startup()
got, end = [], time.monotonic() + 40
while len(got) < 3 and time.monotonic() < end:
    got.extend(consumer.receive(16, 3))
out["got"] = [m.message_id for m in got]
stub = service_pb2_grpc.MessagingServiceStub(grpc.insecure_channel(a))
req = s.AckMessageRequest()
req.group.name, req.topic.name = group, topic
for m in got:
    req.entries.add(message_id=m.message_id, receipt_handle=m.receipt_handle)
reply = stub.AckMessage(req, metadata=[("x-mq-client-id", "stateless@1")], timeout=10)
out["acks"] = [reply.status.code] + [e.status.code for e in reply.entries]
time.sleep(4)  # wait-ok: past the 3 s invisible time, for what would come back
end = time.monotonic() + 4
while time.monotonic() < end:
    out["again"].extend(m.message_id for m in consumer.receive(16, 3))
consumer.shutdown()
print(json.dumps(out))
"""


@pytest.fixture(scope="module")
def proxies(
    cluster: LocalCluster, home: Path, proxy_process: type[Any]
) -> Iterator[tuple[Any, Any]]:
    with Admin(cluster.namesrv_addr) as admin:
        admin.create_topic(TOPIC, 4, 4)
    a = proxy_process(cluster.namesrv_addr, home / "a")
    try:
        b = proxy_process(cluster.namesrv_addr, home / "b")
        try:
            yield a, b
        finally:
            b.stop()
    finally:
        a.stop()


@pytest.mark.timeout(180)
def test_what_one_proxy_hands_out_another_settles(
    proxies: tuple[Any, Any], client: ClientRunner
) -> None:
    a, b = proxies
    out = json.loads(client(PROGRAM, a.addr, b.addr, TOPIC, "cg-stateless"))
    assert sorted(out["got"]) == sorted(out["sent"])
    assert out["acks"] == [20000, 20000, 20000, 20000], "acked through the other proxy"
    assert out["again"] == [], "an acked message came back"
