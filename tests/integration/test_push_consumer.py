"""Push consumers against real processes: group rebalancing, retries and the DLQ,
broadcasting, consume timeout, where a new group starts."""

from __future__ import annotations

import threading
from collections import Counter
from collections.abc import Callable
from pathlib import Path

import pytest
from consume_support import Received, create_topic, wait_for_split
from itest_support import Cluster, module_cluster, wait_for  # noqa: F401 - the cluster fixture

from ferry.admin import Admin
from ferry.client import (
    ConsumeFromWhere,
    ConsumeResult,
    Message,
    MessageExt,
    MessageModel,
    MessageQueue,
    Producer,
    PullConsumer,
    PushConsumer,
)

pytestmark = pytest.mark.integration

FIRST = ConsumeFromWhere.FIRST_OFFSET


def test_three_members_split_eight_queues_and_take_over_when_one_leaves(
    cluster: Cluster,
) -> None:
    create_topic(cluster.namesrv, "Split", 8)
    received = Received()
    batch = 32
    members = [
        PushConsumer(
            "g-split",
            cluster.namesrv,
            consume_from=FIRST,
            pull_batch_size=batch,
            consume_thread_nums=4,
        )
        for _ in range(3)
    ]
    try:
        for i, member in enumerate(members):
            member.subscribe("Split")
            member.register_listener(received.listener(f"m{i}"))
            member.start()
        # the default rebalance period is 20 s: the broker's notices move queues at once
        before = wait_for_split(members, "Split", 8, timeout=15)
        assert sorted(Counter(before.values()).values()) == [2, 3, 3]
        with Admin(cluster.namesrv) as admin:
            ids = sorted(m.client_id for m in members)
            assert admin.consumer_ids("g-split", cluster.broker_addr) == ids
            assert "g-split" in admin.consumer_groups("Split")
        with Producer("pg-split", cluster.namesrv) as producer:
            for f in [producer.send_async(Message("Split", f"a{i}".encode())) for i in range(600)]:
                f.result(10)
            wait_for(lambda: received.unique() == 600, 20, "the first 600 messages")

            leaving = members.pop()
            sender = threading.Thread(
                target=lambda: [
                    producer.send(Message("Split", f"b{i}".encode())) for i in range(400)
                ]
            )
            sender.start()
            leaving.shutdown()  # while messages keep coming
            after = wait_for_split(members, "Split", 8, timeout=15)
            sender.join(30)
        wait_for(lambda: received.unique() == 1000, 30, "every message")
        assert set(after.values()) == {m.client_id for m in members}
        moved = sum(1 for queue, owner in after.items() if before[queue] != owner)
        assert moved >= 2  # the leaver's queues at least
        # at-least-once: a queue that changed hands may repeat up to one pull batch
        assert received.duplicates() <= batch * moved
        expected = {f"a{i}".encode() for i in range(600)} | {f"b{i}".encode() for i in range(400)}
        assert set(received.bodies()) == expected
    finally:
        for member in members:
            member.shutdown()


def test_a_failed_message_comes_back_with_its_reconsume_times_then_goes_to_the_dlq(
    cluster_factory: Callable[..., Cluster],
) -> None:
    # retries wait for delay level 3 + reconsume times: short levels keep the test fast
    cluster = cluster_factory(messageDelayLevel="1s 1s 1s 1s 1s")
    create_topic(cluster.namesrv, "Retried", 2)
    received = Received()

    def verdict(msg: MessageExt) -> ConsumeResult:
        if msg.body == b"boom":
            raise RuntimeError("a listener that raises fails its batch")
        return ConsumeResult.RECONSUME_LATER if msg.body == b"poison" else ConsumeResult.SUCCESS

    consumer = PushConsumer("g-retry", cluster.namesrv, consume_from=FIRST, max_reconsume_times=2)
    consumer.subscribe("Retried", "TagA")
    consumer.register_listener(received.listener(verdict=verdict))
    with consumer, Producer("pg-retry", cluster.namesrv) as producer:
        sent = {
            body: producer.send(Message("Retried", body, tags="TagA", keys=["k-" + body.decode()]))
            for body in (b"ok-1", b"poison", b"boom", b"ok-2")
        }
        producer.send(Message("Retried", b"other-tag", tags="TagB"))  # not subscribed

        def dlq_holds_two() -> bool:
            with Admin(cluster.namesrv) as admin:
                try:
                    return admin.max_offset(MessageQueue("%DLQ%g-retry", "broker-a", 0)) == 2
                except Exception:  # noqa: BLE001 - the DLQ does not exist yet
                    return False

        wait_for(dlq_holds_two, 30, "two messages in the DLQ")
        with received.lock:
            deliveries = {body: [m for m in received.msgs if m.body == body] for body in sent}
    # two retries after the first attempt, then the DLQ; successes are delivered once
    for body in (b"poison", b"boom"):
        assert [m.reconsume_times for m in deliveries[body]] == [0, 1, 2]
        assert {m.topic for m in deliveries[body]} == {"Retried"}  # the retry topic is hidden
        assert {m.msg_id for m in deliveries[body]} == {sent[body].msg_id}
        assert [m.queue.topic for m in deliveries[body]][1:] == ["%RETRY%g-retry"] * 2
    assert [len(deliveries[b]) for b in (b"ok-1", b"ok-2")] == [1, 1]
    assert b"other-tag" not in received.bodies()

    dlq = MessageQueue("%DLQ%g-retry", "broker-a", 0)
    with PullConsumer("g-dlq-reader", cluster.namesrv, FIRST) as reader:
        reader.assign([dlq])
        dead: list[MessageExt] = []

        def read_dlq() -> bool:
            dead.extend(reader.poll(0.5))
            return len(dead) == 2

        wait_for(read_dlq, 20, "the DLQ read")
    by_body = {m.body: m for m in dead}
    assert set(by_body) == {b"poison", b"boom"}
    for body, msg in by_body.items():
        assert msg.reconsume_times == 3
        assert msg.tags == "TagA" and msg.keys == ["k-" + body.decode()]
        assert msg.msg_id == sent[body].msg_id
        assert msg.properties["DLQ_ORIGIN_TOPIC"] == "Retried"
        assert msg.properties["DLQ_ORIGIN_MESSAGE_ID"] == sent[body].msg_id
        assert msg.properties["RETRY_TOPIC"] == "Retried"


def test_broadcasting_members_each_get_everything_and_resume_from_their_local_offsets(
    cluster: Cluster, tmp_path: Path
) -> None:
    create_topic(cluster.namesrv, "Broadcast", 2)
    offsets = str(tmp_path / "offsets")

    def member(name: str, received: Received) -> PushConsumer:
        consumer = PushConsumer(
            "g-broadcast",
            cluster.namesrv,
            MessageModel.BROADCASTING,
            FIRST,
            instance_name=name,
            offset_store_dir=offsets,
        )
        consumer.subscribe("Broadcast")
        fail_once = lambda m: (  # noqa: E731
            ConsumeResult.RECONSUME_LATER if m.body == b"fails" else ConsumeResult.SUCCESS
        )
        consumer.register_listener(received.listener(name, fail_once))
        consumer.start()
        return consumer

    one, two = Received(), Received()
    first, second = member("one", one), member("two", two)
    try:
        with Producer("pg-broadcast", cluster.namesrv) as producer:
            producer.send_batch([Message("Broadcast", f"m{i}".encode()) for i in range(20)])
            producer.send(Message("Broadcast", b"fails"))
            wait_for(lambda: one.unique() == 21 and two.unique() == 21, 20, "both members")
            second.shutdown()  # writes its offsets to the local file
            producer.send_batch([Message("Broadcast", f"n{i}".encode()) for i in range(10)])
            again = Received()
            second = member("two", again)
            wait_for(lambda: one.unique() == 31 and again.unique() == 10, 20, "after restart")
        # the restarted member resumed from its file: only the new messages, FIRST_OFFSET or not
        assert sorted(again.bodies()) == sorted(f"n{i}".encode() for i in range(10))
        # broadcasting does not retry a failed message
        assert one.bodies().count(b"fails") == 1 and two.bodies().count(b"fails") == 1
        assert one.duplicates() == 0
        files = list((tmp_path / "offsets").glob("*@two/g-broadcast/offsets.json"))
        assert len(files) == 1 and b'"Broadcast"' in files[0].read_bytes()
    finally:
        first.shutdown()
        second.shutdown()


def test_a_message_stuck_in_the_listener_past_the_consume_timeout_is_redelivered(
    cluster: Cluster,
) -> None:
    create_topic(cluster.namesrv, "Stuck", 1)
    release = threading.Event()
    seen: list[int] = []

    def listener(msgs: list[MessageExt]) -> ConsumeResult:
        seen.extend(m.reconsume_times for m in msgs)
        if msgs[0].reconsume_times == 0:
            release.wait(20)  # stuck until the redelivery shows up
        else:
            release.set()
        return ConsumeResult.SUCCESS

    consumer = PushConsumer("g-stuck", cluster.namesrv, consume_from=FIRST, consume_timeout_ms=500)
    consumer.subscribe("Stuck")
    consumer.register_listener(listener)
    with consumer, Producer("pg-stuck", cluster.namesrv) as producer:
        producer.send(Message("Stuck", b"slow"))
        assert release.wait(20), "the stuck message was never given back"
    assert seen[:2] == [0, 1]


def test_a_new_group_consuming_from_last_offset_does_not_read_history(cluster: Cluster) -> None:
    create_topic(cluster.namesrv, "History", 2)
    with Producer("pg-history", cluster.namesrv) as producer:
        producer.send_batch([Message("History", f"old{i}".encode()) for i in range(10)])
        received = Received()
        consumer = PushConsumer("g-history", cluster.namesrv)  # LAST_OFFSET, the default
        consumer.subscribe("History")
        consumer.register_listener(received.listener())
        with consumer, Admin(cluster.namesrv) as admin:
            queues = admin.queues("History")
            # where the group starts is committed as soon as it is known
            wait_for(
                lambda: all(
                    admin.consumer_offset("g-history", q) == admin.max_offset(q) for q in queues
                ),
                15,
                "start offsets committed",
            )
            producer.send(Message("History", b"new"))
            wait_for(lambda: received.count() == 1, 15, "the new message")
    assert received.bodies() == [b"new"]


def test_listeners_that_block_get_the_whole_consume_pool_quick_ones_one_thread(
    cluster: Cluster,
) -> None:
    create_topic(cluster.namesrv, "Pooled", 1)
    lock = threading.Lock()
    running = [0]
    peak = {"slow": 0, "quick": 0}
    done: Counter[str] = Counter()

    def listener(msgs: list[MessageExt]) -> ConsumeResult:
        kind = msgs[0].body.decode().split("-")[0]
        with lock:
            running[0] += 1
            peak[kind] = max(peak[kind], running[0])
        if kind == "slow":
            threading.Event().wait(0.05)  # a listener waiting on I/O
        with lock:
            running[0] -= 1
            done[kind] += 1
        return ConsumeResult.SUCCESS

    consumer = PushConsumer("g-pooled", cluster.namesrv, consume_from=FIRST, consume_thread_nums=8)
    consumer.subscribe("Pooled")
    consumer.register_listener(listener)
    with consumer, Producer("pg-pooled", cluster.namesrv) as producer:
        producer.send_batch([Message("Pooled", f"quick-{i}".encode()) for i in range(200)])
        wait_for(lambda: done["quick"] == 200, 20, "the quick messages")
        producer.send_batch([Message("Pooled", f"slow-{i}".encode()) for i in range(32)])
        wait_for(lambda: done["slow"] == 32, 20, "the slow messages")
    assert peak["quick"] <= 2  # no thread per message for quick listeners
    assert peak["slow"] >= 4  # blocked listeners ran side by side
