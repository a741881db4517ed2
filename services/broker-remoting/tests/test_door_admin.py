"""The broker door's admin codes (door/admin.py, admin_queries.py) on a real cluster, spoken to
with hand-built RocketMQ remoting frames as mqadmin and rocketmq-dashboard send them; what they
change is checked through Ferry's own admin and the name server's door, and messages go in
through Ferry's SDK."""

from __future__ import annotations

import json
import re
from collections.abc import Iterator
from typing import Any

import pytest

from ferry.admin import Admin
from ferry.client import ConsumeResult, Message, MessageExt, MessageQueue, Producer, PushConsumer
from ferry.protocol import record
from ferry.protocol.rocketmq.codes import RequestCode, ResponseCode
from ferry.protocol.rocketmq.command import RemotingCommand
from ferry.runtime.launcher import LocalCluster
from ferry.runtime.testing.pytest_support import wait_for
from ferry.runtime.testing.remoting_client import RemotingClient

pytestmark = pytest.mark.integration

TOPIC = "DoorAdmin"
QUEUES = 2
FAR_FUTURE_MS = str(1 << 62)


@pytest.fixture(scope="module")
def cluster(tmp_path_factory: pytest.TempPathFactory, door_cluster: Any) -> Iterator[LocalCluster]:
    with door_cluster(tmp_path_factory.mktemp("door-admin"), topic=TOPIC, queues=QUEUES) as local:
        yield local


@pytest.fixture(scope="module")
def producer(cluster: LocalCluster) -> Iterator[Producer]:
    with Producer("pg-door-admin", cluster.namesrv_addr) as p:
        yield p


@pytest.fixture
def door(cluster: LocalCluster) -> Iterator[RemotingClient]:
    with RemotingClient(cluster.broker_rocketmq_addr) as client:
        yield client


def succeeded(resp: RemotingCommand) -> RemotingCommand:
    assert resp.code == ResponseCode.SUCCESS, (resp.code, resp.remark)
    return resp


def body_json(resp: RemotingCommand) -> Any:
    return json.loads(succeeded(resp).body)


def queue_keyed(body: bytes) -> tuple[dict[tuple[str, str, int], Any], dict[str, Any]]:
    """A body whose offsetTable is a fastjson map with MessageQueue keys (not strict JSON):
    the table as {(topic, broker, queue): value}, and the whole body."""
    keys: list[tuple[str, str, int]] = []

    def as_string(m: re.Match[str]) -> str:
        q = json.loads(m.group(1))
        keys.append((q["topic"], q["brokerName"], q["queueId"]))
        return json.dumps(str(len(keys) - 1)) + ":"

    strict = re.sub(r'(\{"brokerName":[^{}]*\}):', as_string, body.decode())
    whole = json.loads(strict)
    return {keys[int(i)]: v for i, v in whole["offsetTable"].items()}, whole


def broker_name(door: RemotingClient) -> str:
    name: str = body_json(door.call(RequestCode.GET_BROKER_RUNTIME_INFO))["table"]["brokerName"]
    return name


def all_topics(door: RemotingClient) -> dict[str, Any]:
    table: dict[str, Any] = body_json(door.call(RequestCode.GET_ALL_TOPIC_CONFIG))[
        "topicConfigTable"
    ]
    return table


def create_topic(door: RemotingClient, topic: str, queues: int, perm: int = 6) -> None:
    fields = {
        "topic": topic,
        "defaultTopic": "TBW102",
        "readQueueNums": str(queues),
        "writeQueueNums": str(queues),
        "perm": str(perm),
        "topicFilterType": "SINGLE_TAG",
        "topicSysFlag": "0",
        "order": "false",
    }
    succeeded(door.call(RequestCode.UPDATE_AND_CREATE_TOPIC, fields))


# ---- topics ----


def test_a_topic_made_over_the_door_is_in_ferrys_admin_and_the_route(
    cluster: LocalCluster, door: RemotingClient
) -> None:
    create_topic(door, "DoorMade", 3, perm=6)
    with Admin(cluster.namesrv_addr) as admin:
        (made,) = [
            c for c in admin.topic_configs(cluster.broker_addr) if c.topic_name == "DoorMade"
        ]
    assert (made.read_queue_nums, made.write_queue_nums, made.perm) == (3, 3, 6)
    shown = all_topics(door)["DoorMade"]
    assert shown["readQueueNums"] == 3 and shown["writeQueueNums"] == 3 and shown["perm"] == 6
    assert shown["topicName"] == "DoorMade" and shown["order"] is False

    def routed() -> Any:
        with RemotingClient(cluster.rocketmq_addr) as namesrv:
            resp = namesrv.call(RequestCode.GET_ROUTEINFO_BY_TOPIC, {"topic": "DoorMade"})
        return json.loads(resp.body) if resp.code == ResponseCode.SUCCESS else None

    route = wait_for(routed, 10, "DoorMade's route on the name server's door")
    assert [q["readQueueNums"] for q in route["queueDatas"]] == [3]
    assert list(route["brokerDatas"][0]["brokerAddrs"].values()) == [cluster.broker_rocketmq_addr]

    succeeded(door.call(RequestCode.DELETE_TOPIC_IN_BROKER, {"topic": "DoorMade"}))
    assert "DoorMade" not in all_topics(door)
    with Admin(cluster.namesrv_addr) as admin:
        assert "DoorMade" not in {c.topic_name for c in admin.topic_configs(cluster.broker_addr)}


def test_topic_stats_count_what_ferrys_sdk_sent(door: RemotingClient, producer: Producer) -> None:
    create_topic(door, "DoorStats", QUEUES)
    name = broker_name(door)
    for i in range(3):
        producer.send(
            Message("DoorStats", f"s{i}".encode()), MessageQueue("DoorStats", name, i % 2)
        )
    resp = succeeded(door.call(RequestCode.GET_TOPIC_STATS_INFO, {"topic": "DoorStats"}))
    table, whole = queue_keyed(resp.body)
    assert whole["topicPutTps"] >= 0
    assert set(table) == {("DoorStats", name, 0), ("DoorStats", name, 1)}
    assert [table[("DoorStats", name, q)]["maxOffset"] for q in (0, 1)] == [2, 1]
    assert all(v["minOffset"] == 0 and v["lastUpdateTimestamp"] > 0 for v in table.values())

    missing = door.call(RequestCode.GET_TOPIC_STATS_INFO, {"topic": "NoSuchTopic"})
    assert missing.code == ResponseCode.TOPIC_NOT_EXIST


# ---- subscription groups ----


def test_a_group_made_over_the_door_is_in_ferrys_admin_until_deleted(
    cluster: LocalCluster, door: RemotingClient
) -> None:
    config = {"groupName": "g-door-made", "retryMaxTimes": 5, "consumeBroadcastEnable": False}
    body = json.dumps(config).encode()
    succeeded(door.call(RequestCode.UPDATE_AND_CREATE_SUBSCRIPTIONGROUP, {}, body))
    with Admin(cluster.namesrv_addr) as admin:
        (made,) = [
            g for g in admin.sub_groups(cluster.broker_addr) if g.group_name == "g-door-made"
        ]
    assert made.retry_max_times == 5 and made.consume_broadcast_enable is False
    table = body_json(door.call(RequestCode.GET_ALL_SUBSCRIPTIONGROUP_CONFIG))
    shown = table["subscriptionGroupTable"]["g-door-made"]
    assert shown["retryMaxTimes"] == 5 and shown["consumeBroadcastEnable"] is False
    assert shown["consumeEnable"] is True and "dataVersion" in table

    succeeded(door.call(RequestCode.DELETE_SUBSCRIPTIONGROUP, {"groupName": "g-door-made"}))
    table = body_json(door.call(RequestCode.GET_ALL_SUBSCRIPTIONGROUP_CONFIG))
    assert "g-door-made" not in table["subscriptionGroupTable"]
    with Admin(cluster.namesrv_addr) as admin:
        assert "g-door-made" not in {g.group_name for g in admin.sub_groups(cluster.broker_addr)}


# ---- the broker ----


def test_runtime_info_is_a_kv_table_of_strings(cluster: LocalCluster, door: RemotingClient) -> None:
    table = body_json(door.call(RequestCode.GET_BROKER_RUNTIME_INFO))["table"]
    assert all(isinstance(v, str) for v in table.values())
    assert table["brokerAddr"] == cluster.broker_addr
    assert int(table["msgPutTotalTodayNow"]) == int(table["putMessageTotal"]) >= 0
    assert int(table["commitLogMaxOffset"]) >= 0  # the store's part is there too


def test_broker_config_is_properties_text_and_updates_live(
    cluster: LocalCluster, door: RemotingClient
) -> None:
    got = succeeded(door.call(RequestCode.GET_BROKER_CONFIG))
    assert "stateVersion" in json.loads(got.ext_fields["version"])
    lines = dict(line.split("=", 1) for line in got.body.decode().splitlines())
    assert lines["brokerName"] == broker_name(door)

    succeeded(door.call(RequestCode.UPDATE_BROKER_CONFIG, {}, b"maxMessageSize=5000000\n"))
    got = succeeded(door.call(RequestCode.GET_BROKER_CONFIG))
    assert "maxMessageSize=5000000" in got.body.decode().splitlines()
    with Admin(cluster.namesrv_addr) as admin:
        assert admin.broker_config(cluster.broker_addr).config["maxMessageSize"] == "5000000"

    refused = door.call(RequestCode.UPDATE_BROKER_CONFIG, {}, b"noSuchKey=1\n")
    assert refused.code == ResponseCode.INVALID_PARAMETER and "noSuchKey" in refused.remark


# ---- clients and progress ----


def test_a_ferry_consumer_shows_in_the_connections_and_who_consumes(
    cluster: LocalCluster, door: RemotingClient, producer: Producer
) -> None:
    producer.send(Message(TOPIC, b"hello"))  # the producer's heartbeat has reached the broker

    def producers() -> Any:
        resp = door.call(
            RequestCode.GET_PRODUCER_CONNECTION_LIST, {"producerGroup": "pg-door-admin"}
        )
        return json.loads(resp.body) if resp.code == ResponseCode.SUCCESS else None

    (conn,) = wait_for(producers, 10, "the producer's connection")["connectionSet"]
    assert conn["clientId"] and conn["language"] in {"PYTHON", "OTHER"}
    nobody = door.call(RequestCode.GET_PRODUCER_CONNECTION_LIST, {"producerGroup": "pg-nobody"})
    assert nobody.code == ResponseCode.SYSTEM_ERROR

    offline = door.call(RequestCode.GET_CONSUMER_CONNECTION_LIST, {"consumerGroup": "g-door-live"})
    assert offline.code == ResponseCode.CONSUMER_NOT_ONLINE

    def nothing(_msgs: list[MessageExt]) -> ConsumeResult:
        return ConsumeResult.SUCCESS

    push = PushConsumer("g-door-live", cluster.namesrv_addr)
    push.subscribe(TOPIC, "TagA || TagB")
    push.register_listener(nothing)
    with push:

        def consumers() -> Any:
            resp = door.call(
                RequestCode.GET_CONSUMER_CONNECTION_LIST, {"consumerGroup": "g-door-live"}
            )
            return json.loads(resp.body) if resp.code == ResponseCode.SUCCESS else None

        got = wait_for(consumers, 15, "the push consumer's connection")
        assert len(got["connectionSet"]) == 1
        assert got["consumeType"] == "CONSUME_PASSIVELY"
        assert got["messageModel"] == "CLUSTERING"
        assert got["consumeFromWhere"] == "CONSUME_FROM_LAST_OFFSET"
        sub = got["subscriptionTable"][TOPIC]
        assert sub["subString"] == "TagA || TagB" and sub["tagsSet"] == ["TagA", "TagB"]
        assert sub["codeSet"] == [2598919, 2598920]  # Java's "TagA".hashCode(), "TagB"'s
        who = body_json(door.call(RequestCode.QUERY_TOPIC_CONSUME_BY_WHO, {"topic": TOPIC}))
        assert "g-door-live" in who["groupList"]
        with Admin(cluster.namesrv_addr) as admin:  # the client Ferry's own admin sees
            (seen,) = admin.consumer_connections("g-door-live").values()
        assert [c.client_id for c in seen.connections] == [got["connectionSet"][0]["clientId"]]


def commit(door: RemotingClient, group: str, topic: str, queue_id: int, offset: int) -> None:
    fields = {
        "consumerGroup": group,
        "topic": topic,
        "queueId": str(queue_id),
        "commitOffset": str(offset),
    }
    succeeded(door.call(RequestCode.UPDATE_CONSUMER_OFFSET, fields))


def test_consume_stats_show_each_queue_against_the_groups_offset(
    cluster: LocalCluster, door: RemotingClient, producer: Producer
) -> None:
    create_topic(door, "DoorProgress", QUEUES)
    name = broker_name(door)
    for i in range(3):
        producer.send(
            Message("DoorProgress", f"p{i}".encode()), MessageQueue("DoorProgress", name, i % 2)
        )
    commit(door, "g-door-progress", "DoorProgress", 0, 1)
    commit(door, "g-door-progress", "DoorProgress", 1, 1)

    asked = {"consumerGroup": "g-door-progress", "topic": "DoorProgress"}
    table, whole = queue_keyed(succeeded(door.call(RequestCode.GET_CONSUME_STATS, asked)).body)
    assert whole["consumeTps"] >= 0
    q0, q1 = table[("DoorProgress", name, 0)], table[("DoorProgress", name, 1)]
    assert (q0["brokerOffset"], q0["consumerOffset"]) == (2, 1)
    assert (q1["brokerOffset"], q1["consumerOffset"]) == (1, 1)
    assert q0["lastTimestamp"] == 0 and q1["lastTimestamp"] > 0  # only q1 is consumed up
    with Admin(cluster.namesrv_addr) as admin:  # Ferry's own consumerProgress agrees
        progress = admin.consumer_progress("g-door-progress", "DoorProgress")
    assert {p.queue.queue_id: (p.broker_offset, p.consumer_offset) for p in progress} == {
        0: (2, 1),
        1: (1, 1),
    }

    # no topic: every topic the group has offsets on
    resp = succeeded(door.call(RequestCode.GET_CONSUME_STATS, {"consumerGroup": "g-door-progress"}))
    found, _ = queue_keyed(resp.body)
    assert found == table


# ---- messages ----


def test_a_message_from_ferrys_sdk_is_found_by_key_and_viewed_by_offset(
    door: RemotingClient, producer: Producer
) -> None:
    sent = producer.send(Message(TOPIC, b"find me", tags="TagA", keys=["door-key-1"]))
    offset = record.decode_offset_msg_id(sent.offset_msg_id)[1]

    viewed = succeeded(
        door.call(RequestCode.VIEW_MESSAGE_BY_ID, {"topic": TOPIC, "offset": str(offset)})
    )
    (rec,) = record.iter_records(viewed.body)
    assert rec.body == b"find me" and rec.phys_offset == offset
    assert rec.properties["KEYS"] == "door-key-1" and rec.properties["UNIQ_KEY"] == sent.msg_id

    query = {
        "topic": TOPIC,
        "key": "door-key-1",
        "maxNum": "32",
        "beginTimestamp": "0",
        "endTimestamp": FAR_FUTURE_MS,
    }

    def found() -> RemotingCommand | None:
        resp = door.call(RequestCode.QUERY_MESSAGE, query)
        return resp if resp.code == ResponseCode.SUCCESS else None

    resp = wait_for(found, 10, "the key in the index")
    assert [r.body for r in record.iter_records(resp.body)] == [b"find me"]
    assert int(resp.ext_fields["indexLastUpdateTimestamp"]) > 0
    assert int(resp.ext_fields["indexLastUpdatePhyoffset"]) >= 0

    by_id = door.call(
        RequestCode.QUERY_MESSAGE, {**query, "key": sent.msg_id, "_UNIQUE_KEY_QUERY": "true"}
    )
    assert [r.properties["UNIQ_KEY"] for r in record.iter_records(succeeded(by_id).body)] == [
        sent.msg_id
    ]
    none = door.call(RequestCode.QUERY_MESSAGE, {**query, "key": "no-such-key"})
    assert none.code == ResponseCode.QUERY_NOT_FOUND


# ---- bad input ----


BAD: list[tuple[int, dict[str, str], bytes]] = [
    (RequestCode.UPDATE_AND_CREATE_TOPIC, {"topic": "BadT", "perm": "6"}, b""),
    (
        RequestCode.UPDATE_AND_CREATE_TOPIC,
        {"topic": "BadT", "readQueueNums": "x", "writeQueueNums": "1", "perm": "6"},
        b"",
    ),
    (RequestCode.DELETE_TOPIC_IN_BROKER, {}, b""),
    (RequestCode.GET_TOPIC_STATS_INFO, {}, b""),
    (RequestCode.UPDATE_AND_CREATE_SUBSCRIPTIONGROUP, {}, b"{not json"),
    (
        RequestCode.UPDATE_AND_CREATE_SUBSCRIPTIONGROUP,
        {},
        b'{"groupName": "g", "retryMaxTimes": "5"}',
    ),
    (RequestCode.UPDATE_AND_CREATE_SUBSCRIPTIONGROUP, {}, b'{"retryMaxTimes": 5}'),
    (RequestCode.DELETE_SUBSCRIPTIONGROUP, {}, b""),
    (RequestCode.GET_CONSUMER_CONNECTION_LIST, {}, b""),
    (RequestCode.GET_PRODUCER_CONNECTION_LIST, {}, b""),
    (RequestCode.GET_CONSUME_STATS, {}, b""),
    (RequestCode.GET_CONSUME_STATS, {"consumerGroup": "bad group!"}, b""),
    (RequestCode.QUERY_TOPIC_CONSUME_BY_WHO, {}, b""),
    (
        RequestCode.QUERY_MESSAGE,
        {"topic": TOPIC, "maxNum": "1", "beginTimestamp": "0", "endTimestamp": "1"},
        b"",
    ),
    (RequestCode.VIEW_MESSAGE_BY_ID, {"offset": "abc"}, b""),
    (RequestCode.VIEW_MESSAGE_BY_ID, {"offset": "-1"}, b""),
    (RequestCode.UPDATE_BROKER_CONFIG, {}, b"a line without an equals sign\n"),
]


def test_bad_headers_are_answered_invalid_parameter_and_change_nothing(
    cluster: LocalCluster, door: RemotingClient
) -> None:
    before = all_topics(door)
    for code, fields, body in BAD:
        resp = door.call(code, fields, body)
        assert resp.code == ResponseCode.INVALID_PARAMETER, (code, fields, resp.code, resp.remark)
    assert all_topics(door) == before
    # the broker is still there, on both wires
    assert broker_name(door)
    with Admin(cluster.namesrv_addr) as admin:
        assert admin.broker_runtime_info(cluster.broker_addr)["brokerName"] == broker_name(door)
