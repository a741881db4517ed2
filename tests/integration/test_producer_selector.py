"""The producer's RocketMQ sends beyond round robin: send(msg, selector, arg) with a
MessageQueueSelector, send(msg, queue) to a given queue, and send_oneway messages that are
really delivered, all against a real cluster and read back by a consumer."""

from __future__ import annotations

import time
from collections.abc import Iterator
from typing import Any

import pytest
from itest_support import Cluster

from ferry.admin import Admin
from ferry.client import (
    BrokerNotExistError,
    ConsumeFromWhere,
    InvalidParameterError,
    Message,
    MessageExt,
    MessageQueue,
    Producer,
    PullConsumer,
    select_by_hash,
)
from ferry.runtime.testing.cluster import running_cluster


@pytest.fixture(scope="module")
def cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Cluster]:
    with running_cluster(tmp_path_factory.mktemp("selector")) as c:
        with Admin(c.namesrv) as admin:
            for topic in ("Selected", "Oneway", "Checked"):
                admin.create_topic(topic, 4, 4)
        yield c


def read_all(cluster: Cluster, group: str, topic: str, want: int) -> list[MessageExt]:
    got: list[MessageExt] = []
    with PullConsumer(
        group, cluster.namesrv, ConsumeFromWhere.FIRST_OFFSET, auto_commit=False
    ) as consumer:
        consumer.subscribe(topic)
        deadline = time.monotonic() + 30
        while len(got) < want and time.monotonic() < deadline:
            got += consumer.poll(timeout=1.0)
    return got


class LastQueue:
    """A selector object, as RocketMQ's MessageQueueSelector interface."""

    def __init__(self) -> None:
        self.seen: list[tuple[list[MessageQueue], Message, Any]] = []

    def select(self, mqs: list[MessageQueue], msg: Message, arg: Any) -> MessageQueue:
        self.seen.append((mqs, msg, arg))
        return mqs[-1]


def test_a_selector_picks_the_queue_of_each_send(cluster: Cluster) -> None:
    by_order: dict[str, set[int]] = {}
    with Producer("SelectingProducer", cluster.namesrv) as producer:
        for i in range(12):
            order = f"order-{i % 3}"
            msg = Message("Selected", f"{order} step {i}".encode(), keys=[order])
            result = producer.send(msg, select_by_hash, order)  # a callable selector
            by_order.setdefault(order, set()).add(result.queue.queue_id)
        chooser = LastQueue()
        msg = Message("Selected", b"to the last queue")
        last = producer.send(msg, chooser, {"any": "arg"}, 5000)
    mqs, seen_msg, arg = chooser.seen[0]
    assert [q.queue_id for q in mqs] == [0, 1, 2, 3]  # the topic's write queues
    assert all(q.topic == "Selected" and q.broker_name == "broker-a" for q in mqs)
    assert seen_msg is msg and arg == {"any": "arg"}
    assert last.queue == mqs[-1]
    assert all(len(queues) == 1 for queues in by_order.values())  # each order: one queue
    got = read_all(cluster, "SelectedReader", "Selected", 13)
    assert len(got) == 13
    for m in got:  # stored where the selector said
        body = m.body.decode()
        if body == "to the last queue":
            assert m.queue.queue_id == 3
        else:
            assert {m.queue.queue_id} == by_order[body.split()[0]]


def test_send_to_a_given_queue_with_and_without_a_timeout(cluster: Cluster) -> None:
    queue = MessageQueue("Selected", "broker-a", 2)
    with Producer("QueueProducer", cluster.namesrv) as producer:
        first = producer.send(Message("Selected", b"q2 a"), queue)
        second = producer.send(Message("Selected", b"q2 b"), queue, 3000)
        plain = producer.send(Message("Selected", b"plain"), 3000)  # send(msg, timeout)
        keyword = producer.send(Message("Selected", b"kw"), timeout_ms=3000)
    assert first.queue == second.queue == queue
    assert second.queue_offset == first.queue_offset + 1
    assert plain.status.name == keyword.status.name == "SEND_OK"


def test_bad_choices_are_refused_before_anything_is_sent(cluster: Cluster) -> None:
    with Admin(cluster.namesrv) as admin:
        before = sum(admin.max_offset(q) for q in admin.queues("Checked"))
    with Producer("CheckedProducer", cluster.namesrv) as producer:
        msg = Message("Checked", b"x")
        with pytest.raises(InvalidParameterError, match="not a MessageQueue"):
            producer.send(msg, lambda mqs, m, a: None, "arg")
        with pytest.raises(InvalidParameterError, match="another topic"):
            producer.send(msg, lambda mqs, m, a: MessageQueue("Selected", "broker-a", 0), 1)
        with pytest.raises(InvalidParameterError, match="not a queue of topic"):
            producer.send(msg, MessageQueue("Selected", "broker-a", 0))
        with pytest.raises(BrokerNotExistError, match="broker-z"):
            producer.send(msg, MessageQueue("Checked", "broker-z", 0))

        def broken(mqs: list[MessageQueue], m: Message, arg: Any) -> MessageQueue:
            raise ZeroDivisionError("the selector's own bug")

        with pytest.raises(ZeroDivisionError):  # the selector's error, as it is
            producer.send(msg, broken, None)
        with pytest.raises(InvalidParameterError, match="timeout_ms"):
            producer.send(msg, timeout_ms=0)
    with Admin(cluster.namesrv) as admin:
        assert sum(admin.max_offset(q) for q in admin.queues("Checked")) == before


def test_oneway_messages_are_delivered(cluster: Cluster) -> None:
    bodies = {f"oneway {i}".encode() for i in range(20)}
    with Producer("OnewayProducer", cluster.namesrv) as producer:
        for body in sorted(bodies):
            producer.send_oneway(Message("Oneway", body))
        producer.send_oneway(
            Message("Oneway", b"oneway to 1"), MessageQueue("Oneway", "broker-a", 1)
        )
        producer.send_oneway(Message("Oneway", b"oneway selected"), LastQueue(), None)
    got = read_all(cluster, "OnewayReader", "Oneway", 22)
    assert {m.body for m in got} == bodies | {b"oneway to 1", b"oneway selected"}
    assert len(got) == 22  # each once
    where = {m.body: m.queue.queue_id for m in got}
    assert where[b"oneway to 1"] == 1
    assert where[b"oneway selected"] == 3
    assert len({where[b] for b in bodies}) == 4  # round robin over the topic's queues
