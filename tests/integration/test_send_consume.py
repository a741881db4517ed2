"""Issue 2's end-to-end proofs: send and consume across real namesrv, store and remoting."""

from __future__ import annotations

import threading
import time
from collections import defaultdict

from itest_support import Cluster, module_cluster, wait_for  # noqa: F401 - the cluster fixture

from ferry.admin import Admin
from ferry.client import (
    ConsumeFromWhere,
    Message,
    MessageExt,
    Producer,
    PullConsumer,
    SendStatus,
    TopicNotExistError,
)

TOTAL = 10_000


def _drain(consumer: PullConsumer, want: int, timeout: float = 60.0) -> list[MessageExt]:
    got: list[MessageExt] = []
    deadline = time.monotonic() + timeout
    while len(got) < want and time.monotonic() < deadline:
        got.extend(consumer.poll(timeout=1.0))
    return got


def test_ten_thousand_messages_arrive_intact_and_in_queue_order(cluster: Cluster) -> None:
    with Admin(cluster.namesrv) as admin:
        admin.create_topic("Orders", 4, 4)
    expected: dict[str, tuple[bytes, str, list[str]]] = {}
    msg_ids: dict[str, str] = {}
    with Producer("pg-orders", cluster.namesrv) as producer:
        batch: list[Message] = []
        for i in range(TOTAL):
            body = f"order-{i}".encode() * (1 + i % 7)
            tag, keys = f"Tag{i % 3}", [f"k{i}", f"c{i % 10}"]
            expected[str(i)] = (body, tag, keys)
            msg = Message(
                "Orders", body, tags=tag, keys=keys, properties={"seq": str(i), "note": "ünïcode ✓"}
            )
            if i % 2:  # half sent one by one, half in batches of 100
                result = producer.send(msg)
                assert result.status is SendStatus.SEND_OK
                msg_ids[str(i)] = result.msg_id
            else:
                batch.append(msg)
            if len(batch) == 100:
                producer.send_batch(batch)
                batch = []
        if batch:
            producer.send_batch(batch)

    with PullConsumer(
        "cg-orders", cluster.namesrv, consume_from=ConsumeFromWhere.FIRST_OFFSET
    ) as consumer:
        consumer.subscribe("Orders")
        got = _drain(consumer, TOTAL)
    assert len(got) == TOTAL
    assert {m.properties["seq"] for m in got} == set(expected)
    per_queue: dict[int, list[int]] = defaultdict(list)
    for m in got:
        seq = m.properties["seq"]
        assert (m.body, m.tags, m.keys) == expected[seq]
        assert m.properties["note"] == "ünïcode ✓"
        assert m.topic == "Orders"
        if seq in msg_ids:
            assert m.msg_id == msg_ids[seq]
        per_queue[m.queue.queue_id].append(m.queue_offset)
    assert len(per_queue) == 4  # round robin reached every queue
    for offsets in per_queue.values():
        assert offsets == list(range(len(offsets)))  # queue-offset order, no gaps


def test_committed_offsets_survive_a_broker_restart(cluster: Cluster) -> None:
    with Producer("pg-restart", cluster.namesrv) as producer:
        for i in range(40):
            producer.send(Message("Restart", f"m{i}".encode()))
    with PullConsumer(
        "cg-restart", cluster.namesrv, consume_from=ConsumeFromWhere.FIRST_OFFSET, auto_commit=False
    ) as consumer:
        consumer.subscribe("Restart")
        first = _drain(consumer, 40)
        assert len(first) == 40
        consumer.commit()
    cluster.restart_broker()
    with Producer("pg-restart", cluster.namesrv) as producer:
        for i in range(40, 50):
            producer.send(Message("Restart", f"m{i}".encode()))
    with PullConsumer(
        "cg-restart", cluster.namesrv, consume_from=ConsumeFromWhere.FIRST_OFFSET
    ) as consumer:
        consumer.subscribe("Restart")
        rest = _drain(consumer, 10)
        extra = consumer.poll(timeout=0.5)
    assert sorted(m.body for m in rest) == sorted(f"m{i}".encode() for i in range(40, 50))
    assert extra == []  # nothing before the committed offsets came back


def test_poll_on_empty_queue_returns_when_a_message_arrives(cluster: Cluster) -> None:
    with Admin(cluster.namesrv) as admin:
        admin.create_topic("Quiet", 1, 1)
    with (
        PullConsumer("cg-quiet", cluster.namesrv) as consumer,
        Producer("pg-quiet", cluster.namesrv) as producer,
    ):
        consumer.subscribe("Quiet")
        assert consumer.poll(timeout=0.5) == []  # pulls are now held by the broker
        timer = threading.Timer(0.5, lambda: producer.send(Message("Quiet", b"wake")))
        started = time.monotonic()
        timer.start()
        got = consumer.poll(timeout=10.0)
        waited = time.monotonic() - started
        timer.join()
    assert [m.body for m in got] == [b"wake"]
    assert waited < 3.0, f"poll took {waited:.2f}s: it waited for the hold time, not the message"


def test_routes_and_clusters_reach_the_name_server(cluster: Cluster) -> None:
    with Admin(cluster.namesrv) as admin:
        admin.create_topic("Routed", 2, 2)
        route = wait_for(lambda: _route_or_none(admin, "Routed"), what="route of Routed")
        info = admin.cluster_info()
        topics = admin.topic_list()
    assert [q.write_queue_nums for q in route.queue_datas] == [2]
    assert route.broker_datas[0].broker_addrs[0] == cluster.broker_addr
    assert info.clusters == {"DefaultCluster": ["broker-a"]}
    assert "Routed" in topics


def _route_or_none(admin: Admin, topic: str) -> object:
    try:
        return admin.topic_route(topic)
    except Exception:  # noqa: BLE001 - not there yet
        return None


def test_a_send_on_a_stale_route_after_the_topic_shrank_is_retried_and_succeeds(
    cluster: Cluster,
) -> None:
    """The producer's cached route names 4 queues, the topic now has 2: a send to queue 2 or
    3 is refused as retriable, the route refreshed, and the send goes to a queue that exists
    (as with the default route of a topic created a moment before its first send)."""
    with Admin(cluster.namesrv) as admin:
        admin.create_topic("Shrunk", 4, 4)

        def routed() -> int:
            try:
                return len(admin.queues("Shrunk"))
            except TopicNotExistError:  # the broker has not re-registered it yet
                return 0

        wait_for(lambda: routed() == 4, 20, "4 routed queues")
        with Producer("pg-shrunk", cluster.namesrv) as producer:
            first = producer.send(Message("Shrunk", b"before"))  # caches the 4-queue route
            assert first.status is SendStatus.SEND_OK
            admin.create_topic("Shrunk", 2, 2)  # updateTopic: fewer queues
            results = [producer.send(Message("Shrunk", f"after-{i}".encode())) for i in range(8)]
    assert all(r.status is SendStatus.SEND_OK for r in results)
    assert {r.queue.queue_id for r in results} <= {0, 1}
