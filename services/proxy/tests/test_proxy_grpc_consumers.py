"""RocketMQ 5's unchanged Python client consuming through the proxy (Ferry's pop behind it):
messages sent with Ferry's SDK reach a SimpleConsumer intact and are acked; a message not
acked, or whose invisible time was shortened, comes back with delivery_attempt 2; a tag
filter holds; a PushConsumer's SUCCESS is acked on the broker."""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from ferry.admin import Admin
from ferry.client import Message, Producer
from ferry.runtime.launcher import LocalCluster
from ferry.runtime.testing.client_programs import RunningClient
from ferry.runtime.testing.pytest_support import wait_for

pytestmark = pytest.mark.integration

# conftest's fixtures: proxy (a ProxyProcess), client (runs a program with the client's python)
ClientRunner = Callable[..., str]
ProxyProcess = Any

TOPICS = (
    "ProxyRecv",
    "ProxyRedeliver",
    "ProxyChange",
    "ProxyTags",
    "ProxySql",
    "ProxyPush",
    "ProxyHandles",
    "ProxyPushRetry",
)

# argv: endpoint, topic, group, filter (a tag expression, or "sql:" and an SQL92 one), count,
# mode (ack | redeliver | change).
# Receives until `count` messages came (40 s at most), prints them as one JSON object.
SIMPLE = r"""
import json, sys, time
from rocketmq import ClientConfiguration, Credentials, FilterExpression, SimpleConsumer
from rocketmq.grpc_protocol import FilterType
endpoint, topic, group, expr, count, mode = sys.argv[1:7]
count = int(count)
if expr.startswith("sql:"):
    expression = FilterExpression(expr[4:], FilterType.SQL)
else:
    expression = FilterExpression(expr)

def seen(m):
    return {"id": m.message_id, "body": m.body.decode(), "tag": m.tag, "keys": sorted(m.keys),
            "props": dict(m.properties), "attempt": m.delivery_attempt}

def receive_until(consumer, n, invisible, seconds=40):
    got, end = [], time.monotonic() + seconds
    while len(got) < n and time.monotonic() < end:
        got.extend(consumer.receive(16, invisible))
    return got

consumer = SimpleConsumer(ClientConfiguration(endpoint, Credentials()), group,
                          {topic: expression}, await_duration=2)
consumer.startup()
out = {}
try:
    if mode == "ack":
        got = receive_until(consumer, count, 20)
        out["got"] = [seen(m) for m in got]
        for m in got:
            consumer.ack(m)
        out["after_ack"] = [seen(m) for m in consumer.receive(16, 20)]
    elif mode == "redeliver":
        first = receive_until(consumer, 1, 2)
        out["first"] = [seen(m) for m in first]
        again = receive_until(consumer, 1, 20)
        out["again"] = [seen(m) for m in again]
        for m in again:
            consumer.ack(m)
    elif mode == "change":
        first = receive_until(consumer, 1, 60)
        out["first"] = [seen(m) for m in first]
        for m in first:
            consumer.change_invisible_duration(m, 2)
        again = receive_until(consumer, 1, 20)
        out["again"] = [seen(m) for m in again]
        for m in again:
            consumer.ack(m)
finally:
    consumer.shutdown()
print(json.dumps(out))
"""

# argv: endpoint, topic, group, attempts failed; a listener answering FAILURE to a message's
# first `attempts failed` deliveries and SUCCESS then, printing each delivery as a JSON line,
# until a line comes on stdin
PUSH = r"""
import json, sys
from rocketmq import (ClientConfiguration, ConsumeResult, Credentials, FilterExpression,
                      MessageListener, PushConsumer)
endpoint, topic, group, failed = sys.argv[1], sys.argv[2], sys.argv[3], int(sys.argv[4])

class Listener(MessageListener):
    def consume(self, message):
        attempt = message.delivery_attempt
        print(json.dumps({"id": message.message_id, "attempt": attempt}), flush=True)
        return ConsumeResult.FAILURE if attempt <= failed else ConsumeResult.SUCCESS

consumer = PushConsumer(ClientConfiguration(endpoint, Credentials()), group, Listener(),
                        {topic: FilterExpression()})
consumer.startup()
print("started", flush=True)
sys.stdin.readline()
consumer.shutdown()
"""


@pytest.fixture(scope="module", autouse=True)
def topics(cluster: LocalCluster) -> None:
    with Admin(cluster.namesrv_addr) as admin:
        for topic in TOPICS:
            admin.create_topic(topic, 4, 4)


def send(
    cluster: LocalCluster, topic: str, count: int, tags: tuple[str, ...] = ("TagA",)
) -> list[str]:
    """Sends with Ferry's SDK; the ids the producer was given."""
    ids = []
    with Producer(f"pg-{topic}", cluster.namesrv_addr) as producer:
        for i in range(count):
            msg = Message(
                topic,
                f"body {i}".encode(),
                tags=tags[i % len(tags)],
                keys=[f"key-{i}", f"alt-{i}"],
                properties={"order": str(i), "color": "blue"},
            )
            ids.append(producer.send(msg).msg_id)
    return ids


@pytest.mark.timeout(300)
def test_simple_consumer_receives_ferry_messages_intact_and_acks_them(
    cluster: LocalCluster, proxy: ProxyProcess, client: ClientRunner
) -> None:
    ids = send(cluster, "ProxyRecv", 5)
    out = json.loads(client(SIMPLE, proxy.addr, "ProxyRecv", "cg-recv", "*", "5", "ack"))
    got = {m["id"]: m for m in out["got"]}
    assert sorted(got) == sorted(ids)
    for i, msg_id in enumerate(ids):
        m = got[msg_id]
        assert m["body"] == f"body {i}"
        assert m["tag"] == "TagA"
        assert m["keys"] == sorted([f"key-{i}", f"alt-{i}"])
        assert m["props"] == {"order": str(i), "color": "blue"}
        assert m["attempt"] == 1
    assert out["after_ack"] == []  # acked: none comes back


@pytest.mark.timeout(300)
def test_a_message_not_acked_comes_back_with_delivery_attempt_2(
    cluster: LocalCluster, proxy: ProxyProcess, client: ClientRunner
) -> None:
    [msg_id] = send(cluster, "ProxyRedeliver", 1)
    out = json.loads(client(SIMPLE, proxy.addr, "ProxyRedeliver", "cg-redo", "*", "1", "redeliver"))
    assert [(m["id"], m["attempt"]) for m in out["first"]] == [(msg_id, 1)]
    assert [(m["id"], m["attempt"], m["body"]) for m in out["again"]] == [(msg_id, 2, "body 0")]


@pytest.mark.timeout(300)
def test_change_invisible_duration_brings_a_message_back_sooner(
    cluster: LocalCluster, proxy: ProxyProcess, client: ClientRunner
) -> None:
    [msg_id] = send(cluster, "ProxyChange", 1)
    # received invisible for 60 s, changed to 2 s: it is back well within the 40 s it is given
    out = json.loads(client(SIMPLE, proxy.addr, "ProxyChange", "cg-change", "*", "1", "change"))
    assert [(m["id"], m["attempt"]) for m in out["first"]] == [(msg_id, 1)]
    assert [(m["id"], m["attempt"]) for m in out["again"]] == [(msg_id, 2)]


@pytest.mark.timeout(300)
def test_a_tag_filter_lets_only_its_tag_through(
    cluster: LocalCluster, proxy: ProxyProcess, client: ClientRunner
) -> None:
    ids = send(cluster, "ProxyTags", 6, tags=("TagA", "TagB"))
    out = json.loads(client(SIMPLE, proxy.addr, "ProxyTags", "cg-tags", "TagA", "3", "ack"))
    assert sorted(m["id"] for m in out["got"]) == sorted(ids[0::2])
    assert {m["tag"] for m in out["got"]} == {"TagA"}
    assert out["after_ack"] == []  # the TagB ones never come


@pytest.mark.timeout(300)
def test_an_sql92_filter_selects_by_property(
    cluster: LocalCluster, proxy: ProxyProcess, client: ClientRunner
) -> None:
    ids = send(cluster, "ProxySql", 6)
    sql = "sql:order IS NOT NULL AND order > 2"
    out = json.loads(client(SIMPLE, proxy.addr, "ProxySql", "cg-sql", sql, "3", "ack"))
    assert sorted(m["id"] for m in out["got"]) == sorted(ids[3:])
    assert out["after_ack"] == []  # orders 0..2 never come


@pytest.mark.timeout(300)
def test_push_consumer_success_is_acked(
    cluster: LocalCluster, proxy: ProxyProcess, home: Path
) -> None:
    ids = send(cluster, "ProxyPush", 4)
    run = RunningClient(home, PUSH, proxy.addr, "ProxyPush", "cg-push", "0")
    try:
        wait_for(lambda: len(run.json_lines()) >= 4, 60, "the 4 messages at the listener")
        with Admin(cluster.namesrv_addr) as admin:

            def all_acked() -> bool:
                rows = admin.pop_progress("cg-push")
                return sum(r.acked for r in rows) == 4 and sum(r.in_flight for r in rows) == 0

            wait_for(all_acked, 30, "the broker to count the 4 acks, none in flight")
    finally:
        assert run.stop() == 0
    got = run.json_lines()
    assert sorted(m["id"] for m in got) == sorted(ids)  # each once: none delivered again
    assert all(m["attempt"] == 1 for m in got)


@pytest.mark.timeout(300)
def test_a_push_consumer_failure_is_delivered_again_after_the_back_off(
    cluster: LocalCluster, proxy: ProxyProcess, home: Path
) -> None:
    [msg_id] = send(cluster, "ProxyPushRetry", 1)
    run = RunningClient(home, PUSH, proxy.addr, "ProxyPushRetry", "cg-push-retry", "1")
    try:
        # the first retry waits the back-off's first delay (10 s), sent in the Settings reply
        wait_for(lambda: len(run.json_lines()) >= 2, 60, "the message delivered a second time")
        with Admin(cluster.namesrv_addr) as admin:

            def acked() -> bool:
                rows = admin.pop_progress("cg-push-retry")
                return sum(r.in_flight for r in rows) == 0 and sum(r.acked for r in rows) >= 1

            wait_for(acked, 30, "the second delivery acked, none in flight")
    finally:
        assert run.stop() == 0
    assert run.json_lines() == [{"id": msg_id, "attempt": 1}, {"id": msg_id, "attempt": 2}]


# argv: endpoint, topic; the generated stub's view of a receive and of bad receipt handles
HANDLES = r"""
import base64, json, sys, time
import grpc
from rocketmq.grpc_protocol import definition_pb2 as d, service_pb2 as s, service_pb2_grpc
endpoint, topic = sys.argv[1], sys.argv[2]
stub = service_pb2_grpc.MessagingServiceStub(grpc.insecure_channel(endpoint))
meta = [("x-mq-client-id", "probe@2")]
out = {}
route = stub.QueryRoute(s.QueryRouteRequest(topic=d.Resource(name=topic)), metadata=meta, timeout=5)
queue = route.message_queues[0]

def receive(group, poll_s, timeout_s):
    req = s.ReceiveMessageRequest(group=d.Resource(name=group), message_queue=queue, batch_size=8)
    req.filter_expression.type = d.TAG
    req.filter_expression.expression = "*"
    req.invisible_duration.seconds = 30
    req.long_polling_timeout.seconds = poll_s
    began = time.monotonic()
    replies = list(stub.ReceiveMessage(req, metadata=meta, timeout=timeout_s))
    return replies, time.monotonic() - began

def ack(group, handle):
    req = s.AckMessageRequest(group=d.Resource(name=group), topic=d.Resource(name=topic))
    req.entries.add(message_id="x", receipt_handle=handle)
    return stub.AckMessage(req, metadata=meta, timeout=5).status.code

def change(group, handle, seconds):
    req = s.ChangeInvisibleDurationRequest(group=d.Resource(name=group),
        topic=d.Resource(name=topic), receipt_handle=handle, message_id="x")
    req.invisible_duration.seconds = seconds
    return stub.ChangeInvisibleDuration(req, metadata=meta, timeout=5).status.code

def renew(group, handle, seconds):
    req = s.ChangeInvisibleDurationRequest(group=d.Resource(name=group),
        topic=d.Resource(name=topic), receipt_handle=handle, message_id="x")
    req.invisible_duration.seconds = seconds
    reply = stub.ChangeInvisibleDuration(req, metadata=meta, timeout=5)
    return reply.status.code, reply.receipt_handle

replies, took = receive("cg-handles", 2, 10)
kinds = [r.WhichOneof("content") for r in replies]
out["kinds"] = kinds
out["first_status"] = replies[0].status.code
handle = next(r.message.system_properties.receipt_handle for r in replies if r.HasField("message"))
broker = queue.broker.name
forged = "F1" + base64.urlsafe_b64encode(f"{broker}\nnot-a-handle".encode()).decode().rstrip("=")
out["garbled"] = [ack("cg-handles", "zzz"), ack("cg-handles", "F1!!!"), change("cg-handles", "", 5)]
out["forged"] = [ack("cg-handles", forged), change("cg-handles", forged, 5)]
out["other_broker"] = ack("cg-handles", "F1" + base64.urlsafe_b64encode(b"nobroker\nh").decode())
out["bad_invisible"] = change("cg-handles", handle, 0)
out["other_group"] = ack("cg-other", handle)
out["renew"], renewed = renew("cg-handles", handle, 30)
out["renewed_differs"] = renewed != handle
out["ack_old"] = ack("cg-handles", handle)
out["ack"] = ack("cg-handles", renewed)
out["ack_again"] = ack("cg-handles", renewed)
# nothing left: a receive asking a 20 s long poll with a 4 s deadline ends in time
empty, took = receive("cg-handles", 20, 4)
out["empty"] = [r.status.code for r in empty]
out["empty_took"] = took
print(json.dumps(out))
"""


@pytest.mark.timeout(300)
def test_bad_receipt_handles_get_a_status_and_a_receive_beats_its_deadline(
    cluster: LocalCluster, proxy: ProxyProcess, client: ClientRunner
) -> None:
    send(cluster, "ProxyHandles", 1)
    seen = json.loads(client(HANDLES, proxy.addr, "ProxyHandles"))
    assert seen["kinds"] == ["status", "message", "delivery_timestamp"]
    assert seen["first_status"] == 20000
    invalid = 40013  # INVALID_RECEIPT_HANDLE
    assert seen["garbled"] == [invalid, invalid, invalid]
    assert seen["forged"] == [invalid, invalid]
    assert seen["other_broker"] == invalid
    assert seen["bad_invisible"] == 40011  # ILLEGAL_INVISIBLE_TIME
    assert seen["other_group"] == invalid
    assert seen["renew"] == 20000 and seen["renewed_differs"]
    assert seen["ack_old"] == invalid  # a change of invisible time replaces the handle
    assert seen["ack"] == 20000
    assert seen["ack_again"] == invalid  # acked already
    assert seen["empty"] == [40401]  # MESSAGE_NOT_FOUND: no messages, a success to the client
    assert seen["empty_took"] < 4
    assert proxy.proc.poll() is None


# argv: endpoint, topic, group; a SimpleConsumer running until a line comes on stdin
RUNNING = r"""
import sys
from rocketmq import ClientConfiguration, Credentials, FilterExpression, SimpleConsumer
endpoint, topic, group = sys.argv[1:4]
consumer = SimpleConsumer(ClientConfiguration(endpoint, Credentials()), group,
                          {topic: FilterExpression("TagA")}, await_duration=1)
consumer.startup()
print("started", flush=True)
sys.stdin.readline()
consumer.shutdown()
"""


@pytest.mark.timeout(300)
def test_a_simple_consumer_is_a_member_of_its_group_until_it_stops(
    cluster: LocalCluster, proxy: ProxyProcess, home: Path
) -> None:
    run = RunningClient(home, RUNNING, proxy.addr, "ProxyRecv", "cg-member")
    with Admin(cluster.namesrv_addr) as admin:

        def members() -> list[Any]:
            found = admin.consumer_connections("cg-member").values()
            return [(c, reply) for reply in found for c in reply.connections]

        try:
            seen = wait_for(members, 30, "the client in the group's connections")
        finally:
            assert run.stop() == 0
        connection, reply = seen[0]
        assert connection.language == "PYTHON"
        assert reply.consume_type == "POP"
        assert [(s.topic, s.expression) for s in reply.subscriptions] == [("ProxyRecv", "TagA")]
        wait_for(lambda: not members(), 30, "the client gone from the group's connections")
