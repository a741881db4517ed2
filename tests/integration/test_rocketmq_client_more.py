"""More of issue 40 §3 and §5 with the unchanged `rocketmq` 0.4.4 client (rocketmq-client-cpp
inside) run from its own venv: a group member that leaves hands its queues over, the orderly
listener keeps each queue's order, broadcasting gives every member everything, a message that
always fails ends in %DLQ%group, the pull consumer pulls by queue from offsets, what its
producer sends reaches Ferry's push consumer intact, and on a secure cluster its signed
requests are checked against Ferry's users and ACLs."""

from __future__ import annotations

import json
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
from consume_support import Received
from rocketmq_client_support import (
    QUEUES,
    RocketMQConsumer,
    RocketMQPuller,
    committed_to_the_end,
    consumer_factory,
    consumer_ids,
    new_topic,
    on_queue,
    probe_until_consumed,
    rocketmq_cluster,
    run_producer,
    wait_for,
)
from security_support import ROOT, start_secure

from ferry.admin import Admin
from ferry.client import (
    ConsumeFromWhere,
    Credentials,
    Message,
    MessageExt,
    MessageQueue,
    Producer,
    PullConsumer,
    PushConsumer,
)
from ferry.protocol.messages import GetRouteInfoRequest, RouteInfoReply, SubscriptionGroupConfig
from ferry.protocol.rocketmq.codes import RequestCode
from ferry.protocol.rpc import BlockingClient
from ferry.runtime.launcher import LocalCluster
from ferry.runtime.testing.client_venvs import rocketmq_remoting_python
from ferry.runtime.testing.pytest_support import holds_for
from ferry.runtime.testing.remoting_client import RemotingClient

pytestmark = pytest.mark.integration

BROKER = "broker-a"
FIRST = ConsumeFromWhere.FIRST_OFFSET


@pytest.fixture(scope="module")
def venv_python() -> Path:
    return rocketmq_remoting_python()


@pytest.fixture(scope="module")
def cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[LocalCluster]:
    with rocketmq_cluster(tmp_path_factory.mktemp("rocketmq-more")) as local:
        yield local


@pytest.fixture(scope="module")
def producer(cluster: LocalCluster) -> Iterator[Producer]:
    with Producer("pg-rocketmq-more", cluster.namesrv_addr) as p:
        yield p


@pytest.fixture
def consumers(
    venv_python: Path, cluster: LocalCluster, tmp_path: Path
) -> Iterator[Callable[..., RocketMQConsumer]]:
    with consumer_factory(venv_python, cluster, tmp_path) as make:
        yield make


def test_when_a_member_leaves_the_other_takes_over_its_queues_and_consumes_each_once(
    cluster: LocalCluster, producer: Producer, consumers: Callable[..., RocketMQConsumer]
) -> None:
    topic = new_topic(cluster, "RmqLeave")
    group = "cg-rmq-leave"
    stays = consumers(group, topic).start()
    leaves = consumers(group, topic).start()
    with RemotingClient(cluster.broker_rocketmq_addr) as door:
        wait_for(lambda: len(consumer_ids(door, group)) == 2, 30, "both members registered")
        probe_until_consumed(producer, topic, [stays, leaves])
        # what was sent so far is committed: the queues handed over resume where they were
        wait_for(lambda: committed_to_the_end(door, group, topic), 30, "offsets committed")
        theirs = {m["queue_id"] for m in leaves.messages}
        assert theirs and len(theirs) < QUEUES  # the two had split the queues
        leaves.stop()  # shutdown: UNREGISTER_CLIENT, and the broker tells the group
        left = time.monotonic()
        assert len(consumer_ids(door, group)) == 1
    stays.messages.clear()
    bodies = [f"after-{i}" for i in range(40)]
    for i, body in enumerate(bodies):
        producer.send(Message(topic, body, tags="a"), on_queue, i % QUEUES)
    wanted = set(bodies)

    def got() -> list[dict[str, Any]]:
        return [m for m in list(stays.messages) if m["body"] in wanted]

    wait_for(lambda: {m["body"] for m in got()} == wanted, 30, "the handed-over queues")
    taken_over = time.monotonic() - left
    # a second delivery would follow close behind
    holds_for(lambda: sorted(m["body"] for m in got()) == sorted(bodies), 0.5, "each once")
    assert {m["queue_id"] for m in got()} == set(range(QUEUES))
    # NOTIFY_CONSUMER_IDS_CHANGED: the client rebalances at once, not at its 10 s round
    assert taken_over < 9, f"took {taken_over:.1f} s"


def test_the_orderly_listener_keeps_each_queue_s_order_under_its_locks(
    cluster: LocalCluster,
    producer: Producer,
    consumers: Callable[..., RocketMQConsumer],
    venv_python: Path,
    tmp_path: Path,
) -> None:
    topic = new_topic(cluster, "RmqOrderly")
    group = "cg-rmq-orderly"
    consumer = consumers(group, topic, orderly=True, sleep_ms=5, explicit_status=True)
    consumer.fail_keys = ["k-1-3"]  # fails once: the queue waits, then it comes again first
    consumer.start()
    probe_until_consumed(producer, topic, [consumer])
    consumer.messages.clear()
    # the client's own hash selector: queue = arg % queue count
    spec = {
        "namesrv": cluster.rocketmq_addr,
        "topic": topic,
        "messages": [
            {"mark": f"{k}-{i}", "body": f"ord-{k}-{i}", "keys": f"k-{k}-{i}", "orderly_arg": k + 4}
            for i in range(10)
            for k in range(QUEUES)
        ],
    }
    sent = run_producer(venv_python, tmp_path / "producer", spec)
    assert [line.get("status") for line in sent] == [0] * len(spec["messages"]), sent
    wanted = {m["body"] for m in spec["messages"]}
    wait_for(lambda: wanted <= set(consumer.bodies()), 40, "the orderly messages were not consumed")
    holds_for(  # a stray second delivery would follow close behind
        lambda: (
            len([m for m in consumer.messages if m["body"] in wanted and not m["failed"]])
            == len(wanted)
        ),
        0.5,
        "each orderly message consumed once",
    )
    by_queue: dict[int, list[str]] = {}
    for m in consumer.messages:
        if m["body"] in wanted:
            by_queue.setdefault(m["queue_id"], []).append(m["body"])
    assert sorted(by_queue) == list(range(QUEUES))
    for k in range(QUEUES):
        expected = [f"ord-{k}-{i}" for i in range(10)]
        if k == 1:
            expected.insert(4, "ord-1-3")  # delivered again before anything after it
        assert by_queue[k] == expected
    # LOCK_BATCH_MQ: the consumer holds its queues' locks, so another client gets none
    with RemotingClient(cluster.broker_rocketmq_addr) as door:
        asked = {
            "consumerGroup": group,
            "clientId": "127.0.0.1@intruder",
            "mqSet": [{"topic": topic, "brokerName": BROKER, "queueId": q} for q in range(4)],
        }
        got = door.call(RequestCode.LOCK_BATCH_MQ, body=json.dumps(asked).encode())
        assert got.code == 0 and json.loads(got.body)["lockOKMQSet"] == []


def test_broadcasting_gives_every_member_every_message(
    cluster: LocalCluster, producer: Producer, consumers: Callable[..., RocketMQConsumer]
) -> None:
    topic = new_topic(cluster, "RmqBroadcast")
    group = "cg-rmq-broadcast"
    members = [consumers(group, topic, broadcasting=True).start() for _ in range(2)]
    probe_until_consumed(producer, topic, members)
    for m in members:
        m.messages.clear()
    bodies = [f"all-{i}" for i in range(20)]
    for i, body in enumerate(bodies):
        producer.send(Message(topic, body), on_queue, i % QUEUES)
    wanted = set(bodies)
    for m in members:
        wait_for(lambda m=m: wanted <= set(m.bodies()), 30, "a member missed messages")
    holds_for(
        lambda: all(
            sorted(b for b in m.bodies() if b in wanted) == sorted(bodies) for m in members
        ),
        0.5,
        "every member got every message once",
    )


def test_a_message_that_always_fails_ends_in_the_group_s_dlq_after_retry_max_times(
    cluster: LocalCluster, producer: Producer, consumers: Callable[..., RocketMQConsumer]
) -> None:
    topic = new_topic(cluster, "RmqDead")
    group = "cg-rmq-dead"
    # the C++ client sends no maxReconsumeTimes with its send-backs: the group's setting rules
    with Admin(cluster.namesrv_addr) as admin:
        admin.update_sub_group(SubscriptionGroupConfig(group_name=group, retry_max_times=2))
    consumer = consumers(group, topic, fail_always=["poison"], explicit_status=True).start()
    probe_until_consumed(producer, topic, [consumer])
    sent = producer.send(Message(topic, "poison-body", tags="TagP", keys=["poison"]))
    dlq = MessageQueue(f"%DLQ%{group}", BROKER, 0)

    def in_dlq() -> bool:
        with Admin(cluster.namesrv_addr) as admin:
            try:
                return admin.max_offset(dlq) == 1
            except Exception:  # noqa: BLE001 - the DLQ topic does not exist yet
                return False

    wait_for(in_dlq, 40, "the message in the DLQ")

    def poison() -> list[dict[str, Any]]:
        return [m for m in list(consumer.messages) if m["body"] == "poison-body"]

    # a delivery after the DLQ would come within the 1 s delay
    holds_for(lambda: len(poison()) == 3, 1.5, "no delivery after the DLQ")
    deliveries = poison()
    assert [m["reconsume_times"] for m in deliveries] == [0, 1, 2]
    assert {m["id"] for m in deliveries} == {sent.msg_id}
    with PullConsumer("cg-rmq-dlq-reader", cluster.namesrv_addr, FIRST) as reader:
        reader.assign([dlq])
        dead: list[MessageExt] = []
        wait_for(lambda: bool(dead.extend(reader.poll(0.5)) or dead), 20, "the DLQ read")
    (msg,) = dead
    assert msg.body == b"poison-body" and msg.keys == ["poison"] and msg.tags == "TagP"
    assert msg.msg_id == sent.msg_id
    assert msg.properties["DLQ_ORIGIN_TOPIC"] == topic
    assert msg.properties["DLQ_ORIGIN_MESSAGE_ID"] == sent.msg_id


def test_the_pull_consumer_pulls_each_queue_from_the_offsets_it_keeps(
    cluster: LocalCluster, producer: Producer, venv_python: Path, tmp_path: Path
) -> None:
    topic = new_topic(cluster, "RmqPull")
    first = {}
    for q in range(QUEUES):
        for i in range(3):
            first[f"p-{q}-{i}"] = producer.send(Message(topic, f"p-{q}-{i}", tags="T"), on_queue, q)
    puller = RocketMQPuller(venv_python, tmp_path, cluster.rocketmq_addr, "cg-rmq-pull", topic)
    try:
        one = puller.round()
        got = {m["body"]: m for m in one["messages"]}
        assert sorted(got) == sorted(first)
        for body, result in first.items():
            assert got[body]["queue_id"] == result.queue.queue_id
            assert got[body]["queue_offset"] == result.queue_offset
            assert got[body]["id"] == result.msg_id and got[body]["tags"] == "T"
        assert one["offsets"] == {str(q): 3 for q in range(QUEUES)}
        later = {f"p-{q}-3": producer.send(Message(topic, f"p-{q}-3"), on_queue, q) for q in (0, 2)}
        two = puller.round()
        assert sorted(m["body"] for m in two["messages"]) == sorted(later)  # from its offsets
        assert two["offsets"] == {"0": 4, "1": 3, "2": 4, "3": 3}
        three = puller.round()  # queue 1 from offset 1 again
        assert [m["body"] for m in three["messages"]] == ["p-1-1", "p-1-2"]
        assert three["offsets"]["1"] == 3
    finally:
        puller.close()


def test_a_rocketmq_producer_s_message_reaches_ferry_s_push_consumer_intact(
    cluster: LocalCluster, venv_python: Path, tmp_path: Path
) -> None:
    topic = new_topic(cluster, "RmqToFerry")
    received = Received()
    consumer = PushConsumer("cg-ferry-from-rmq", cluster.namesrv_addr, consume_from=FIRST)
    consumer.subscribe(topic)
    consumer.register_listener(received.listener())
    spec = {
        "namesrv": cluster.rocketmq_addr,
        "topic": topic,
        "messages": [
            {
                "mark": f"m{i}",
                "body": f"from-rmq-{i}",
                "tags": "TagR",
                "keys": f"key-{i}",
                "props": {"user": f"u{i}", "color": "red"},
                "orderly_arg": i,  # on queue i % 4, to compare offsets
            }
            for i in range(6)
        ],
    }
    with consumer:
        before_ms = time.time() * 1000
        sent = {line["mark"]: line for line in run_producer(venv_python, tmp_path, spec)}
        after_ms = time.time() * 1000
        assert all(line.get("status") == 0 for line in sent.values()), sent
        wait_for(lambda: received.unique() == 6, 30, "Ferry's consumer got them all")
        holds_for(lambda: received.duplicates() == 0, 0.5, "no duplicate delivery")
    by_body = {m.body: m for m in received.msgs}
    for i in range(6):
        msg, line = by_body[f"from-rmq-{i}".encode()], sent[f"m{i}"]
        assert msg.topic == topic
        assert msg.tags == "TagR"
        assert msg.keys == [f"key-{i}"]
        assert msg.properties["user"] == f"u{i}" and msg.properties["color"] == "red"
        assert msg.msg_id == line["msg_id"]  # the client's UNIQ_KEY
        assert msg.queue.queue_id == i % QUEUES and msg.queue_offset == line["offset"]
        assert before_ms - 1000 <= msg.born_timestamp <= after_ms + 1000
        assert msg.born_host.startswith("127.0.0.1:")
        assert msg.reconsume_times == 0


ALICE = Credentials("alice", "alice-secret-0123")  # Pub on the topic
BOB = Credentials("bob", "bob-secret-0123")  # Sub only


def client_log(home: Path) -> str:
    return "".join(p.read_text(errors="replace") for p in home.glob("logs/rocketmq-cpp/*"))


def can_route(namesrv: str, creds: Credentials, topic: str) -> bool:
    with BlockingClient(f"tcp://{namesrv}", credentials=creds) as client:
        answer = client.call(GetRouteInfoRequest(topic), 3000)
    return answer is not None and isinstance(answer[0], RouteInfoReply)


def test_signed_sends_are_checked_against_ferry_s_users_and_acls(
    venv_python: Path, tmp_path: Path
) -> None:
    secure = start_secure(tmp_path / "cluster", rocketmq_port=0)
    topic = "orders"
    try:
        with Admin(secure.namesrv, credentials=ROOT) as admin:
            admin.create_topic(topic, QUEUES, QUEUES, broker_addr=secure.cluster.broker_addr)
            for user in (ALICE, BOB):
                admin.create_user(user.access_key, user.secret_key, "Normal")
            admin.create_acl("User:alice", [f"Topic:{topic}"], ["Pub"], "Allow")
            # routes, but no Pub: the broker's door refuses the send itself
            admin.create_acl("User:bob", [f"Topic:{topic}"], ["Sub", "Get"], "Allow")
        addr = secure.cluster.local.rocketmq_addr

        def send(who: str, creds: tuple[str, str]) -> list[dict[str, Any]]:
            spec = {
                "namesrv": addr,
                "topic": topic,
                "credentials": list(creds),
                "timeout_ms": 2000,
                "messages": [{"mark": f"{who}-{i}", "body": f"{who}-{i}"} for i in range(3)],
            }
            return run_producer(venv_python, tmp_path / who, spec)

        # the name server checks routes with the users the broker pushed to it
        wait_for(lambda: can_route(secure.namesrv, ALICE, topic), 30, "users pushed")
        wait_for(lambda: can_route(secure.namesrv, BOB, topic), 30, "users pushed")
        ok = send("alice", (ALICE.access_key, ALICE.secret_key))
        assert [line.get("status") for line in ok] == [0] * 3, ok
        assert all(len(line["msg_id"]) == 32 for line in ok)
        for who, creds in {
            "wrong": (ALICE.access_key, "not-alice-s-secret"),
            "bob": (BOB.access_key, BOB.secret_key),
        }.items():
            lines = send(who, creds)
            assert [line.get("status") for line in lines] == [None] * 3, (who, lines)
            assert all("error" in line for line in lines), (who, lines)
        # the wrapper says "No route info" for any failure; the client's log has the cause.
        # A wrong secret is refused by the name server's door already (no route); bob gets
        # routes, and the broker's door refuses his send with NO_PERMISSION
        assert "error code:16" in client_log(tmp_path / "bob")
        assert "error code:16" not in client_log(tmp_path / "alice")
        # as root with Ferry's SDK: alice's messages only, and nothing of the refused ones
        with Admin(secure.namesrv, credentials=ROOT) as admin:
            stats = admin.topic_stats(topic)
        stored = sum(q.max_offset for queues in stats.values() for q in queues)
        with PullConsumer("g-check", secure.namesrv, FIRST, credentials=ROOT) as reader:
            reader.subscribe(topic)
            bodies: list[bytes] = []
            wait_for(
                lambda: bool(bodies.extend(m.body for m in reader.poll(0.5)) or len(bodies) >= 3),
                20,
                "alice's messages read back",
            )
        assert sorted(bodies) == [f"alice-{i}".encode() for i in range(3)]
        assert stored == 3
    finally:
        secure.stop()
