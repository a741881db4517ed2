"""Where a pop with init_mode "fresh" (the gRPC proxy's) starts a group new to a queue: at the
queue's first message while that was stored less than popInitFreshMillis ago, else at the
queue's end; the key changes live."""

from __future__ import annotations

import pytest
from itest_support import Cluster, RawClient, module_cluster

from ferry.admin import Admin
from ferry.client import Message, Producer
from ferry.protocol import record
from ferry.protocol.codes import PullStatus
from ferry.protocol.messages import POP_INIT_FRESH, PopMessageReply, PopMessageRequest

pytestmark = pytest.mark.integration
cluster = module_cluster
DEFAULT_FRESH_MS = str(30 * 60 * 1000)


def produce(cluster: Cluster, topic: str, bodies: list[bytes]) -> None:
    with Admin(cluster.namesrv) as admin:
        admin.create_topic(topic, 1, 1)
    with Producer("pg-init", cluster.namesrv) as producer:
        for body in bodies:
            producer.send(Message(topic, body))


def pop(cluster: Cluster, group: str, topic: str) -> list[bytes]:
    req = PopMessageRequest(
        consumer_group=group, topic=topic, invisible_ms=30_000, init_mode=POP_INIT_FRESH
    )
    raw = RawClient(cluster.broker_addr)
    try:
        reply, frames = raw.call(req)
    finally:
        raw.close()
    assert isinstance(reply, PopMessageReply)
    if reply.status != PullStatus.FOUND:
        return []
    return [r.body for r in record.iter_records(bytes(frames[0]))]


def test_a_new_group_starts_at_the_first_message_of_a_fresh_queue(cluster: Cluster) -> None:
    produce(cluster, "InitFresh", [b"a", b"b", b"c"])
    assert pop(cluster, "cg-init-fresh", "InitFresh") == [b"a", b"b", b"c"]


def test_a_new_group_starts_at_the_end_of_a_queue_whose_first_message_is_old(
    cluster: Cluster,
) -> None:
    produce(cluster, "InitOld", [b"old-1", b"old-2"])
    with Admin(cluster.namesrv) as admin:
        admin.update_broker_config({"popInitFreshMillis": "1"})  # anything stored is old
        try:
            assert pop(cluster, "cg-init-old", "InitOld") == []
            produce(cluster, "InitOld", [b"new"])
            assert pop(cluster, "cg-init-old", "InitOld") == [b"new"]
            # a group placed already keeps its offset when the queue turns fresh again
            admin.update_broker_config({"popInitFreshMillis": DEFAULT_FRESH_MS})
            produce(cluster, "InitOld", [b"newer"])
            assert pop(cluster, "cg-init-old", "InitOld") == [b"newer"]
            # and a group new to it now starts at its first message
            assert pop(cluster, "cg-init-late", "InitOld") == [b"old-1", b"old-2", b"new", b"newer"]
        finally:
            admin.update_broker_config({"popInitFreshMillis": DEFAULT_FRESH_MS})
