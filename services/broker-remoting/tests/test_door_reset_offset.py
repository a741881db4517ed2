"""INVOKE_BROKER_TO_RESET_OFFSET (222) through the broker's door (door/reset_offset.py), as
mqadmin resetOffsetByTime and the dashboard send it, on a real cluster: the group's offsets
are set, its members are told with RESET_CONSUMER_CLIENT_OFFSET (220), and the answer is the
offset table."""

from __future__ import annotations

import json
import time
from collections.abc import Iterator
from typing import Any

import pytest

from ferry.client import Message, MessageQueue, Producer
from ferry.protocol.rocketmq.codes import LanguageCode, RequestCode, ResponseCode
from ferry.protocol.rocketmq.command import RemotingCommand
from ferry.runtime.launcher import LocalCluster
from ferry.runtime.testing.remoting_client import RemotingClient, consumer_heartbeat

pytestmark = pytest.mark.integration

TOPIC = "DoorReset"
GROUP = "cg-door-reset"
QUEUES = 2


@pytest.fixture(scope="module")
def cluster(tmp_path_factory: pytest.TempPathFactory, door_cluster: Any) -> Iterator[LocalCluster]:
    with door_cluster(tmp_path_factory.mktemp("door-reset"), topic=TOPIC, queues=QUEUES) as local:
        yield local


def committed(door: RemotingClient, queue_id: int) -> int:
    fields = {"consumerGroup": GROUP, "topic": TOPIC, "queueId": str(queue_id)}
    got = door.call(RequestCode.QUERY_CONSUMER_OFFSET, fields)
    assert got.code == ResponseCode.SUCCESS, got.remark
    return int(got.ext_fields["offset"])


def commit(door: RemotingClient, queue_id: int, offset: int) -> None:
    fields = {"consumerGroup": GROUP, "topic": TOPIC, "queueId": str(queue_id)}
    got = door.call(RequestCode.UPDATE_CONSUMER_OFFSET, {**fields, "commitOffset": str(offset)})
    assert got.code == ResponseCode.SUCCESS, got.remark


def heartbeat(
    door: RemotingClient, client_id: str, language: LanguageCode = LanguageCode.JAVA
) -> None:
    body = consumer_heartbeat(client_id, GROUP, TOPIC)
    got = door.call(RequestCode.HEART_BEAT, body=body, language=language)
    assert got.code == ResponseCode.SUCCESS, got.remark


def told(member: RemotingClient) -> RemotingCommand:
    cmd = member.receive(5.0)
    while cmd is not None and cmd.code != RequestCode.RESET_CONSUMER_CLIENT_OFFSET:
        cmd = member.receive(5.0)  # a NOTIFY_CONSUMER_IDS_CHANGED may come first
    assert cmd is not None, "the member was not told"
    assert cmd.ext_fields["group"] == GROUP and cmd.ext_fields["topic"] == TOPIC
    return cmd


def offset_table(body: bytes) -> dict[int, int]:
    """queueId -> offset of a ResetOffsetBody (its keys are MessageQueue objects, as fastjson
    writes them: not strict JSON, so read by hand)."""
    text = body.decode()
    out = {}
    for part in text.split('"queueId":')[1:]:
        queue_id = int(part.split(",", 1)[0])
        out[queue_id] = int(part.split("}:", 1)[1].split(",", 1)[0].split("}", 1)[0])
    return out


def test_a_reset_by_time_rewinds_the_group_and_tells_its_members(cluster: LocalCluster) -> None:
    before = int(time.time() * 1000) - 1000
    with Producer("pg-door-reset", cluster.namesrv_addr) as producer:
        for i in range(6):
            queue = MessageQueue(TOPIC, "broker-a", i % QUEUES)
            producer.send(Message(TOPIC, f"r-{i}".encode()), lambda _q, _m, a: a, queue)
    addr = cluster.broker_rocketmq_addr
    with (
        RemotingClient(addr) as member,
        RemotingClient(addr) as cpp_member,
        RemotingClient(addr) as tool,
    ):
        heartbeat(member, "10.0.0.9@reset")
        heartbeat(cpp_member, "10.0.0.9@reset-cpp", LanguageCode.CPP)
        for q in range(QUEUES):
            commit(tool, q, 3)
        fields = {"topic": TOPIC, "group": GROUP, "timestamp": str(before), "isForce": "true"}
        got = tool.call(RequestCode.INVOKE_BROKER_TO_RESET_OFFSET, fields)
        assert got.code == ResponseCode.SUCCESS, got.remark
        assert offset_table(got.body) == {0: 0, 1: 0}
        assert [committed(tool, q) for q in range(QUEUES)] == [0, 0]
        # Java's clients read a map keyed by queues, the C++ client a list (RocketMQ's ForC)
        assert offset_table(told(member).body) == {0: 0, 1: 0}
        as_list = json.loads(told(cpp_member).body)["offsetTable"]
        assert sorted((q["queueId"], q["offset"], q["topic"]) for q in as_list) == [
            (0, 0, TOPIC),
            (1, 0, TOPIC),
        ]

        # without isForce only a rewind: a time after every message moves no queue forward
        later = {**fields, "timestamp": str(int(time.time() * 1000) + 60_000), "isForce": "false"}
        got = tool.call(RequestCode.INVOKE_BROKER_TO_RESET_OFFSET, later)
        assert got.code == ResponseCode.SUCCESS, got.remark
        assert offset_table(got.body) == {}
        assert [committed(tool, q) for q in range(QUEUES)] == [0, 0]

        # one queue to one offset
        one = {"topic": TOPIC, "group": GROUP, "queueId": "1", "offset": "2", "isForce": "true"}
        got = tool.call(RequestCode.INVOKE_BROKER_TO_RESET_OFFSET, one)
        assert got.code == ResponseCode.SUCCESS, got.remark
        assert [committed(tool, q) for q in range(QUEUES)] == [0, 2]


def test_a_reset_of_an_unknown_topic_or_without_a_time_is_refused(cluster: LocalCluster) -> None:
    with RemotingClient(cluster.broker_rocketmq_addr) as tool:
        unknown = tool.call(
            RequestCode.INVOKE_BROKER_TO_RESET_OFFSET,
            {"topic": "NoSuchTopic", "group": GROUP, "timestamp": "0"},
        )
        timeless = tool.call(
            RequestCode.INVOKE_BROKER_TO_RESET_OFFSET, {"topic": TOPIC, "group": GROUP}
        )
    assert unknown.code == ResponseCode.TOPIC_NOT_EXIST
    assert timeless.code not in (ResponseCode.SUCCESS, ResponseCode.SYSTEM_BUSY)
