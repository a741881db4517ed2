"""Producers against real processes: retries that avoid a failed broker, latency fault
avoidance of a stalled one, compressed bodies, name server failover."""

from __future__ import annotations

import signal
import time
from collections import Counter
from pathlib import Path

import pytest
from consume_support import Received, add_broker, create_topic, remoting_of
from itest_support import Cluster, wait_for

from ferry.client import (
    ConsumeFromWhere,
    ConsumeResult,
    FerryError,
    Message,
    MessageExt,
    Producer,
    PushConsumer,
    SendStatus,
)
from ferry.client.transport import Connection, expect
from ferry.protocol import record
from ferry.protocol.messages import ViewMessageReply, ViewMessageRequest
from ferry.runtime.launcher import LocalCluster, start_broker_services, start_service

pytestmark = pytest.mark.integration

FIRST = ConsumeFromWhere.FIRST_OFFSET


def test_retries_avoid_a_broker_that_failed(cluster: Cluster) -> None:
    broker_b = add_broker(cluster, "broker-b")
    create_topic(cluster.namesrv, "TwoBrokers", 2, brokers=2)
    with Producer("pg-retry-b", cluster.namesrv, send_timeout_ms=3000) as producer:
        warm = [producer.send(Message("TwoBrokers", b"warm")) for _ in range(8)]
        assert {r.queue.broker_name for r in warm} == {"broker-a", "broker-b"}
        remoting_of(broker_b).kill()  # still routed: the name server has not noticed
        started = time.monotonic()
        results = [producer.send(Message("TwoBrokers", f"m{i}".encode())) for i in range(12)]
        took = time.monotonic() - started
    assert {r.status for r in results} == {SendStatus.SEND_OK}
    assert {r.queue.broker_name for r in results} == {"broker-a"}
    # each failed attempt failed at once: no send waited out its 3 s timeout
    assert took < 3.0


def test_latency_fault_avoidance_isolates_a_stalled_broker(cluster: Cluster) -> None:
    broker_b = remoting_of(add_broker(cluster, "broker-b"))
    create_topic(cluster.namesrv, "Stalled", 2, brokers=2)
    with Producer(
        "pg-stalled",
        cluster.namesrv,
        send_timeout_ms=800,
        send_latency_fault_enable=True,
    ) as producer:
        warm = [producer.send(Message("Stalled", b"warm")) for _ in range(8)]
        assert {r.queue.broker_name for r in warm} == {"broker-a", "broker-b"}
        broker_b.proc.send_signal(signal.SIGSTOP)  # connected, but answers nothing
        try:
            outcomes: list[str] = []
            started = time.monotonic()
            for i in range(16):
                try:
                    outcomes.append(
                        producer.send(Message("Stalled", f"m{i}".encode())).queue.broker_name
                    )
                except FerryError as err:
                    outcomes.append(type(err).__name__)
            took = time.monotonic() - started
        finally:
            broker_b.proc.send_signal(signal.SIGCONT)
    counts = Counter(outcomes)
    # one send ran into the stalled broker; it was then avoided for the isolation time
    assert counts["broker-a"] >= 15, outcomes
    assert counts["broker-b"] == 0
    assert took < 5.0


def test_a_body_over_compress_over_is_stored_compressed_and_read_back_whole(
    cluster: Cluster,
) -> None:
    create_topic(cluster.namesrv, "Compressed", 1)
    big = b"ferry carries messages " * 400  # 9.2 KiB, compresses well
    received = Received()
    fail_first = lambda m: (  # noqa: E731 - the retry copy must stay readable too
        ConsumeResult.RECONSUME_LATER if m.reconsume_times == 0 else ConsumeResult.SUCCESS
    )
    consumer = PushConsumer("g-compressed", cluster.namesrv, consume_from=FIRST)
    consumer.subscribe("Compressed")
    consumer.register_listener(received.listener(verdict=fail_first))
    with consumer, Producer("pg-compressed", cluster.namesrv) as producer:
        sent = producer.send(Message("Compressed", big))
        small = producer.send(Message("Compressed", b"tiny"))
        wait_for(lambda: received.count() == 4, 20, "both messages, each retried once")
    with received.lock:
        bigs: list[MessageExt] = [m for m in received.msgs if m.msg_id == sent.msg_id]
        smalls = [m for m in received.msgs if m.msg_id == small.msg_id]
    assert [m.body for m in bigs] == [big, big]
    assert all(m.sysflag & record.SYSFLAG_COMPRESSED for m in bigs)
    assert not any(m.sysflag & record.SYSFLAG_COMPRESSED for m in smalls)
    # as stored: compressed, flagged
    phys = record.decode_offset_msg_id(sent.offset_msg_id)[1]
    conn = Connection(cluster.broker_addr)
    try:
        reply = conn.request(ViewMessageRequest(phys_offset=phys))
        expect(reply, ViewMessageReply)
        (stored,) = record.iter_records(bytes(reply[1][0]))
    finally:
        conn.close()
    assert stored.sysflag & record.SYSFLAG_COMPRESSED
    assert len(stored.body) < len(big) // 4


def test_producers_and_consumers_carry_on_when_one_name_server_of_two_dies(
    tmp_path: Path,
) -> None:
    first = start_service("namesrv", ["--set", "listenPort=0"])
    second = start_service("namesrv", ["--set", "listenPort=0"])
    namesrv = f"{first.endpoints['addr']};{second.endpoints['addr']}"
    local = LocalCluster(processes=[first, second], namesrv_addr=namesrv)
    try:
        start_broker_services(local, str(tmp_path / "broker-a"), namesrv_addr=namesrv)
        create_topic(namesrv, "Failover", 2)
        received = Received()
        consumer = PushConsumer("g-failover", namesrv, consume_from=FIRST)
        consumer.subscribe("Failover")
        consumer.register_listener(received.listener())
        with consumer, Producer("pg-failover", namesrv, poll_namesrv_interval_ms=200) as producer:
            producer.send(Message("Failover", b"before"))
            wait_for(lambda: received.count() == 1, 15, "the first message")
            first.kill()
            # route refreshes hit the dead name server first and move on to the other one
            for i in range(5):
                producer.send(Message("Failover", f"after{i}".encode()))
            producer.send(Message("FailoverNew", b"a topic routed after the death"))
            wait_for(lambda: received.count() == 6, 15, "the later messages")
    finally:
        local.stop()
