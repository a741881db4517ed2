"""RocketMQ 5's unchanged Python client's PushConsumer through the proxy: a failure is
retried with the group's back-off and, after its group's max attempts (retryMaxTimes + 1),
the message is in %DLQ%<group>; ForwardMessageToDeadLetterQueue copies a message there and
settles it; a listener busy for longer than the invisible time is not called twice (the proxy
renews the handle); a new group starts at a fresh queue's first message, or at the end of a
queue with an old history.

The proxy here runs with a 4 s defaultInvisibleTimeMills (2 s renewAheadTimeMillis, 20 s
renewMaxTimeMillis), so that a listener outlasts them quickly."""

from __future__ import annotations

import json
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from ferry.admin import Admin
from ferry.client import ConsumeFromWhere, Message, MessageExt, MessageQueue, Producer, PullConsumer
from ferry.protocol.messages import SubscriptionGroupConfig
from ferry.runtime.launcher import LocalCluster
from ferry.runtime.testing.client_programs import RunningClient
from ferry.runtime.testing.pytest_support import wait_for

pytestmark = pytest.mark.integration

# conftest's fixtures: proxy (a ProxyProcess), client (runs a program with the client's python)
ClientRunner = Callable[..., str]
ProxyProcess = Any
INVISIBLE_MS = 4000
RENEW_MAX_MS = 20_000  # longer than any listener here but the one that outlasts it
TOPICS = (
    "PushDlq",
    "PushForward",
    "PushSlow",
    "PushSlowFail",
    "PushFresh",
    "PushOld",
    "PushSettings",
    "PushForever",
    "PushKilled",
)
FIFO_TOPIC = "PushFifo"  # one queue: its messages in one order


@pytest.fixture(scope="module")
def proxy(cluster: LocalCluster, home: Path, proxy_process: Any) -> Iterator[ProxyProcess]:
    settings = [
        f"defaultInvisibleTimeMills={INVISIBLE_MS}",
        "renewAheadTimeMillis=2000",
        f"renewMaxTimeMillis={RENEW_MAX_MS}",
    ]
    process = proxy_process(cluster.namesrv_addr, home, settings)
    try:
        yield process
    finally:
        process.stop()


@pytest.fixture(scope="module", autouse=True)
def topics(cluster: LocalCluster) -> None:
    with Admin(cluster.namesrv_addr) as admin:
        for topic in TOPICS:
            admin.create_topic(topic, 4, 4)
        admin.create_topic(FIFO_TOPIC, 1, 1)


def send(cluster: LocalCluster, topic: str, count: int, first: int = 0) -> list[str]:
    """Sends with Ferry's SDK; the ids the producer was given."""
    with Producer(f"pg-{topic}", cluster.namesrv_addr) as producer:
        return [
            producer.send(
                Message(
                    topic,
                    f"body {i}".encode(),
                    tags="TagA",
                    keys=[f"key-{i}"],
                    properties={"order": str(i), "color": "blue"},
                )
            ).msg_id
            for i in range(first, first + count)
        ]


def retry_max_times(
    cluster: LocalCluster, group: str, times: int, *, orderly: bool = False
) -> None:
    config = SubscriptionGroupConfig(
        group_name=group, retry_max_times=times, consume_message_orderly=orderly
    )
    with Admin(cluster.namesrv_addr) as admin:
        admin.update_sub_group(config)


def read_dlq(cluster: LocalCluster, group: str, count: int) -> list[MessageExt]:
    """The first `count` messages of %DLQ%<group>, read with Ferry's PullConsumer."""
    queue = MessageQueue(f"%DLQ%{group}", "broker-a", 0)
    dead: list[MessageExt] = []
    with PullConsumer(
        f"dlq-read-{group}", cluster.namesrv_addr, ConsumeFromWhere.FIRST_OFFSET
    ) as r:
        r.assign([queue])

        def read() -> bool:
            dead.extend(r.poll(0.5))
            return len(dead) >= count

        wait_for(read, 60, "the DLQ read")
    return dead


def settled(cluster: LocalCluster, group: str, acked: int) -> Callable[[], bool]:
    def check() -> bool:
        with Admin(cluster.namesrv_addr) as admin:
            rows = admin.pop_progress(group)
        return sum(r.acked for r in rows) >= acked and sum(r.in_flight for r in rows) == 0

    return check


# argv: endpoint, topic, group, failures, seconds; a listener that takes `seconds`, then
# answers FAILURE to a message's first `failures` deliveries and SUCCESS then; each call is a
# JSON line (its start), until stdin ends
PUSH = r"""
import json, sys, time
from rocketmq import (ClientConfiguration, ConsumeResult, Credentials, FilterExpression,
                      MessageListener, PushConsumer)
endpoint, topic, group = sys.argv[1:4]
failures, seconds = int(sys.argv[4]), float(sys.argv[5])

class Listener(MessageListener):
    def consume(self, message):
        print(json.dumps({"id": message.message_id, "attempt": message.delivery_attempt,
                          "at": time.monotonic()}), flush=True)
        time.sleep(seconds)  # wait-ok: the listener's work, as long as the test asks
        failed = message.delivery_attempt <= failures
        return ConsumeResult.FAILURE if failed else ConsumeResult.SUCCESS

consumer = PushConsumer(ClientConfiguration(endpoint, Credentials()), group, Listener(),
                        {topic: FilterExpression()})
consumer.startup()
sys.stdin.read()
consumer.shutdown()
"""


@pytest.mark.timeout(300)
def test_a_push_failure_is_retried_by_the_back_off_then_goes_to_the_groups_dlq(
    cluster: LocalCluster, proxy: ProxyProcess, home: Path
) -> None:
    group = "cg-push-dlq"
    retry_max_times(cluster, group, 1)  # two attempts: the first and one retry
    [msg_id] = send(cluster, "PushDlq", 1)
    run = RunningClient(home, PUSH, proxy.addr, "PushDlq", group, "99", "0")
    try:
        wait_for(lambda: len(run.json_lines()) >= 2, 60, "the message delivered twice")
        [dead] = read_dlq(cluster, group, 1)  # after the second failure's 30 s back-off
        wait_for(settled(cluster, group, 0), 30, "nothing of the group in flight")
    finally:
        assert run.stop() == 0
    calls = run.json_lines()
    assert [(c["id"], c["attempt"]) for c in calls] == [(msg_id, 1), (msg_id, 2)]
    # the first retry waited the back-off's first delay (10 s), not the invisible time (4 s)
    assert calls[1]["at"] - calls[0]["at"] >= 9.5
    assert dead.body == b"body 0"
    assert dead.properties["UNIQ_KEY"] == msg_id
    assert dead.properties["color"] == "blue"
    assert dead.properties["DLQ_ORIGIN_TOPIC"] == "PushDlq"


# argv: endpoint, topic, group; the Settings the proxy answers a push consumer of `group`
# with, through the generated stub
SETTINGS = r"""
import json, sys
import grpc
from rocketmq.grpc_protocol import definition_pb2 as d, service_pb2 as s, service_pb2_grpc
endpoint, topic, group = sys.argv[1:4]
stub = service_pb2_grpc.MessagingServiceStub(grpc.insecure_channel(endpoint))
settings = d.Settings(client_type=d.PUSH_CONSUMER)
settings.subscription.group.name = group
settings.subscription.subscriptions.add(topic=d.Resource(name=topic))
replies = stub.Telemetry(iter([s.TelemetryCommand(settings=settings)]),
                         metadata=[("x-mq-client-id", "probe@settings")], timeout=10)
# drained to its end (the proxy ends it after the client's half-close): a stream left
# unread can hang grpc's client at exit
got = list(replies)[0].settings
print(json.dumps({"max_attempts": got.backoff_policy.max_attempts,
                  "backoff": [n.seconds for n in got.backoff_policy.customized_backoff.next],
                  "fifo": got.subscription.fifo,
                  "long_poll": got.subscription.long_polling_timeout.seconds}))
"""


@pytest.mark.timeout(120)
def test_a_consumers_settings_carry_its_groups_max_attempts_and_back_off(
    cluster: LocalCluster, proxy: ProxyProcess, client: ClientRunner
) -> None:
    retry_max_times(cluster, "cg-settings-3", 3)
    three = json.loads(client(SETTINGS, proxy.addr, "PushSettings", "cg-settings-3"))
    assert three["max_attempts"] == 4
    assert three["backoff"][:3] == [10, 30, 60]  # RocketMQ's retry delays, from level 3
    assert not three["fifo"] and three["long_poll"] == 20
    # a group no broker has a config for: RocketMQ's default, 16 retries
    fresh = json.loads(client(SETTINGS, proxy.addr, "PushSettings", "cg-settings-new"))
    assert fresh["max_attempts"] == 17


# argv: endpoint, topic, group; receives one message with the stub, forwards it to the DLQ,
# then tries to ack it and to forward a forged handle
FORWARD = r"""
import base64, json, sys, time
import grpc
from rocketmq.grpc_protocol import definition_pb2 as d, service_pb2 as s, service_pb2_grpc
endpoint, topic, group = sys.argv[1:4]
stub = service_pb2_grpc.MessagingServiceStub(grpc.insecure_channel(endpoint))
meta = [("x-mq-client-id", "probe@forward")]
route = stub.QueryRoute(s.QueryRouteRequest(topic=d.Resource(name=topic)), metadata=meta, timeout=5)
queue = route.message_queues[0]
got, end = [], time.monotonic() + 30
while not got and time.monotonic() < end:
    req = s.ReceiveMessageRequest(group=d.Resource(name=group), message_queue=queue, batch_size=1)
    req.filter_expression.type = d.TAG
    req.filter_expression.expression = "*"
    req.invisible_duration.seconds = 30
    req.long_polling_timeout.seconds = 2
    got = [r.message for r in stub.ReceiveMessage(req, metadata=meta, timeout=10)
           if r.HasField("message")]
msg = got[0]

def forward(handle):
    req = s.ForwardMessageToDeadLetterQueueRequest(group=d.Resource(name=group),
        topic=d.Resource(name=topic), receipt_handle=handle,
        message_id=msg.system_properties.message_id, delivery_attempt=1,
        max_delivery_attempts=1)
    return stub.ForwardMessageToDeadLetterQueue(req, metadata=meta, timeout=10).status.code

def ack(handle):
    req = s.AckMessageRequest(group=d.Resource(name=group), topic=d.Resource(name=topic))
    req.entries.add(message_id=msg.system_properties.message_id, receipt_handle=handle)
    return stub.AckMessage(req, metadata=meta, timeout=5).status.code

handle = msg.system_properties.receipt_handle
broker = queue.broker.name
forged = "F1" + base64.urlsafe_b64encode(f"{broker}\n1.0.1\n0".encode()).decode().rstrip("=")
out = {"id": msg.system_properties.message_id, "forged": forward(forged),
       "forward": forward(handle), "ack_after": ack(handle), "again": forward(handle)}
print(json.dumps(out))
"""


@pytest.mark.timeout(180)
def test_forward_to_dlq_copies_the_message_with_its_properties_and_settles_it(
    cluster: LocalCluster, proxy: ProxyProcess, client: ClientRunner
) -> None:
    group = "cg-forward"
    [msg_id] = send(cluster, "PushForward", 1)
    out = json.loads(client(FORWARD, proxy.addr, "PushForward", group))
    invalid = 40013  # INVALID_RECEIPT_HANDLE
    assert out["id"] == msg_id
    assert out["forged"] == invalid  # another message's offset under a handle not in flight
    assert out["forward"] == 20000
    assert out["ack_after"] == invalid and out["again"] == invalid  # settled by the forward
    wait_for(settled(cluster, group, 1), 30, "the forwarded message acked, none in flight")
    [dead] = read_dlq(cluster, group, 1)
    assert dead.body == b"body 0" and dead.tags == "TagA" and dead.keys == ["key-0"]
    assert dead.properties["UNIQ_KEY"] == msg_id
    assert (dead.properties["order"], dead.properties["color"]) == ("0", "blue")
    assert dead.properties["DLQ_ORIGIN_TOPIC"] == "PushForward"
    with Admin(cluster.namesrv_addr) as admin:  # one copy: the forged forward made none
        assert admin.max_offset(MessageQueue(f"%DLQ%{group}", "broker-a", 0)) == 1


@pytest.mark.timeout(180)
def test_a_listener_slower_than_the_invisible_time_is_not_called_twice(
    cluster: LocalCluster, proxy: ProxyProcess, home: Path
) -> None:
    group = "cg-push-slow"
    [msg_id] = send(cluster, "PushSlow", 1)
    slow_s = 3 * INVISIBLE_MS / 1000  # 12 s: three invisible times
    run = RunningClient(home, PUSH, proxy.addr, "PushSlow", group, "0", str(slow_s))
    try:
        wait_for(run.json_lines, 60, "the listener called")
        # acked with the handle the client was given, though the proxy renewed it since
        wait_for(settled(cluster, group, 1), 60, "the message acked, none in flight")
    finally:
        assert run.stop() == 0
    assert [(c["id"], c["attempt"]) for c in run.json_lines()] == [(msg_id, 1)]


@pytest.mark.timeout(180)
def test_a_slow_listeners_failure_is_retried_though_its_handle_was_renewed(
    cluster: LocalCluster, proxy: ProxyProcess, home: Path
) -> None:
    group = "cg-push-slow-fail"
    [msg_id] = send(cluster, "PushSlowFail", 1)
    slow_s = 2 * INVISIBLE_MS / 1000  # renewed once at least before the nack
    run = RunningClient(home, PUSH, proxy.addr, "PushSlowFail", group, "1", str(slow_s))
    try:
        # the nack (a change of invisible time by the back-off) went with the renewed handle
        wait_for(lambda: len(run.json_lines()) >= 2, 90, "the message delivered again")
        wait_for(settled(cluster, group, 1), 60, "the second delivery acked, none in flight")
    finally:
        assert run.stop() == 0
    calls = run.json_lines()
    assert [(c["id"], c["attempt"]) for c in calls] == [(msg_id, 1), (msg_id, 2)]
    assert calls[1]["at"] - calls[0]["at"] >= slow_s + 9.5  # the listener, then 10 s back-off


@pytest.mark.timeout(180)
def test_a_listener_that_outlasts_the_max_renew_time_gets_the_message_again(
    cluster: LocalCluster, proxy: ProxyProcess, home: Path
) -> None:
    [msg_id] = send(cluster, "PushForever", 1)
    run = RunningClient(home, PUSH, proxy.addr, "PushForever", "cg-push-forever", "0", "60")
    try:
        wait_for(lambda: len(run.json_lines()) >= 2, 90, "the message delivered again")
    finally:
        run.proc.kill()  # its listener sleeps on: no clean stop
        run.stop()
    first, again = run.json_lines()[:2]
    assert [(first["id"], first["attempt"]), (again["id"], again["attempt"])] == [
        (msg_id, 1),
        (msg_id, 2),
    ]
    # renewed up to renewMaxTimeMillis, then back after its last invisible time
    took = again["at"] - first["at"]
    assert RENEW_MAX_MS / 1000 <= took <= (RENEW_MAX_MS + 3 * INVISIBLE_MS) / 1000 + 5


@pytest.mark.timeout(180)
def test_a_killed_consumers_message_is_not_renewed_and_reaches_another(
    cluster: LocalCluster, proxy: ProxyProcess, home: Path
) -> None:
    group = "cg-push-killed"
    [msg_id] = send(cluster, "PushKilled", 1)
    doomed = RunningClient(home, PUSH, proxy.addr, "PushKilled", group, "0", "60")
    try:
        wait_for(doomed.json_lines, 60, "the first consumer's listener called")
    finally:
        doomed.proc.kill()  # its Telemetry stream ends with it
        doomed.stop()
    killed_at = time.monotonic()
    other = RunningClient(home, PUSH, proxy.addr, "PushKilled", group, "0", "0")
    try:
        wait_for(other.json_lines, 60, "the message at the other consumer")
        got_at = time.monotonic()
        wait_for(settled(cluster, group, 1), 30, "the message acked, none in flight")
    finally:
        assert other.stop() == 0
    assert [(c["id"], c["attempt"]) for c in other.json_lines()] == [(msg_id, 2)]
    # its invisible time (4 s) and the new consumer's start, not renewMaxTimeMillis (20 s)
    assert got_at - killed_at < RENEW_MAX_MS / 1000 - 2


# argv: endpoint, topic, group, count; a SimpleConsumer of a new group: its first receive
# (which places the group) and more until `count` messages came (20 s at most), printed; then
# after a line on stdin receives until one message came
PLACED = r"""
import json, sys, time
from rocketmq import ClientConfiguration, Credentials, FilterExpression, SimpleConsumer
endpoint, topic, group, count = sys.argv[1], sys.argv[2], sys.argv[3], int(sys.argv[4])
consumer = SimpleConsumer(ClientConfiguration(endpoint, Credentials()), group,
                          {topic: FilterExpression()}, await_duration=2)
consumer.startup()
first, end = consumer.receive(16, 20), time.monotonic() + 20
while len(first) < count and time.monotonic() < end:
    first.extend(consumer.receive(16, 20))
print(json.dumps({"first": sorted(m.body.decode() for m in first)}), flush=True)
for m in first:
    consumer.ack(m)
sys.stdin.readline()
got, end = [], time.monotonic() + 30
while not got and time.monotonic() < end:
    got = consumer.receive(16, 20)
print(json.dumps({"then": sorted(m.body.decode() for m in got)}), flush=True)
for m in got:
    consumer.ack(m)
sys.stdin.read()
consumer.shutdown()
"""


@pytest.mark.timeout(180)
def test_a_group_made_after_a_fresh_topics_first_sends_gets_them(
    cluster: LocalCluster, proxy: ProxyProcess, home: Path
) -> None:
    send(cluster, "PushFresh", 3)
    run = RunningClient(home, PLACED, proxy.addr, "PushFresh", "cg-fresh", "3")
    try:
        wait_for(run.json_lines, 60, "the first receive")
    finally:
        assert run.stop() == 0
    assert run.json_lines()[0] == {"first": ["body 0", "body 1", "body 2"]}


@pytest.mark.timeout(180)
def test_a_group_made_on_a_topic_with_an_old_history_starts_at_its_end(
    cluster: LocalCluster, proxy: ProxyProcess, home: Path
) -> None:
    send(cluster, "PushOld", 3)
    with Admin(cluster.namesrv_addr) as admin:
        # the 3 messages are older than 1 ms: no longer "in memory"
        admin.update_broker_config({"popInitFreshMillis": "1"})
        try:
            run = RunningClient(home, PLACED, proxy.addr, "PushOld", "cg-old", "0")
            try:
                wait_for(run.json_lines, 60, "the first receive")
                send(cluster, "PushOld", 1, first=3)
                run.tell("go")
                wait_for(lambda: len(run.json_lines()) >= 2, 60, "the second receive")
            finally:
                assert run.stop() == 0
        finally:
            admin.update_broker_config({"popInitFreshMillis": str(30 * 60 * 1000)})
    assert run.json_lines() == [{"first": []}, {"then": ["body 3"]}]


# argv: endpoint, topic, group; a listener failing every call for "body 0" and taking 1 s for
# the others; each call a JSON line (body, the client's delivery attempt), until stdin ends
FIFO = r"""
import json, sys, time
from rocketmq import (ClientConfiguration, ConsumeResult, Credentials, FilterExpression,
                      MessageListener, PushConsumer)
endpoint, topic, group = sys.argv[1:4]

class Listener(MessageListener):
    def consume(self, message):
        body = message.body.decode()
        print(json.dumps({"body": body, "attempt": message.delivery_attempt}), flush=True)
        if body == "body 0":
            return ConsumeResult.FAILURE
        time.sleep(1)  # wait-ok: the listener's work, so later messages wait behind it
        return ConsumeResult.SUCCESS

consumer = PushConsumer(ClientConfiguration(endpoint, Credentials()), group, Listener(),
                        {topic: FilterExpression()})
consumer.startup()
print(json.dumps({"fifo": consumer.fifo}), flush=True)
sys.stdin.read()
consumer.shutdown()
"""


@pytest.mark.timeout(240)
def test_a_fifo_group_gets_a_queue_in_order_and_its_failure_ends_in_the_dlq(
    cluster: LocalCluster, proxy: ProxyProcess, home: Path
) -> None:
    group = "cg-fifo"
    retry_max_times(cluster, group, 1, orderly=True)  # two attempts, then the DLQ
    [first] = send(cluster, FIFO_TOPIC, 1)
    run = RunningClient(home, FIFO, proxy.addr, FIFO_TOPIC, group)
    try:
        wait_for(lambda: any("body" in c for c in run.json_lines()), 60, "the first call")
        # sent while "body 0" is retried by the client (10 s back-off): an orderly pop gives
        # nothing more from the queue until "body 0" is settled
        send(cluster, FIFO_TOPIC, 2, first=1)
        wait_for(lambda: len(run.json_lines()) >= 5, 90, "every message consumed")
        [dead] = read_dlq(cluster, group, 1)
        wait_for(settled(cluster, group, 0), 30, "nothing of the group in flight")
    finally:
        assert run.stop() == 0
    lines = run.json_lines()
    assert lines[0] == {"fifo": True}  # the Settings said so
    assert [c["body"] for c in lines[1:]] == ["body 0", "body 0", "body 1", "body 2"]
    assert dead.properties["UNIQ_KEY"] == first and dead.body == b"body 0"
