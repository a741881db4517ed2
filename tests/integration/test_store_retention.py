"""Retention, the disk guard and the store queries, seen from clients: namesrv, store and
remoting as real processes, the SDK on the other side."""

from __future__ import annotations

import time
from collections.abc import Callable

import pytest
from itest_support import Cluster, RawClient, wait_for

from ferry.admin import Admin
from ferry.client import ConsumeFromWhere, Message, MessageExt, Producer, PullConsumer
from ferry.protocol import record
from ferry.protocol.codes import ResponseCode
from ferry.protocol.errors import DiskFullError
from ferry.protocol.messages import (
    DeleteExpiredCommitLogRequest,
    ErrorReply,
    GetMinOffsetRequest,
    OffsetReply,
    OkReply,
    SearchOffsetByTimestampRequest,
    ViewMessageReply,
    ViewMessageRequest,
)

pytestmark = pytest.mark.integration

# 64 KiB segments, so a few hundred 1 KB messages span several; only a request deletes
TINY = {
    "mappedFileSizeCommitLog": str(64 * 1024),
    "fileReservedTime": "0",
    "deleteWhen": f"{(time.localtime().tm_hour + 12) % 24:02d}",
}


def drain(consumer: PullConsumer, until: Callable[[list[MessageExt]], bool]) -> list[MessageExt]:
    got: list[MessageExt] = []
    deadline = time.monotonic() + 30
    while not until(got):
        assert time.monotonic() < deadline, f"only {len(got)} messages"
        got.extend(consumer.poll(timeout=1.0))
    return got


def min_offset(broker: RawClient, topic: str) -> int:
    reply, _ = broker.call(GetMinOffsetRequest(topic, 0))
    assert isinstance(reply, OffsetReply), reply
    return reply.offset


def test_a_consumer_behind_deleted_segments_moves_to_the_min_offset_and_goes_on(
    cluster_factory: Callable[..., Cluster],
) -> None:
    cluster = cluster_factory(**TINY)
    with Admin(cluster.namesrv) as admin:
        admin.create_topic("Aging", 1, 1)
    with Producer("pg-aging", cluster.namesrv) as producer:
        for i in range(30):
            producer.send_batch([Message("Aging", f"{i}-{j}".encode() * 200) for j in range(10)])
    with PullConsumer("cg-aging", cluster.namesrv, ConsumeFromWhere.FIRST_OFFSET) as consumer:
        consumer.subscribe("Aging")
        early = drain(consumer, lambda got: len(got) >= 10)
        consumer.commit()
    committed = max(m.queue_offset for m in early) + 1

    broker = RawClient(cluster.broker_addr)
    try:

        def retention_ran() -> bool:
            done, _ = broker.call(DeleteExpiredCommitLogRequest())
            assert isinstance(done, OkReply), done
            return min_offset(broker, "Aging") > committed  # once the flush let it delete

        wait_for(retention_ran, timeout=20, what="retention past the committed offset")
        low = min_offset(broker, "Aging")
    finally:
        broker.close()

    with PullConsumer("cg-aging", cluster.namesrv, ConsumeFromWhere.FIRST_OFFSET) as consumer:
        consumer.subscribe("Aging")
        rest = drain(consumer, lambda got: bool(got) and got[-1].queue_offset == 299)
    assert [m.queue_offset for m in rest] == list(range(low, 300))
    assert rest[-1].body == b"29-9" * 200


def test_a_full_disk_refuses_sends_with_disk_full_while_consumers_read(
    cluster_factory: Callable[..., Cluster],
) -> None:
    cluster = cluster_factory()
    with Producer("pg-full", cluster.namesrv) as producer:
        producer.send_batch([Message("Full", f"kept-{i}".encode()) for i in range(5)])
    cluster.overrides["diskUsedRatioOverride"] = "95"
    cluster.restart_broker()
    with Producer("pg-full", cluster.namesrv, retry_times=0) as producer:
        with pytest.raises(DiskFullError) as refused:
            producer.send(Message("Full", b"refused"))
        assert refused.value.code == ResponseCode.DISK_FULL
    with PullConsumer("cg-full", cluster.namesrv, ConsumeFromWhere.FIRST_OFFSET) as consumer:
        consumer.subscribe("Full")
        got = drain(consumer, lambda got: len(got) >= 5)
    assert sorted(m.body for m in got) == [f"kept-{i}".encode() for i in range(5)]


def test_remoting_serves_a_message_by_offset_id_and_an_offset_by_time(
    cluster_factory: Callable[..., Cluster],
) -> None:
    cluster = cluster_factory()
    with Admin(cluster.namesrv) as admin:
        admin.create_topic("Lookup", 1, 1)
    with Producer("pg-lookup", cluster.namesrv) as producer:
        first = producer.send(Message("Lookup", b"look me up", tags="T", keys=["k1"]))
        producer.send_batch([Message("Lookup", b"more") for _ in range(3)])
    _, phys = record.decode_offset_msg_id(first.offset_msg_id)
    broker = RawClient(cluster.broker_addr)
    try:
        view, payload = broker.call(ViewMessageRequest(phys))
        assert isinstance(view, ViewMessageReply)
        rec = next(record.iter_records(payload[0]))
        assert (rec.body, rec.properties["TAGS"], rec.queue_offset) == (b"look me up", "T", 0)
        assert rec.properties[record.PROPERTY_UNIQ_KEY] == first.msg_id
        missing, _ = broker.call(ViewMessageRequest(phys + 1))
        assert isinstance(missing, ErrorReply)
        assert missing.code == ResponseCode.QUERY_NOT_FOUND

        at, _ = broker.call(SearchOffsetByTimestampRequest("Lookup", 0, rec.store_timestamp))
        assert at == OffsetReply(0)
        future, _ = broker.call(SearchOffsetByTimestampRequest("Lookup", 0, 2**62))
        assert future == OffsetReply(4)
        unknown, _ = broker.call(SearchOffsetByTimestampRequest("NoSuchTopic", 0, 0))
        assert isinstance(unknown, ErrorReply)
        assert unknown.code == ResponseCode.TOPIC_NOT_EXIST
    finally:
        broker.close()
