"""broker-store and broker-remoting as real processes, driven over ZeroMQ as a client would.

The name server address points where nothing listens: registration must fail quietly and
never get in the way of serving clients.
"""

from __future__ import annotations

import json
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import msgspec
import pytest
import zmq

from ferry.protocol.codes import PullStatus, ResponseCode, SendStatus
from ferry.protocol.framing import DELIMITER, RequestCodec, RequestEnvelope
from ferry.protocol.messages import (
    AnyReply,
    AnyRequest,
    BrokerRuntimeInfoReply,
    ConsumerData,
    ConsumerIdsChangedNotice,
    ConsumerListReply,
    ErrorReply,
    GetAllTopicConfigRequest,
    GetBrokerRuntimeInfoRequest,
    GetConsumerListByGroupRequest,
    GetMaxOffsetRequest,
    GetMinOffsetRequest,
    GetTopicStatsRequest,
    HeartbeatRequest,
    OffsetEntry,
    OffsetReply,
    OkReply,
    PingRequest,
    PongReply,
    PullMessageReply,
    PullMessageRequest,
    QueryConsumerOffsetRequest,
    SendMessageReply,
    SendMessageRequest,
    SubscriptionData,
    TopicConfig,
    TopicConfigListReply,
    TopicStatsReply,
    UpdateConsumerOffsetRequest,
    UpdateTopicRequest,
)
from ferry.protocol.record import Record, encode_properties, encode_record, iter_records
from ferry.protocol.version import PROTOCOL_ID
from ferry.runtime.launcher import (
    LocalCluster,
    service_args,
    start_broker_services,
    start_service,
)

pytestmark = pytest.mark.integration

NOBODY_LISTENS = "127.0.0.1:1"
MAX_MESSAGE_SIZE = 64 * 1024
REPLY_TIMEOUT_MS = 10_000


class Client:
    """A bare DEALER speaking the Ferry protocol, as the SDK will."""

    def __init__(self, ctx: zmq.Context[Any], addr: str) -> None:
        self.sock = ctx.socket(zmq.DEALER)
        self.sock.linger = 0
        self.sock.connect(f"tcp://{addr}")
        self.codec = RequestCodec()
        self.next_id = 0

    def send_raw(self, frames: list[bytes]) -> tuple[Any, list[bytes]]:
        self.sock.send_multipart(frames)
        return self.receive()

    def receive(self) -> tuple[Any, list[bytes]]:
        assert self.sock.poll(REPLY_TIMEOUT_MS), "no reply in time"
        frames = self.sock.recv_multipart()
        env, payload = self.codec.decode_reply(frames[1:])
        if isinstance(env.body, ConsumerIdsChangedNotice):  # sent unasked: not a reply
            return self.receive()
        return env, payload

    def call(
        self, body: AnyRequest, payload: list[bytes] | None = None
    ) -> tuple[AnyReply, list[bytes]]:
        self.next_id += 1
        env = RequestEnvelope(self.next_id, body)
        reply, frames = self.send_raw(self.codec.request_frames(env, payload))
        assert reply.id == self.next_id
        return reply.body, frames

    def error(self, body: AnyRequest, payload: list[bytes] | None = None) -> ErrorReply:
        reply, _ = self.call(body, payload)
        assert isinstance(reply, ErrorReply), reply
        return reply


def record(topic: str, body: bytes, tags: str = "") -> bytes:
    props = encode_properties({"TAGS": tags} if tags else {})
    return encode_record(topic.encode(), body, props)


def send(client: Client, topic: str, records: list[bytes], queue_id: int = -1) -> SendMessageReply:
    reply, _ = client.call(
        SendMessageRequest(
            producer_group="pg",
            topic=topic,
            queue_id=queue_id,
            count=len(records),
            default_topic="TBW102",
            default_topic_queue_nums=4,
        ),
        [b"".join(records)],
    )
    assert isinstance(reply, SendMessageReply), reply
    return reply


def pull(
    client: Client, topic: str, queue_id: int, **kw: Any
) -> tuple[PullMessageReply, list[Record]]:
    reply, frames = client.call(
        PullMessageRequest(consumer_group="cg", topic=topic, queue_id=queue_id, **kw)
    )
    assert isinstance(reply, PullMessageReply), reply
    records = [r for frame in frames for r in iter_records(frame)]
    return reply, records


@pytest.fixture(scope="module")
def broker(tmp_path_factory: pytest.TempPathFactory) -> Iterator[LocalCluster]:
    root = tmp_path_factory.mktemp("broker")
    with LocalCluster() as cluster:
        start_broker_services(
            cluster,
            str(root),
            namesrv_addr=NOBODY_LISTENS,
            overrides={
                "mappedFileSizeCommitLog": str(4 * 1024 * 1024),
                "mappedFileSizeConsumeQueue": str(20 * 10_000),
                "maxMessageSize": str(MAX_MESSAGE_SIZE),
                "registerNameServerPeriod": "1000",
            },
        )
        yield cluster


@pytest.fixture
def client(broker: LocalCluster) -> Iterator[Client]:
    ctx: zmq.Context[Any] = zmq.Context()
    c = Client(ctx, broker.broker_addr)
    yield c
    c.sock.close()
    ctx.term()


def test_ready_line_reports_the_bound_client_address(broker: LocalCluster) -> None:
    host, _, port = broker.broker_addr.rpartition(":")
    assert host == "127.0.0.1"
    assert int(port) > 0


def test_sent_records_come_back_from_a_pull(broker: LocalCluster, client: Client) -> None:
    first = send(client, "SendPull", [record("SendPull", b"m0", "TagA"), record("SendPull", b"m1")])
    assert first.status == SendStatus.SEND_OK
    assert 0 <= first.queue_id < 4  # auto-created with min(4, defaultTopicQueueNums)
    assert first.queue_offset == 0
    assert len(first.phys_offsets) == 2
    assert first.store_host == broker.broker_addr
    assert first.broker_name == "broker-a"

    again = send(client, "SendPull", [record("SendPull", b"m2", "TagB")], first.queue_id)
    assert (again.queue_id, again.queue_offset) == (first.queue_id, 2)

    reply, records = pull(client, "SendPull", first.queue_id, queue_offset=0)
    assert reply.status == PullStatus.FOUND
    assert reply.count == 3
    assert reply.next_begin_offset == 3
    assert [r.body for r in records] == [b"m0", b"m1", b"m2"]
    assert [r.queue_offset for r in records] == [0, 1, 2]
    assert [r.phys_offset for r in records] == [*first.phys_offsets, *again.phys_offsets]
    assert records[0].properties == {"TAGS": "TagA"}


def test_pull_filters_by_tag_expression(client: Client) -> None:
    sent = send(
        client,
        "Tagged",
        [record("Tagged", b"a", "TagA"), record("Tagged", b"b", "TagB"), record("Tagged", b"c")],
        queue_id=0,
    )
    assert sent.queue_offset == 0

    _, records = pull(client, "Tagged", 0, queue_offset=0, expression="TagB || TagZ")
    assert [r.body for r in records] == [b"b"]


def test_round_robin_spreads_sends_over_write_queues(client: Client) -> None:
    queues = {send(client, "Spread", [record("Spread", b"x")]).queue_id for _ in range(8)}
    assert queues == {0, 1, 2, 3}


def test_offsets_commit_query_and_queue_bounds(client: Client) -> None:
    sent = send(client, "Offsets", [record("Offsets", b"%d" % i) for i in range(5)], queue_id=1)
    assert sent.queue_offset == 0

    reply, _ = pull(client, "Offsets", 1, queue_offset=2, commit_offset=2)
    assert reply.count == 3
    assert client.call(QueryConsumerOffsetRequest("cg", "Offsets", 1))[0] == OffsetReply(2)

    ok, _ = client.call(UpdateConsumerOffsetRequest("cg", [OffsetEntry("Offsets", 1, 5)]))
    assert ok == OkReply()
    assert client.call(QueryConsumerOffsetRequest("cg", "Offsets", 1))[0] == OffsetReply(5)

    missing = client.error(QueryConsumerOffsetRequest("other-group", "Offsets", 1))
    assert missing.code == ResponseCode.QUERY_NOT_FOUND

    assert client.call(GetMaxOffsetRequest("Offsets", 1))[0] == OffsetReply(5)
    assert client.call(GetMinOffsetRequest("Offsets", 1))[0] == OffsetReply(0)


def test_pull_at_the_end_finds_no_new_message(client: Client) -> None:
    send(client, "Drained", [record("Drained", b"only")], queue_id=0)
    reply, records = pull(client, "Drained", 0, queue_offset=1)
    assert reply.status == PullStatus.NO_NEW_MSG
    assert records == []


def test_heartbeat_makes_the_client_a_group_member(client: Client) -> None:
    consumer = ConsumerData(group="hb-group", subscriptions=[SubscriptionData("Orders", "*")])
    for cid in ("10.0.0.2@b", "10.0.0.1@a"):
        assert client.call(HeartbeatRequest(cid, consumers=[consumer]))[0] == OkReply()
    listed, _ = client.call(GetConsumerListByGroupRequest("hb-group"))
    assert listed == ConsumerListReply(["10.0.0.1@a", "10.0.0.2@b"])


def test_topic_admin_and_stats(broker: LocalCluster, client: Client) -> None:
    config = TopicConfig("Admin", read_queue_nums=2, write_queue_nums=2)
    assert client.call(UpdateTopicRequest(config))[0] == OkReply()
    send(client, "Admin", [record("Admin", b"x")], queue_id=1)

    listed, _ = client.call(GetAllTopicConfigRequest())
    assert isinstance(listed, TopicConfigListReply)
    assert config in listed.topics
    assert "TBW102" in {t.topic_name for t in listed.topics}

    stats, _ = client.call(GetTopicStatsRequest("Admin"))
    assert isinstance(stats, TopicStatsReply)
    assert [(q.queue_id, q.max_offset) for q in stats.queues] == [(0, 0), (1, 1)]

    unknown = client.error(GetTopicStatsRequest("NoSuchTopic"))
    assert unknown.code == ResponseCode.TOPIC_NOT_EXIST

    info, _ = client.call(GetBrokerRuntimeInfoRequest())
    assert isinstance(info, BrokerRuntimeInfoReply)
    assert info.info["brokerName"] == "broker-a"
    assert int(info.info["commitLogMaxOffset"]) > 0
    assert int(info.info["putMessageTotal"]) >= 1


def test_bad_requests_get_typed_errors_and_the_broker_keeps_serving(client: Client) -> None:
    garbage, _ = client.send_raw([DELIMITER, b"junk", b"\xff\x00"])
    assert garbage.body.code == ResponseCode.BAD_FRAME

    not_msgpack, _ = client.send_raw([DELIMITER, PROTOCOL_ID, b"\xc1"])
    assert not_msgpack.body.code == ResponseCode.BAD_FRAME

    unknown_tag = msgspec.msgpack.encode({"id": 77, "body": {"t": "no_such_request"}})
    unknown, _ = client.send_raw([DELIMITER, PROTOCOL_ID, unknown_tag])
    assert (unknown.id, unknown.body.code) == (77, ResponseCode.REQUEST_CODE_NOT_SUPPORTED)

    bad_topic = client.error(
        SendMessageRequest("pg", "bad topic!", -1, default_topic="TBW102"),
        [record("bad", b"x")],
    )
    assert bad_topic.code == ResponseCode.INVALID_PARAMETER

    oversized = client.error(
        SendMessageRequest("pg", "Big", -1, default_topic="TBW102"),
        [record("Big", bytes(2 * MAX_MESSAGE_SIZE + 64 * 1024))],
    )
    assert oversized.code == ResponseCode.MESSAGE_ILLEGAL

    two_frames = client.error(
        SendMessageRequest("pg", "Two", -1, count=2, default_topic="TBW102"),
        [record("Two", b"a"), record("Two", b"b")],
    )
    assert two_frames.code == ResponseCode.INVALID_PARAMETER

    no_auto = client.error(SendMessageRequest("pg", "NotCreated", -1), [record("NotCreated", b"x")])
    assert no_auto.code == ResponseCode.TOPIC_NOT_EXIST

    torn = client.error(
        SendMessageRequest("pg", "Torn", -1, default_topic="TBW102"), [record("Torn", b"x")[:-1]]
    )
    assert torn.code != ResponseCode.SUCCESS

    send(client, "BadQueue", [record("BadQueue", b"x")])
    bad_queue = client.error(SendMessageRequest("pg", "BadQueue", 4), [record("BadQueue", b"x")])
    assert bad_queue.code == ResponseCode.INVALID_PARAMETER

    send(client, "Parse", [record("Parse", b"x")], queue_id=0)
    parse = client.error(PullMessageRequest("cg", "Parse", 0, 0, expression="||"))
    assert parse.code == ResponseCode.SUBSCRIPTION_PARSE_FAILED

    no_topic = client.error(PullMessageRequest("cg", "NeverSent", 0, 0))
    assert no_topic.code == ResponseCode.TOPIC_NOT_EXIST

    pong, _ = client.call(PingRequest())
    assert isinstance(pong, PongReply)
    assert send(client, "StillWorks", [record("StillWorks", b"ok")]).status == SendStatus.SEND_OK


def test_stop_saves_offsets_and_topics(tmp_path: Path) -> None:
    with LocalCluster() as cluster:
        start_broker_services(
            cluster,
            str(tmp_path),
            namesrv_addr=NOBODY_LISTENS,
            overrides={
                "mappedFileSizeCommitLog": str(4 * 1024 * 1024),
                "mappedFileSizeConsumeQueue": str(20 * 10_000),
                "flushConsumerOffsetInterval": "600000",  # only the stop writes them
            },
        )
        ctx: zmq.Context[Any] = zmq.Context()
        client = Client(ctx, cluster.broker_addr)
        try:
            send(client, "Saved", [record("Saved", b"x")], queue_id=0)
            client.call(UpdateConsumerOffsetRequest("saver", [OffsetEntry("Saved", 0, 1)]))
        finally:
            client.sock.close()
            ctx.term()
        assert cluster.get("broker-remoting").stop() == 0

    config_dir = tmp_path / "config"
    offsets = json.loads((config_dir / "consumerOffset.json").read_text())
    assert offsets["offsetTable"]["Saved@saver"] == {"0": 1}
    topics = json.loads((config_dir / "topics.json").read_text())
    assert topics["topicConfigTable"]["Saved"]["topic_name"] == "Saved"
    groups = json.loads((config_dir / "subscriptionGroup.json").read_text())
    assert "saver" in groups["subscriptionGroupTable"]


def test_held_pull_wakes_when_a_message_arrives(broker: LocalCluster, client: Client) -> None:
    send(client, "Held", [record("Held", b"before")], queue_id=0)
    ctx: zmq.Context[Any] = zmq.Context()
    consumer = Client(ctx, broker.broker_addr)
    try:
        consumer.next_id = 1
        started = time.monotonic()
        consumer.sock.send_multipart(
            consumer.codec.request_frames(
                RequestEnvelope(1, PullMessageRequest("cg", "Held", 0, 1, suspend_ms=10_000))
            )
        )
        assert consumer.sock.poll(200) == 0  # held: nothing to return yet
        send(client, "Held", [record("Held", b"after")], queue_id=0)
        reply, frames = consumer.receive()
        assert time.monotonic() - started < 5
    finally:
        consumer.sock.close()
        ctx.term()
    assert isinstance(reply.body, PullMessageReply)
    assert reply.body.status == PullStatus.FOUND
    assert [r.body for f in frames for r in iter_records(f)] == [b"after"]


def test_held_pull_with_nothing_new_answers_after_the_hold(client: Client) -> None:
    send(client, "Quiet", [record("Quiet", b"x")], queue_id=0)
    started = time.monotonic()
    reply, _ = pull(client, "Quiet", 0, queue_offset=1, suspend_ms=400)
    assert time.monotonic() - started >= 0.35
    assert reply.status == PullStatus.NO_NEW_MSG


def runtime_info(client: Client) -> dict[str, str]:
    info, _ = client.call(GetBrokerRuntimeInfoRequest())
    assert isinstance(info, BrokerRuntimeInfoReply)
    return info.info


def test_pulls_read_the_records_from_the_log_files_remoting_sees(client: Client) -> None:
    before = runtime_info(client)
    send(client, "LogRead", [record("LogRead", b"r%d" % i) for i in range(50)], queue_id=0)
    _, records = pull(client, "LogRead", 0, queue_offset=0, max_msgs=64)
    assert [r.body for r in records] == [b"r%d" % i for i in range(50)]
    after = runtime_info(client)
    assert int(after["pullLogReadTotal"]) == int(before["pullLogReadTotal"]) + 1
    assert after["pullLogReadMisses"] == "0"


def test_remoting_that_cannot_see_the_store_files_pulls_through_the_store(
    tmp_path: Path,
) -> None:
    """Remoting on another storePathRootDir (another machine, another container's volume):
    its read misses once, and that pull and the next get their records from the store."""
    with LocalCluster() as cluster:
        store = start_service(
            "broker-store",
            service_args(
                None,
                {
                    "storePathRootDir": str(tmp_path / "store"),
                    "storeEndpoint": "tcp://127.0.0.1:0",
                    "storeFeedEndpoint": "tcp://127.0.0.1:0",
                },
            ),
        )
        cluster.processes.append(store)
        remoting = start_service(
            "broker-remoting",
            service_args(
                None,
                {
                    "storePathRootDir": str(tmp_path / "remoting"),
                    "storeEndpoint": store.endpoints["endpoint"],
                    "namesrvAddr": NOBODY_LISTENS,
                    "listenPort": "0",
                },
            ),
        )
        cluster.processes.append(remoting)
        ctx: zmq.Context[Any] = zmq.Context()
        client = Client(ctx, remoting.endpoints["addr"])
        try:
            send(client, "Apart", [record("Apart", b"a%d" % i) for i in range(5)], queue_id=0)
            for offset in (0, 2):
                _, records = pull(client, "Apart", 0, queue_offset=offset)
                assert [r.body for r in records] == [b"a%d" % i for i in range(offset, 5)]
            info = runtime_info(client)
            assert (info["pullLogReadTotal"], info["pullLogReadMisses"]) == ("0", "1")
        finally:
            client.sock.close()
            ctx.term()
