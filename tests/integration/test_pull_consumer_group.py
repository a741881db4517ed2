"""Lite pull consumers against real processes: rebalancing among a group's members, pause and
resume, CONSUME_FROM_TIMESTAMP."""

from __future__ import annotations

import logging
import time
from pathlib import Path

import pytest
from consume_support import create_topic
from itest_support import Cluster, module_cluster, wait_for  # noqa: F401 - the cluster fixture

from ferry.client import (
    ConsumeFromWhere,
    Message,
    MessageExt,
    MessageModel,
    MessageQueue,
    Producer,
    PullConsumer,
)

pytestmark = pytest.mark.integration

FIRST = ConsumeFromWhere.FIRST_OFFSET


def drain(consumer: PullConsumer, into: list[MessageExt], want: int) -> bool:
    into.extend(consumer.poll(timeout=0.2))
    return len(into) >= want


def test_subscribed_pull_consumers_share_a_groups_queues_and_rebalance(cluster: Cluster) -> None:
    create_topic(cluster.namesrv, "Shared", 4)
    one = PullConsumer("g-shared", cluster.namesrv, FIRST, auto_commit_interval_ms=200)
    two = PullConsumer("g-shared", cluster.namesrv, FIRST, auto_commit_interval_ms=200)
    with one, two, Producer("pg-shared", cluster.namesrv) as producer:
        one.subscribe("Shared")
        two.subscribe("Shared")

        def split() -> bool:
            a, b = set(one.assignment()), set(two.assignment())
            return len(a) == 2 and len(b) == 2 and not a & b

        wait_for(split, 15, "two queues each")
        for i in range(4):
            producer.send_batch([Message("Shared", f"{i}-{j}".encode()) for j in range(10)])
        got_one: list[MessageExt] = []
        got_two: list[MessageExt] = []
        wait_for(lambda: drain(one, got_one, 20) & drain(two, got_two, 20), 20, "40 messages")
        assert {m.queue for m in got_one} == set(one.assignment())
        assert {m.queue for m in got_two} == set(two.assignment())
        assert len({m.body for m in got_one + got_two}) == 40
        one.commit()
        two.shutdown()  # commits and leaves: its queues go to the other member
        wait_for(lambda: len(one.assignment()) == 4, 15, "all queues on the remaining member")
        for i in range(4):  # one to each queue
            producer.send_batch([Message("Shared", f"late{i}".encode())])
        late: list[MessageExt] = []
        wait_for(lambda: drain(one, late, 4), 15, "the late messages")
        assert one.poll(timeout=0.3) == []
    # the leaver's queues resumed where it had committed: nothing it consumed came back
    assert sorted(m.body for m in late) == [f"late{i}".encode() for i in range(4)]


def test_a_paused_queue_holds_its_messages_until_resumed(cluster: Cluster) -> None:
    create_topic(cluster.namesrv, "Paused", 2)
    with (
        PullConsumer("g-paused", cluster.namesrv, FIRST) as consumer,
        Producer("pg-paused", cluster.namesrv) as producer,
    ):
        queues = [MessageQueue("Paused", "broker-a", i) for i in range(2)]
        consumer.assign(queues)
        consumer.pause([queues[0]])
        sent = {
            producer.send_batch([Message("Paused", f"b{n}-{i}".encode()) for i in range(5)]).queue
            for n in range(2)
        }
        assert sent == set(queues)
        got: list[MessageExt] = []
        wait_for(lambda: drain(consumer, got, 5), 15, "the running queue's messages")
        assert consumer.poll(timeout=0.5) == []
        assert {m.queue for m in got} == {queues[1]}
        assert consumer.paused() == [queues[0]]
        consumer.resume([queues[0]])
        more: list[MessageExt] = []
        wait_for(lambda: drain(consumer, more, 5), 15, "the resumed queue's messages")
    assert {m.queue for m in more} == {queues[0]}


def test_consume_from_timestamp_starts_at_what_was_stored_after_it(cluster: Cluster) -> None:
    create_topic(cluster.namesrv, "Timed", 1)
    with Producer("pg-timed", cluster.namesrv) as producer:
        producer.send_batch([Message("Timed", f"old{i}".encode()) for i in range(5)])
        cut = int(time.time() * 1000) + 1
        wait_for(lambda: time.time() * 1000 > cut + 1, 5, "the clock to pass the cut")
        producer.send_batch([Message("Timed", f"new{i}".encode()) for i in range(3)])
    with PullConsumer(
        "g-timed", cluster.namesrv, ConsumeFromWhere.TIMESTAMP, consume_timestamp_ms=cut
    ) as consumer:
        consumer.subscribe("Timed")
        got: list[MessageExt] = []
        wait_for(lambda: drain(consumer, got, 3), 15, "the new messages")
        assert consumer.poll(timeout=0.3) == []
    assert [m.body for m in got] == [b"new0", b"new1", b"new2"]


def test_broadcasting_pull_consumers_each_read_everything_and_keep_offsets_locally(
    cluster: Cluster, tmp_path: Path
) -> None:
    create_topic(cluster.namesrv, "PollAll", 2)
    offsets = str(tmp_path / "offsets")

    def member(name: str) -> PullConsumer:
        consumer = PullConsumer(
            "g-poll-all",
            cluster.namesrv,
            FIRST,
            message_model=MessageModel.BROADCASTING,
            instance_name=name,
            offset_store_dir=offsets,
        )
        consumer.start()
        consumer.subscribe("PollAll")
        return consumer

    with Producer("pg-poll-all", cluster.namesrv) as producer:
        for i in range(2):
            producer.send_batch([Message("PollAll", f"m{i}-{j}".encode()) for j in range(5)])
        one, two = member("one"), member("two")
        try:
            got_one: list[MessageExt] = []
            got_two: list[MessageExt] = []
            wait_for(lambda: drain(one, got_one, 10) & drain(two, got_two, 10), 20, "both")
            assert sorted(m.body for m in got_one) == sorted(m.body for m in got_two)
        finally:
            one.shutdown()
            two.shutdown()  # commits to its file
        producer.send_batch([Message("PollAll", b"later")])
    again = member("two")
    try:
        later: list[MessageExt] = []
        wait_for(lambda: drain(again, later, 1), 20, "the later message")
        assert again.poll(timeout=0.3) == []
    finally:
        again.shutdown()
    assert [m.body for m in later] == [b"later"]


def test_a_subscription_to_a_topic_that_does_not_exist_is_said_once(
    cluster: Cluster, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.WARNING, logger="ferry.client.consumer")
    create_topic(cluster.namesrv, "RealTopic", 2)
    with PullConsumer("g-typo", cluster.namesrv, FIRST, rebalance_interval_ms=200) as consumer:
        consumer.subscribe("RealTopic")
        consumer.subscribe("RealTopc")  # the typo
        wait_for(lambda: len(consumer.assignment()) == 2, 15, "RealTopic's queues")
        deadline = time.monotonic() + 2.5  # several rebalances (every 0.2 s, quick ones at 1 s)
        while time.monotonic() < deadline:
            assert consumer.poll(timeout=0.3) == []
    said = [r.getMessage() for r in caplog.records if r.levelno == logging.WARNING]
    typo = [m for m in said if "RealTopc" in m]
    assert len(typo) == 1, said
    assert "does not exist" in typo[0]
    assert cluster.namesrv in typo[0]
    assert not [m for m in said if "RealTopic " in m]  # the real topic is not warned about
