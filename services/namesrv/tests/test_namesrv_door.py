"""The name server's RocketMQ door: the real process, spoken to with RocketMQ remoting frames
over TCP as RocketMQ's clients and tools do, brokers registered over Ferry's own wire."""

from __future__ import annotations

import json
from collections.abc import Iterator

import pytest

from ferry.protocol.messages import (
    OkReply,
    PutKvConfigRequest,
    RegisterBrokerReply,
    RegisterBrokerRequest,
    TopicConfig,
)
from ferry.protocol.rocketmq.codes import RequestCode, ResponseCode, SerializeType
from ferry.runtime.launcher import ServiceProcess, start_service
from ferry.runtime.testing.pytest_support import RawClient
from ferry.runtime.testing.remoting_client import RemotingClient

pytestmark = pytest.mark.integration


@pytest.fixture(scope="module")
def namesrv() -> Iterator[ServiceProcess]:
    sp = start_service("namesrv", ["--set", "listenPort=0", "--set", "rocketmqListenPort=0"])
    try:
        yield sp
    finally:
        sp.stop()


@pytest.fixture(scope="module")
def ferry_client(namesrv: ServiceProcess) -> Iterator[RawClient]:
    client = RawClient(namesrv.endpoints["addr"])
    try:
        yield client
    finally:
        client.close()


@pytest.fixture
def door(namesrv: ServiceProcess) -> Iterator[RemotingClient]:
    with RemotingClient(namesrv.endpoints["rocketmq"]) as client:
        yield client


def register(client: RawClient, name: str, topic: str, *, door: str, broker_id: int = 0) -> None:
    reply, _ = client.call(
        RegisterBrokerRequest(
            cluster="DefaultCluster",
            broker_name=name,
            broker_id=broker_id,
            broker_addr=f"127.0.0.{broker_id + 1}:10911",
            rocketmq_addr=door,
            topics={topic: TopicConfig(topic, read_queue_nums=4, write_queue_nums=2)},
        )
    )
    assert isinstance(reply, RegisterBrokerReply)


def test_ready_line_names_the_door_beside_ferrys_own_address(namesrv: ServiceProcess) -> None:
    assert namesrv.endpoints["rocketmq"] != namesrv.endpoints["addr"]
    assert namesrv.endpoints["rocketmq"].startswith("127.0.0.1:")


@pytest.mark.parametrize("serialize_type", [SerializeType.JSON, SerializeType.ROCKETMQ])
def test_a_route_names_each_brokers_door_with_counts_as_numbers(
    ferry_client: RawClient, door: RemotingClient, serialize_type: SerializeType
) -> None:
    register(ferry_client, "broker-door", "DoorRoute", door="127.0.0.1:19911")
    register(ferry_client, "broker-door", "DoorRoute", door="127.0.0.2:19911", broker_id=1)
    register(ferry_client, "broker-nodoor", "DoorRoute", door="")

    got = door.call(
        RequestCode.GET_ROUTEINFO_BY_TOPIC, {"topic": "DoorRoute"}, serialize_type=serialize_type
    )

    assert got.code == ResponseCode.SUCCESS
    assert got.serialize_type == serialize_type  # answered in the caller's serialization
    route = json.loads(got.body)
    assert route["brokerDatas"] == [
        {
            "cluster": "DefaultCluster",
            "brokerName": "broker-door",
            "brokerAddrs": {"0": "127.0.0.1:19911", "1": "127.0.0.2:19911"},
            "enableActingMaster": False,  # the Rust client needs it present
        }
    ]
    # the broker without a door is left out with its queues
    assert route["queueDatas"] == [
        {
            "brokerName": "broker-door",
            "readQueueNums": 4,
            "writeQueueNums": 2,
            "perm": 6,
            "topicSysFlag": 0,
        }
    ]


def test_an_unknown_topic_is_answered_topic_not_exist(door: RemotingClient) -> None:
    got = door.call(RequestCode.GET_ROUTEINFO_BY_TOPIC, {"topic": "NoSuchTopicHere"})
    assert got.code == ResponseCode.TOPIC_NOT_EXIST
    assert "NoSuchTopicHere" in got.remark


def test_cluster_info_topic_list_and_kv_config(
    ferry_client: RawClient, door: RemotingClient
) -> None:
    register(ferry_client, "broker-info", "DoorInfo", door="127.0.0.1:29911")
    info = json.loads(door.call(RequestCode.GET_BROKER_CLUSTER_INFO).body)
    assert info["brokerAddrTable"]["broker-info"]["brokerAddrs"] == {"0": "127.0.0.1:29911"}
    assert "broker-info" in info["clusterAddrTable"]["DefaultCluster"]

    topics = json.loads(door.call(RequestCode.GET_ALL_TOPIC_LIST_FROM_NAMESERVER).body)
    assert "DoorInfo" in topics["topicList"]

    kv = {"namespace": "ORDER_TOPIC_CONFIG", "key": "DoorInfo", "value": "broker-info:4"}
    assert door.call(RequestCode.PUT_KV_CONFIG, kv).code == ResponseCode.SUCCESS
    got = door.call(RequestCode.GET_KV_CONFIG, {"namespace": kv["namespace"], "key": "DoorInfo"})
    assert (got.code, got.ext_fields["value"]) == (ResponseCode.SUCCESS, "broker-info:4")
    # what the door stored, Ferry's own wire reads: one kv store
    route = json.loads(door.call(RequestCode.GET_ROUTEINFO_BY_TOPIC, {"topic": "DoorInfo"}).body)
    assert route["orderTopicConf"] == "broker-info:4"
    reply, _ = ferry_client.call(PutKvConfigRequest("ORDER_TOPIC_CONFIG", "DoorInfo", "x:1"))
    assert isinstance(reply, OkReply)
    missing = door.call(RequestCode.GET_KV_CONFIG, {"namespace": "ns", "key": "absent"})
    assert missing.code == ResponseCode.QUERY_NOT_FOUND


def test_unknown_codes_and_missing_fields_are_refused_and_the_connection_serves_on(
    door: RemotingClient,
) -> None:
    assert door.call(9999).code == ResponseCode.REQUEST_CODE_NOT_SUPPORTED
    assert door.call(RequestCode.SEND_MESSAGE).code == ResponseCode.REQUEST_CODE_NOT_SUPPORTED
    lacking = door.call(RequestCode.GET_ROUTEINFO_BY_TOPIC, {})
    assert lacking.code == ResponseCode.INVALID_PARAMETER
    assert "topic" in lacking.remark
    assert door.call(RequestCode.GET_BROKER_CLUSTER_INFO).code == ResponseCode.SUCCESS


def test_a_frame_that_does_not_decode_closes_only_its_connection(namesrv: ServiceProcess) -> None:
    addr = namesrv.endpoints["rocketmq"]
    with RemotingClient(addr) as bad, RemotingClient(addr) as good:
        bad.sock.sendall(b"\x00\x00\x00\x08\x00\x00\x00\x04{{{{")  # JSON that is not JSON
        assert bad.wait_closed()
        lying = RemotingClient(addr)
        lying.sock.sendall(b"\x7f\xff\xff\xff")  # a length past the frame limit
        assert lying.wait_closed()
        lying.close()
        assert good.call(RequestCode.GET_BROKER_CLUSTER_INFO).code == ResponseCode.SUCCESS
