"""RocketMQ's own push consumer (`rocketmq` 0.4.4, rocketmq-client-cpp inside), unchanged, in
its own venv, against Ferry's doors: messages sent with Ferry's SDK reach it intact, tag
expressions filter, a group's members split the queues, a failed message comes back through
the retry topic, and a restarted group resumes from its committed offset (issue 40 §3)."""

from __future__ import annotations

import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
from rocketmq_client_support import (
    QUEUES,
    RocketMQConsumer,
    committed_to_the_end,
    consumer_factory,
    consumer_ids,
    new_topic,
    on_queue,
    probe_until_consumed,
    rocketmq_cluster,
    wait_for,
)

from ferry.client import Message, Producer
from ferry.protocol.rocketmq.codes import RequestCode, ResponseCode
from ferry.runtime.launcher import LocalCluster
from ferry.runtime.testing.client_venvs import rocketmq_remoting_python
from ferry.runtime.testing.pytest_support import holds_for
from ferry.runtime.testing.remoting_client import RemotingClient

pytestmark = pytest.mark.integration


@pytest.fixture(scope="module")
def venv_python() -> Path:
    return rocketmq_remoting_python()


@pytest.fixture(scope="module")
def cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[LocalCluster]:
    with rocketmq_cluster(tmp_path_factory.mktemp("rocketmq-consume")) as local:
        yield local


@pytest.fixture(scope="module")
def producer(cluster: LocalCluster) -> Iterator[Producer]:
    with Producer("pg-rocketmq-consume", cluster.namesrv_addr) as p:
        yield p


@pytest.fixture
def consumers(
    venv_python: Path, cluster: LocalCluster, tmp_path: Path
) -> Iterator[Callable[..., RocketMQConsumer]]:
    with consumer_factory(venv_python, cluster, tmp_path) as make:
        yield make


def test_messages_sent_with_ferrys_sdk_reach_a_rocketmq_push_consumer_intact(
    cluster: LocalCluster, producer: Producer, consumers: Callable[..., RocketMQConsumer]
) -> None:
    topic = new_topic(cluster, "RmqIntact")
    consumer = consumers("cg-rmq-intact", topic).start()
    probe_until_consumed(producer, topic, [consumer])
    sent = {}
    for i in range(8):
        msg = Message(
            topic, f"intact-{i}", tags="TagA", keys=[f"key-{i}"], properties={"user": f"u{i}"}
        )
        sent[f"intact-{i}"] = producer.send(msg)
    wait_for(
        lambda: set(sent) <= set(consumer.bodies()), 30, "the SDK's messages were not consumed"
    )
    got = {m["body"]: m for m in consumer.messages if m["body"] in sent}
    for body, result in sent.items():
        m = got[body]
        n = body.split("-")[1]
        assert m["topic"] == topic
        assert m["tags"] == "TagA"
        assert m["keys"] == f"key-{n}"
        assert m["user"] == f"u{n}"
        assert m["id"] == result.msg_id
        assert m["queue_id"] == result.queue.queue_id
        assert m["queue_offset"] == result.queue_offset
        assert m["reconsume_times"] == 0
        assert abs(m["born_timestamp"] - time.time() * 1000) < 120_000


def test_a_tag_expression_lets_through_only_its_tags(
    cluster: LocalCluster, producer: Producer, consumers: Callable[..., RocketMQConsumer]
) -> None:
    topic = new_topic(cluster, "RmqTags")
    consumer = consumers("cg-rmq-tags", topic, "TagA || TagB").start()
    # probes must pass the filter here
    deadline = time.monotonic() + 30
    while not any(b.startswith("tprobe") for b in consumer.bodies()):
        assert time.monotonic() < deadline, "no probe consumed"
        for q in range(QUEUES):
            producer.send(Message(topic, f"tprobe-{q}", tags="TagA"), on_queue, q)
        time.sleep(0.5)  # wait-ok: pacing between probes of a deadline-bounded wait
    for q in range(QUEUES):
        producer.send(Message(topic, f"a-{q}", tags="TagA"), on_queue, q)
        producer.send(Message(topic, f"c-{q}", tags="TagC"), on_queue, q)
        producer.send(Message(topic, f"b-{q}", tags="TagB"), on_queue, q)
    wanted = {f"{t}-{q}" for t in "ab" for q in range(QUEUES)}
    wait_for(lambda: wanted <= set(consumer.bodies()), 30, "TagA/TagB messages missing")
    # a TagC message would have come with the TagB one sent after it
    holds_for(
        lambda: not [b for b in consumer.bodies() if b.startswith("c-")], 1.0, "no TagC message"
    )


def test_two_consumers_of_one_group_split_the_queues_and_consume_each_message_once(
    cluster: LocalCluster, producer: Producer, consumers: Callable[..., RocketMQConsumer]
) -> None:
    topic = new_topic(cluster, "RmqSplit")
    group = "cg-rmq-split"
    first = consumers(group, topic).start()
    probe_until_consumed(producer, topic, [first])
    second = consumers(group, topic).start()
    with RemotingClient(cluster.broker_rocketmq_addr) as door:
        wait_for(
            lambda: len(consumer_ids(door, group)) == 2, 30, "the second member never registered"
        )
    probe_until_consumed(producer, topic, [first, second])
    # the rebalance has settled once both consume: from here each message goes to one
    first.messages.clear()
    second.messages.clear()
    bodies = [f"split-{i}" for i in range(40)]
    for i, body in enumerate(bodies):
        producer.send(Message(topic, body, tags="s"), on_queue, i % QUEUES)
    wanted = set(bodies)

    def got() -> list[str]:
        return [b for c in (first, second) for b in c.bodies() if b in wanted]

    wait_for(lambda: set(got()) == wanted, 30, "split messages missing")
    # a second delivery would follow close behind
    holds_for(lambda: sorted(got()) == sorted(bodies), 0.5, "each message once")
    in_first = {m["queue_id"] for m in first.messages if m["body"] in wanted}
    in_second = {m["queue_id"] for m in second.messages if m["body"] in wanted}
    assert in_first and in_second and not in_first & in_second
    assert in_first | in_second == set(range(QUEUES))


def test_a_failed_message_comes_back_through_the_retry_topic_with_reconsume_times_1(
    cluster: LocalCluster, producer: Producer, consumers: Callable[..., RocketMQConsumer]
) -> None:
    topic = new_topic(cluster, "RmqRetry")
    consumer = consumers("cg-rmq-retry", topic)
    consumer.fail_keys = ["poison"]
    consumer.start()
    probe_until_consumed(producer, topic, [consumer])
    result = producer.send(Message(topic, "poison-body", tags="TagA", keys=["poison"]))

    def deliveries() -> list[dict[str, Any]]:
        return [m for m in list(consumer.messages) if m["body"] == "poison-body"]

    wait_for(lambda: len(deliveries()) >= 2, 40, "the failed message did not come back")
    first, again = deliveries()[:2]
    assert first["failed"] and first["reconsume_times"] == 0
    assert not again["failed"]
    assert again["reconsume_times"] == 1
    assert again["id"] == result.msg_id
    assert again["keys"] == "poison" and again["tags"] == "TagA"
    assert again["topic"] == topic  # the client restores the original topic


def test_a_restarted_group_resumes_from_its_committed_offsets(
    cluster: LocalCluster, producer: Producer, consumers: Callable[..., RocketMQConsumer]
) -> None:
    topic = new_topic(cluster, "RmqResume")
    group = "cg-rmq-resume"
    consumer = consumers(group, topic).start()
    probe_until_consumed(producer, topic, [consumer])
    before = [f"before-{i}" for i in range(8)]
    for i, body in enumerate(before):
        producer.send(Message(topic, body), on_queue, i % QUEUES)
    wait_for(lambda: set(before) <= set(consumer.bodies()), 30, "first messages missing")
    with RemotingClient(cluster.broker_rocketmq_addr) as door:
        # offsets are committed every 5 s and with each pull
        wait_for(
            lambda: committed_to_the_end(door, group, topic),
            30,
            "the consumer never committed its offsets",
        )
    consumer.stop()
    after = [f"after-{i}" for i in range(8)]
    for i, body in enumerate(after):
        producer.send(Message(topic, body), on_queue, i % QUEUES)
    again = consumers(group, topic).start()
    wait_for(lambda: set(after) <= set(again.bodies()), 30, "the restarted group missed some")
    assert not set(before) & set(again.bodies())


def test_tools_get_a_rocketmq_consumer_s_running_info_through_the_broker(
    cluster: LocalCluster, producer: Producer, consumers: Callable[..., RocketMQConsumer]
) -> None:
    # what mqadmin consumerStatus and the dashboard's client page ask (307): the broker asks
    # the client on its own connection and relays the answer
    topic = new_topic(cluster, "RmqStatus")
    group = "cg-rmq-status"
    consumer = consumers(group, topic).start()
    probe_until_consumed(producer, topic, [consumer])
    with RemotingClient(cluster.broker_rocketmq_addr) as tool:
        [client_id] = consumer_ids(tool, group)
        fields = {"consumerGroup": group, "clientId": client_id, "jstackEnable": "false"}
        info = tool.call(RequestCode.GET_CONSUMER_RUNNING_INFO, fields)
        # the C++ client takes CONSUME_MESSAGE_DIRECTLY (309) but never answers it: the tool
        # is told so by the broker instead of waiting on
        sent = producer.send(Message(topic, "direct-1", tags="d"))
        direct = tool.call(
            RequestCode.CONSUME_MESSAGE_DIRECTLY,
            {"consumerGroup": group, "clientId": client_id, "msgId": sent.offset_msg_id},
        )
    # its body is the client's ConsumerRunningInfo (not strict JSON: the C++ client writes
    # objects as mqTable's keys)
    assert info.code == ResponseCode.SUCCESS, info.remark
    assert b'"PROP_CONSUME_TYPE":"CONSUME_PASSIVELY"' in info.body
    assert f'"topic":"{topic}"'.encode() in info.body  # its subscription
    assert f'"topic" : "{topic}"'.encode() in info.body  # its queues, in mqTable
    assert direct.code == ResponseCode.SYSTEM_ERROR
    assert "did not answer" in direct.remark


def test_a_reset_by_time_makes_a_running_rocketmq_consumer_consume_again(
    cluster: LocalCluster, producer: Producer, consumers: Callable[..., RocketMQConsumer]
) -> None:
    # mqadmin resetOffsetByTime / the dashboard's reset (222): the broker sets the offsets and
    # tells the running client (220), which pulls from there
    topic = new_topic(cluster, "RmqReset")
    group = "cg-rmq-reset"
    consumer = consumers(group, topic).start()
    probe_until_consumed(producer, topic, [consumer])
    since = int(time.time() * 1000)
    bodies = {f"again-{i}" for i in range(8)}
    for i, body in enumerate(sorted(bodies)):
        producer.send(Message(topic, body), on_queue, i % QUEUES)
    wait_for(lambda: bodies <= set(consumer.bodies()), 30, "the first delivery")
    with RemotingClient(cluster.broker_rocketmq_addr) as tool:
        wait_for(lambda: committed_to_the_end(tool, group, topic), 30, "offsets committed")
        fields = {"topic": topic, "group": group, "timestamp": str(since), "isForce": "true"}
        got = tool.call(RequestCode.INVOKE_BROKER_TO_RESET_OFFSET, fields)
    assert got.code == ResponseCode.SUCCESS, got.remark

    def twice() -> bool:
        seen = consumer.bodies()
        return all(seen.count(b) >= 2 for b in bodies)

    wait_for(twice, 30, "every message consumed again after the reset")
