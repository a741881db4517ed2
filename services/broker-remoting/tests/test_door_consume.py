"""The broker door's consume codes (door/consume.py, pull_route.py, offset_routes.py) on a real
cluster, spoken to with hand-built RocketMQ remoting frames as RocketMQ's consumers send them;
messages go in through Ferry's own SDK."""

from __future__ import annotations

import json
import time
from collections.abc import Iterator
from typing import Any

import pytest

from ferry.client import Message, MessageQueue, Producer
from ferry.protocol import record
from ferry.protocol.rocketmq.codes import ONEWAY_FLAG, RequestCode, ResponseCode
from ferry.runtime.launcher import LocalCluster
from ferry.runtime.testing.remoting_client import RemotingClient, consumer_heartbeat

pytestmark = pytest.mark.integration

TOPIC = "DoorConsume"
QUEUES = 2


@pytest.fixture(scope="module")
def cluster(tmp_path_factory: pytest.TempPathFactory, door_cluster: Any) -> Iterator[LocalCluster]:
    root = tmp_path_factory.mktemp("door-consume")
    overrides = {"messageDelayLevel": "1s 1s 1s 1s"}
    with door_cluster(root, topic=TOPIC, queues=QUEUES, overrides=overrides) as local:
        yield local


@pytest.fixture(scope="module")
def producer(cluster: LocalCluster) -> Iterator[Producer]:
    with Producer("pg-door-consume", cluster.namesrv_addr) as p:
        yield p


@pytest.fixture
def door(cluster: LocalCluster) -> Iterator[RemotingClient]:
    with RemotingClient(cluster.broker_rocketmq_addr) as client:
        yield client


def heartbeat_body(client_id: str, group: str, expression: str = "*") -> bytes:
    return consumer_heartbeat(client_id, group, TOPIC, expression)


def consumer_ids(door: RemotingClient, group: str) -> list[str]:
    got = door.call(RequestCode.GET_CONSUMER_LIST_BY_GROUP, {"consumerGroup": group})
    assert got.code == ResponseCode.SUCCESS, got.remark
    ids: list[str] = json.loads(got.body)["consumerIdList"]
    return ids


def pull_fields(group: str, queue_id: int, offset: int, **more: str) -> dict[str, str]:
    fields = {
        "consumerGroup": group,
        "topic": TOPIC,
        "queueId": str(queue_id),
        "queueOffset": str(offset),
        "maxMsgNums": "32",
        "sysFlag": "4",
        "commitOffset": "0",
        "suspendTimeoutMillis": "0",
        "subscription": "*",
        "subVersion": "0",
    }
    fields.update(more)
    return fields


def max_offset(door: RemotingClient, queue_id: int) -> int:
    got = door.call(RequestCode.GET_MAX_OFFSET, {"topic": TOPIC, "queueId": str(queue_id)})
    assert got.code == ResponseCode.SUCCESS, got.remark
    return int(got.ext_fields["offset"])


def send(producer: Producer, queue_id: int, body: bytes, tags: str = "TagA") -> int:
    msg = Message(TOPIC, body, tags=tags, keys=["k-" + body.decode()], properties={"p": "v"})
    result = producer.send(msg, on_queue, queue_id)
    assert result.queue.queue_id == queue_id
    return result.queue_offset


def on_queue(queues: list[MessageQueue], _msg: Message, queue_id: int) -> MessageQueue:
    return next(q for q in queues if q.queue_id == queue_id)


def test_heartbeat_lists_the_exact_client_id_and_a_closed_connection_unregisters_it(
    cluster: LocalCluster,
) -> None:
    group = "cg-door-members"
    with RemotingClient(cluster.broker_rocketmq_addr) as first:
        got = first.call(RequestCode.HEART_BEAT, body=heartbeat_body("1234-127.0.0.1@A", group))
        assert got.code == ResponseCode.SUCCESS, got.remark
        assert consumer_ids(first, group) == ["1234-127.0.0.1@A"]
        with RemotingClient(cluster.broker_rocketmq_addr) as second:
            second.call(RequestCode.HEART_BEAT, body=heartbeat_body("99-127.0.0.1@B", group))
            assert consumer_ids(second, group) == ["1234-127.0.0.1@A", "99-127.0.0.1@B"]
            # the first member is told the group changed
            notice = first.receive(5.0)
            assert notice is not None
            assert notice.code == RequestCode.NOTIFY_CONSUMER_IDS_CHANGED
            assert notice.ext_fields["consumerGroup"] == group
            second.requests_in.clear()
            first.close()
            deadline = time.monotonic() + 10
            while consumer_ids(second, group) != ["99-127.0.0.1@B"]:
                assert time.monotonic() < deadline, "the closed connection's client stayed"
                time.sleep(0.05)  # wait-ok: polling interval of a deadline-bounded wait
            # and the remaining member is told too
            if not second.requests_in:  # not read yet by the calls above
                told = second.receive(5.0)
                assert told is not None
                second.requests_in.append(told)
            codes = [cmd.code for cmd in second.requests_in]
            assert RequestCode.NOTIFY_CONSUMER_IDS_CHANGED in codes
            got = second.call(
                RequestCode.UNREGISTER_CLIENT,
                {"clientID": "99-127.0.0.1@B", "consumerGroup": group, "producerGroup": ""},
            )
            assert got.code == ResponseCode.SUCCESS
            assert consumer_ids(second, group) == []


def test_a_client_that_moved_to_a_new_connection_stays_when_the_old_one_closes(
    cluster: LocalCluster,
) -> None:
    group = "cg-door-moved"
    old = RemotingClient(cluster.broker_rocketmq_addr)
    old.call(RequestCode.HEART_BEAT, body=heartbeat_body("7-127.0.0.1@M", group))
    with RemotingClient(cluster.broker_rocketmq_addr) as new:
        new.call(RequestCode.HEART_BEAT, body=heartbeat_body("7-127.0.0.1@M", group))
        old.close()
        # a request on a third connection after the close was handled
        with RemotingClient(cluster.broker_rocketmq_addr) as probe:
            probe.call(RequestCode.HEART_BEAT, body=heartbeat_body("8-127.0.0.1@P", "cg-other"))
            assert consumer_ids(probe, group) == ["7-127.0.0.1@M"]


def test_java_style_heartbeat_with_names_is_taken(door: RemotingClient) -> None:
    beat = {
        "clientID": "10.0.0.1@java",
        "producerDataSet": [{"groupName": "CLIENT_INNER_PRODUCER"}],
        "consumerDataSet": [
            {
                "groupName": "cg-door-java",
                "consumeType": "CONSUME_PASSIVELY",
                "messageModel": "BROADCASTING",
                "consumeFromWhere": "CONSUME_FROM_FIRST_OFFSET",
                "subscriptionDataSet": [
                    {"topic": TOPIC, "subString": "TagA", "expressionType": "TAG"}
                ],
                "unitMode": False,
            }
        ],
    }
    got = door.call(RequestCode.HEART_BEAT, body=json.dumps(beat).encode())
    assert got.code == ResponseCode.SUCCESS, got.remark
    assert consumer_ids(door, "cg-door-java") == ["10.0.0.1@java"]


@pytest.mark.parametrize(
    ("code", "ext", "body"),
    [
        (RequestCode.HEART_BEAT, {}, b"not json"),
        (RequestCode.HEART_BEAT, {}, b'{"consumerDataSet": []}'),
        (
            RequestCode.HEART_BEAT,
            {},
            heartbeat_body("x@y", "cg").replace(b'"consumeType": 1', b'"consumeType": 9'),
        ),
        (RequestCode.PULL_MESSAGE, {"consumerGroup": "cg", "topic": TOPIC}, b""),
        (RequestCode.PULL_MESSAGE, pull_fields("cg", 0, 0, queueOffset="x"), b""),
        (RequestCode.QUERY_CONSUMER_OFFSET, {"consumerGroup": "cg"}, b""),
        (RequestCode.UPDATE_CONSUMER_OFFSET, {"consumerGroup": "cg", "topic": TOPIC}, b""),
        (RequestCode.GET_MAX_OFFSET, {"queueId": "0"}, b""),
        (RequestCode.CONSUMER_SEND_MSG_BACK, {"group": "cg"}, b""),
        (RequestCode.LOCK_BATCH_MQ, {}, b"[1, 2]"),
        (RequestCode.UNLOCK_BATCH_MQ, {}, b'{"consumerGroup": "cg"}'),
        (RequestCode.UNREGISTER_CLIENT, {}, b""),
    ],
)
def test_bad_headers_and_bodies_are_answered_invalid_parameter(
    door: RemotingClient, code: int, ext: dict[str, str], body: bytes
) -> None:
    got = door.call(code, ext, body)
    assert got.code == ResponseCode.INVALID_PARAMETER, (got.code, got.remark)
    assert got.remark
    # the connection still serves
    assert door.call(RequestCode.GET_MAX_OFFSET, {"topic": TOPIC, "queueId": "0"}).code == 0


def test_pull_found_carries_the_stored_records_and_string_offsets(
    door: RemotingClient, producer: Producer
) -> None:
    start = max_offset(door, 0)
    offsets = [send(producer, 0, f"found-{i}".encode()) for i in range(3)]
    assert offsets == [start, start + 1, start + 2]
    got = door.call(RequestCode.PULL_MESSAGE, pull_fields("cg-door-pull", 0, start))
    assert got.code == ResponseCode.SUCCESS, got.remark
    assert got.ext_fields["nextBeginOffset"] == str(start + 3)
    assert got.ext_fields["maxOffset"] == str(start + 3)
    assert got.ext_fields["minOffset"] == "0"
    assert got.ext_fields["suggestWhichBrokerId"] == "0"
    recs = list(record.iter_records(got.body))
    assert [r.body for r in recs] == [b"found-0", b"found-1", b"found-2"]
    assert [r.queue_offset for r in recs] == offsets
    assert recs[0].properties["TAGS"] == "TagA"
    assert recs[0].properties["KEYS"] == "k-found-0"
    assert recs[0].properties["p"] == "v"


def test_pull_filters_by_the_expression_it_carries_or_the_heartbeats(
    door: RemotingClient, producer: Producer
) -> None:
    start = max_offset(door, 1)
    send(producer, 1, b"tag-a", "TagA")
    send(producer, 1, b"tag-c", "TagC")
    send(producer, 1, b"tag-b", "TagB")
    got = door.call(
        RequestCode.PULL_MESSAGE, pull_fields("cg-door-tags", 1, start, subscription="TagA || TagB")
    )
    assert [r.body for r in record.iter_records(got.body)] == [b"tag-a", b"tag-b"]
    # no subscription bit: the one the heartbeat on this connection registered
    door.call(RequestCode.HEART_BEAT, body=heartbeat_body("5@tags", "cg-door-tags2", "TagC"))
    got = door.call(RequestCode.PULL_MESSAGE, pull_fields("cg-door-tags2", 1, start, sysFlag="0"))
    assert [r.body for r in record.iter_records(got.body)] == [b"tag-c"]


def test_pull_at_the_end_is_not_found_and_past_it_is_moved(door: RemotingClient) -> None:
    end = max_offset(door, 0)
    got = door.call(RequestCode.PULL_MESSAGE, pull_fields("cg-door-pull", 0, end))
    assert got.code == ResponseCode.PULL_NOT_FOUND
    assert got.ext_fields["nextBeginOffset"] == str(end)
    assert got.body == b""
    got = door.call(RequestCode.PULL_MESSAGE, pull_fields("cg-door-pull", 0, end + 100))
    assert got.code == ResponseCode.PULL_OFFSET_MOVED
    assert int(got.ext_fields["nextBeginOffset"]) == end


def test_a_suspended_pull_is_held_then_answered_when_a_message_arrives(
    door: RemotingClient, producer: Producer
) -> None:
    end = max_offset(door, 0)
    fields = pull_fields("cg-door-held", 0, end, sysFlag="6", suspendTimeoutMillis="15000")
    opaque = door.send(RequestCode.PULL_MESSAGE, fields)
    assert door.receive(0.5) is None  # held
    sent_at = time.monotonic()
    send(producer, 0, b"wakes-it")
    got = door.receive(5.0)
    assert got is not None and got.opaque == opaque
    assert got.code == ResponseCode.SUCCESS
    assert time.monotonic() - sent_at < 5.0
    assert [r.body for r in record.iter_records(got.body)] == [b"wakes-it"]
    # and one the hold times out on is answered PULL_NOT_FOUND at its offset
    fields = pull_fields("cg-door-held", 0, end + 1, sysFlag="6", suspendTimeoutMillis="300")
    got = door.call(RequestCode.PULL_MESSAGE, fields, timeout_s=10)
    assert got.code == ResponseCode.PULL_NOT_FOUND
    assert got.ext_fields["nextBeginOffset"] == str(end + 1)


def test_offsets_a_new_group_is_not_found_then_committed_by_update_and_by_pull(
    door: RemotingClient, producer: Producer
) -> None:
    group = "cg-door-offsets"
    query = {"consumerGroup": group, "topic": TOPIC, "queueId": "0"}
    got = door.call(RequestCode.QUERY_CONSUMER_OFFSET, query)
    assert got.code == ResponseCode.QUERY_NOT_FOUND
    send(producer, 0, b"offsets")
    end = max_offset(door, 0)
    got = door.call(RequestCode.UPDATE_CONSUMER_OFFSET, {**query, "commitOffset": str(end - 1)})
    assert got.code == ResponseCode.SUCCESS  # flag 0, as the C++ client sends it: answered
    got = door.call(RequestCode.QUERY_CONSUMER_OFFSET, query)
    assert got.code == ResponseCode.SUCCESS
    assert got.ext_fields["offset"] == str(end - 1)
    # sysFlag 7: the pull commits its commitOffset
    door.call(
        RequestCode.PULL_MESSAGE, pull_fields(group, 0, end - 1, sysFlag="5", commitOffset=str(end))
    )
    got = door.call(RequestCode.QUERY_CONSUMER_OFFSET, query)
    assert got.ext_fields["offset"] == str(end)
    got = door.call(RequestCode.GET_MIN_OFFSET, {"topic": TOPIC, "queueId": "0"})
    assert got.code == ResponseCode.SUCCESS and got.ext_fields["offset"] == "0"
    future = str(int(time.time() * 1000) + 60_000)
    got = door.call(
        RequestCode.SEARCH_OFFSET_BY_TIMESTAMP,
        {"topic": TOPIC, "queueId": "0", "timestamp": future},
    )
    assert got.code == ResponseCode.SUCCESS and got.ext_fields["offset"] == str(end)
    got = door.call(
        RequestCode.SEARCH_OFFSET_BY_TIMESTAMP, {"topic": TOPIC, "queueId": "0", "timestamp": "0"}
    )
    assert got.ext_fields["offset"] == "0"


def test_send_back_makes_the_retry_topic_and_the_message_returns_with_reconsume_times_1(
    door: RemotingClient, producer: Producer
) -> None:
    group = "cg-door-sendback"  # no heartbeat: no retry topic yet
    start = max_offset(door, 1)
    send(producer, 1, b"fails-once")
    got = door.call(RequestCode.PULL_MESSAGE, pull_fields(group, 1, start))
    (rec,) = record.iter_records(got.body)
    got = door.call(
        RequestCode.CONSUMER_SEND_MSG_BACK,
        {"group": group, "offset": str(rec.phys_offset), "delayLevel": "0"},
    )
    assert got.code == ResponseCode.SUCCESS, got.remark
    retry = f"%RETRY%{group}"
    deadline = time.monotonic() + 20
    while True:
        got = door.call(
            RequestCode.PULL_MESSAGE, pull_fields(group, 0, 0, topic=retry), timeout_s=10
        )
        if got.code == ResponseCode.SUCCESS:
            break
        assert time.monotonic() < deadline, (got.code, got.remark)
        time.sleep(0.2)  # wait-ok: polling interval of a deadline-bounded wait
    (back,) = record.iter_records(got.body)
    assert back.body == b"fails-once"
    assert back.reconsume_times == 1
    assert back.properties["RETRY_TOPIC"] == TOPIC
    assert back.properties["UNIQ_KEY"] == rec.properties["UNIQ_KEY"]


def test_send_back_of_an_offset_with_no_message_is_refused_not_crashed(
    door: RemotingClient,
) -> None:
    got = door.call(
        RequestCode.CONSUMER_SEND_MSG_BACK,
        {"group": "cg-door-nothing", "offset": str(1 << 40), "delayLevel": "0"},
    )
    assert got.code != ResponseCode.SUCCESS
    assert door.call(RequestCode.GET_MAX_OFFSET, {"topic": TOPIC, "queueId": "0"}).code == 0


def test_locks_are_granted_to_one_client_and_released_by_unlock(door: RemotingClient) -> None:
    group = "cg-door-locks"
    mq = [{"topic": TOPIC, "brokerName": "broker-a", "queueId": q} for q in range(QUEUES)]

    def lock(client_id: str) -> list[dict[str, object]]:
        body = json.dumps({"consumerGroup": group, "clientId": client_id, "mqSet": mq})
        got = door.call(RequestCode.LOCK_BATCH_MQ, body=body.encode())
        assert got.code == ResponseCode.SUCCESS, got.remark
        locked: list[dict[str, object]] = json.loads(got.body)["lockOKMQSet"]
        return locked

    assert sorted(lock("c1"), key=lambda q: int(str(q["queueId"]))) == mq
    assert lock("c2") == []
    body = json.dumps({"consumerGroup": group, "clientId": "c1", "mqSet": mq[:1]}).encode()
    assert door.call(RequestCode.UNLOCK_BATCH_MQ, body=body).code == ResponseCode.SUCCESS
    assert lock("c2") == [mq[0]]


def test_oneway_requests_get_no_response(door: RemotingClient) -> None:
    fields = {"consumerGroup": "cg-door-oneway", "topic": TOPIC, "queueId": "0"}
    door.send(RequestCode.UPDATE_CONSUMER_OFFSET, {**fields, "commitOffset": "0"}, flag=ONEWAY_FLAG)
    deadline = time.monotonic() + 10
    while True:
        opaque = door.send(RequestCode.QUERY_CONSUMER_OFFSET, fields)
        got = door.receive(5.0)
        # the next thing read is the query's response, never one to the oneway commit
        assert got is not None and got.opaque == opaque
        if got.code == ResponseCode.SUCCESS:
            break
        assert time.monotonic() < deadline, "the oneway commit was not applied"
        time.sleep(0.05)  # wait-ok: polling interval of a deadline-bounded wait
    assert got.ext_fields["offset"] == "0"
