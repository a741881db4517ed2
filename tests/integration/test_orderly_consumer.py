"""Orderly push consumers against real processes: per-key order across a member leaving,
queue locks on the broker, SUSPEND retried locally, exhausted messages in the DLQ."""

from __future__ import annotations

import itertools
import threading
from collections import defaultdict

import pytest
from consume_support import create_topic, wait_for_split
from itest_support import Cluster, module_cluster, wait_for  # noqa: F401 - the cluster fixture

from ferry.admin import Admin
from ferry.client import (
    ConsumeFromWhere,
    ConsumeResult,
    Message,
    MessageExt,
    MessageQueue,
    Producer,
    PushConsumer,
)
from ferry.client.transport import Connection, expect
from ferry.protocol.messages import LockBatchReply, LockBatchRequest, OffsetEntry

pytestmark = pytest.mark.integration

FIRST = ConsumeFromWhere.FIRST_OFFSET
KEYS = 50
PER_KEY = 200


def test_orderly_members_keep_each_keys_order_while_one_leaves(cluster: Cluster) -> None:
    create_topic(cluster.namesrv, "Ordered", 8)
    lock = threading.Lock()
    seen: dict[str, list[int]] = defaultdict(list)
    total = [0]

    def listener(msgs: list[MessageExt]) -> ConsumeResult:
        with lock:
            for msg in msgs:
                key, seq = msg.body.decode().split(":")
                seen[key].append(int(seq))
                total[0] += 1
        return ConsumeResult.SUCCESS

    members = []
    for _ in range(3):
        member = PushConsumer(
            "g-ordered",
            cluster.namesrv,
            consume_from=FIRST,
            consume_thread_nums=4,
            rebalance_interval_ms=2000,
        )
        member.subscribe("Ordered")
        member.register_listener(listener, orderly=True)
        member.start()
        members.append(member)
    try:
        before = wait_for_split(members, "Ordered", 8, timeout=20)

        def send(keys: range) -> None:
            with Producer("pg-ordered", cluster.namesrv) as producer:
                for seq in range(PER_KEY):
                    for k in keys:
                        producer.send_orderly(Message("Ordered", f"k{k}:{seq}".encode()), f"k{k}")

        senders = [threading.Thread(target=send, args=(range(i, KEYS, 4),)) for i in range(4)]
        for t in senders:
            t.start()
        wait_for(lambda: total[0] >= KEYS * PER_KEY // 4, 60, "a quarter consumed")
        leaving = members.pop()
        leaving.shutdown()  # mid-stream
        after = wait_for_split(members, "Ordered", 8, timeout=20)
        for t in senders:
            t.join(60)
        wait_for(lambda: all(len(set(seen[f"k{k}"])) == PER_KEY for k in range(KEYS)), 60, "all")
    finally:
        for member in members:
            member.shutdown()
    moved = sum(1 for queue, owner in after.items() if before[queue] != owner)
    duplicates = 0
    for k in range(KEYS):
        seqs = seen[f"k{k}"]
        # each delivery follows the previous one, or restarts at an earlier point (a redelivery
        # after a move); never a gap, never a later message first
        for prev, cur in itertools.pairwise(seqs):
            assert cur == prev + 1 or cur <= prev, f"k{k}: {prev} then {cur}"
        assert seqs[0] == 0
        duplicates += len(seqs) - PER_KEY
    assert duplicates <= 32 * moved


def test_suspend_retries_in_order_then_sends_an_exhausted_message_to_the_dlq(
    cluster: Cluster,
) -> None:
    create_topic(cluster.namesrv, "Suspended", 1)
    attempts: list[tuple[bytes, int]] = []

    def listener(msgs: list[MessageExt]) -> ConsumeResult:
        attempts.extend((m.body, m.reconsume_times) for m in msgs)
        return ConsumeResult.SUSPEND if msgs[0].body == b"bad" else ConsumeResult.SUCCESS

    consumer = PushConsumer(
        "g-suspend",
        cluster.namesrv,
        consume_from=FIRST,
        max_reconsume_times=2,
        suspend_current_queue_time_ms=100,
    )
    consumer.subscribe("Suspended")
    consumer.register_listener(listener, orderly=True)
    with consumer, Producer("pg-suspend", cluster.namesrv) as producer:
        for body in (b"first", b"bad", b"after"):
            producer.send_orderly(Message("Suspended", body), "one-key")
        wait_for(lambda: (b"after", 0) in attempts, 20, "the message behind the bad one")
    # the bad message holds its queue: tried 1 + 2 times, then the DLQ, then the next one
    assert attempts == [
        (b"first", 0),
        (b"bad", 0),
        (b"bad", 1),
        (b"bad", 2),
        (b"after", 0),
    ]
    with Admin(cluster.namesrv) as admin:
        assert admin.max_offset(MessageQueue("%DLQ%g-suspend", "broker-a", 0)) == 1


def test_a_queue_locked_by_one_member_is_refused_to_another(cluster: Cluster) -> None:
    create_topic(cluster.namesrv, "Locked", 2)
    consumer = PushConsumer("g-locked", cluster.namesrv)
    consumer.subscribe("Locked")
    consumer.register_listener(lambda _msgs: ConsumeResult.SUCCESS, orderly=True)
    with consumer:
        wait_for(lambda: {q.topic for q in consumer.assignment()} >= {"Locked"}, 15)
        other = Connection(cluster.broker_addr)
        try:
            entries = [OffsetEntry("Locked", 0, 0), OffsetEntry("Locked", 1, 0)]
            result = other.request(LockBatchRequest("g-locked", "someone-else", entries))
            assert expect(result, LockBatchReply).locked == []
        finally:
            other.close()
    # the member unlocked its queues when it shut down
    other = Connection(cluster.broker_addr)
    try:
        result = other.request(LockBatchRequest("g-locked", "someone-else", entries))
        assert set(expect(result, LockBatchReply).locked) == set(entries)
    finally:
        other.close()
