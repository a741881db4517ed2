"""Orderly pop for FIFO consumer groups (consumeMessageOrderly): a queue's next batch reaches
the group only when the one in flight is acked; a batch not acked comes again from its queue,
in order, with one more attempt; acks move the group's offset; handles of an earlier lease no
longer ack. Ferry's own SimpleConsumer, unchanged: the group's setting decides, as in RocketMQ 5."""

from __future__ import annotations

import time
from collections.abc import Iterator

import pytest

from ferry.admin import Admin
from ferry.client import (
    ConsumeFromWhere,
    InvalidReceiptHandleError,
    Message,
    MessageExt,
    MessageQueue,
    Producer,
    SimpleConsumer,
)
from ferry.protocol.messages import SubscriptionGroupConfig
from ferry.runtime.launcher import LocalCluster, start_local_cluster
from ferry.runtime.testing.pytest_support import wait_for

pytestmark = pytest.mark.integration

TOPIC = "PopOrder"
QUEUES = 2


@pytest.fixture(scope="module")
def cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[LocalCluster]:
    local = start_local_cluster(str(tmp_path_factory.mktemp("pop-order")))
    try:
        with Admin(local.namesrv_addr) as admin:
            wait_for(admin.master_addrs, 15, "the broker to register")
            admin.create_topic(TOPIC, QUEUES, QUEUES)
        yield local
    finally:
        local.stop()


def fifo_group(cluster: LocalCluster, group: str) -> None:
    with Admin(cluster.namesrv_addr) as admin:
        for addr in admin.master_addrs().values():
            admin.update_sub_group(
                SubscriptionGroupConfig(group_name=group, consume_message_orderly=True),
                broker_addr=addr,
            )


def send_groups(cluster: LocalCluster, topic: str, groups: list[str], each: int) -> None:
    with Producer(f"pg-{topic}", cluster.namesrv_addr) as producer:
        for i in range(each):
            for g in groups:
                producer.send_orderly(Message(topic, f"{g}-{i}".encode()), sharding_key=g)


def consumer(cluster: LocalCluster, group: str, topic: str, invisible: float) -> SimpleConsumer:
    return SimpleConsumer(
        group,
        cluster.namesrv_addr,
        {topic: "*"},
        await_duration=0.5,
        invisible_duration=invisible,
        consume_from=ConsumeFromWhere.FIRST_OFFSET,
    )


def key_of(msg: MessageExt) -> tuple[str, int]:
    name, _, i = msg.body.decode().rpartition("-")
    return name, int(i)


def test_each_queue_gives_one_batch_at_a_time_in_order(cluster: LocalCluster) -> None:
    topic = f"{TOPIC}A"
    with Admin(cluster.namesrv_addr) as admin:
        admin.create_topic(topic, QUEUES, QUEUES)
    fifo_group(cluster, "cg-order-a")
    send_groups(cluster, topic, ["red", "blue", "green"], 12)
    seen: dict[str, list[int]] = {}
    with consumer(cluster, "cg-order-a", topic, 30) as c:
        deadline = time.monotonic() + 60
        while sum(map(len, seen.values())) < 36 and time.monotonic() < deadline:
            batch = c.receive(5)
            queues = {m.queue_id for m in batch}
            assert len(queues) <= 1, "one receive holds one queue's batch"
            # while the batch is in flight its queue gives nothing more to the group
            for m in c.receive(32):
                assert m.queue_id not in queues, "a second batch of a queue in flight"
                c.ack(m)
                name, i = key_of(m)
                seen.setdefault(name, []).append(i)
            for m in batch:
                c.ack(m)
                name, i = key_of(m)
                seen.setdefault(name, []).append(i)
    assert {name: sorted(got) for name, got in seen.items()} == {
        g: list(range(12)) for g in ("red", "blue", "green")
    }
    # the interleaving above acks a later batch of one queue before an earlier one of
    # another; within a message group the order holds
    for got in seen.values():
        assert got == sorted(got)


def test_a_batch_not_acked_comes_again_in_order_with_one_more_attempt(
    cluster: LocalCluster,
) -> None:
    topic = f"{TOPIC}B"
    with Admin(cluster.namesrv_addr) as admin:
        admin.create_topic(topic, 1, 1)
    fifo_group(cluster, "cg-order-b")
    send_groups(cluster, topic, ["only"], 6)
    with consumer(cluster, "cg-order-b", topic, 1.5) as c:
        first = wait_for(lambda: c.receive(3) or None, 20, "the first batch")
        assert [key_of(m)[1] for m in first] == [0, 1, 2]
        assert [m.reconsume_times for m in first] == [0, 0, 0]
        c.ack(first[0])  # the offset moves past it; 1 and 2 are left
        assert c.receive(3) == [], "the queue is held while 1 and 2 are in flight"
        again = wait_for(lambda: c.receive(3) or None, 20, "the batch after its lease ran out")
        assert [key_of(m)[1] for m in again] == [1, 2, 3]
        assert [m.reconsume_times for m in again] == [1, 1, 0]
        with pytest.raises(InvalidReceiptHandleError):
            c.ack(first[1])  # a handle of the earlier lease
        c.change_invisible_duration(again[0], 30)  # the lease now holds for 30 s
        for m in again:
            c.ack(m)
        rest = wait_for(lambda: c.receive(8) or None, 20, "the rest")
        assert [key_of(m)[1] for m in rest] == [4, 5]
        for m in rest:
            c.ack(m)
        with pytest.raises(InvalidReceiptHandleError):
            c.ack(rest[0])  # acked already
    with Admin(cluster.namesrv_addr) as admin:
        broker = next(iter(admin.master_addrs()))
        assert admin.consumer_offset("cg-order-b", MessageQueue(topic, broker, 0)) == 6


def test_a_plain_group_is_not_held(cluster: LocalCluster) -> None:
    topic = f"{TOPIC}C"
    with Admin(cluster.namesrv_addr) as admin:
        admin.create_topic(topic, 1, 1)
    send_groups(cluster, topic, ["x"], 4)
    with consumer(cluster, "cg-plain-c", topic, 30) as c:
        one = wait_for(lambda: c.receive(2) or None, 20, "a first batch")
        more = wait_for(lambda: c.receive(2) or None, 20, "a second batch while the first is out")
        assert [key_of(m)[1] for m in one + more] == [0, 1, 2, 3]
        c.ack_batch(one + more)
