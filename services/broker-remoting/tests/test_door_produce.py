"""The broker door's produce routes at the protocol level: frames built with Ferry's codec
(RemotingClient) against a real name server and broker group, the stored records read back
over Ferry's own wire (a pull)."""

from __future__ import annotations

import struct
import time
import zlib
from collections.abc import Iterator
from typing import Any

import pytest

from ferry.admin import Admin
from ferry.protocol import record
from ferry.protocol.codes import PullStatus, ResponseCode
from ferry.protocol.errors import FerryError
from ferry.protocol.messages import PullMessageReply, PullMessageRequest, TopicRouteData
from ferry.protocol.rocketmq.codes import RequestCode, SerializeType
from ferry.runtime.testing.cluster import SMALL_STORE
from ferry.runtime.testing.pytest_support import RawClient, wait_for
from ferry.runtime.testing.remoting_client import RemotingClient

JSON, BINARY = SerializeType.JSON, SerializeType.ROCKETMQ
_N = 0


class Door:
    def __init__(self, namesrv: str, broker: str, door: str) -> None:
        self.namesrv, self.broker, self.door = namesrv, broker, door


@pytest.fixture(scope="module", name="door")
def door_fixture(tmp_path_factory: pytest.TempPathFactory, door_cluster: Any) -> Iterator[Door]:
    with door_cluster(tmp_path_factory.mktemp("door"), overrides=SMALL_STORE) as local:
        yield Door(local.namesrv_addr, local.broker_addr, local.broker_rocketmq_addr)


def fresh_topic(door: Door, queues: int = 4) -> str:
    global _N
    _N += 1
    topic = f"DoorT{_N}"
    with Admin(door.namesrv) as admin:
        admin.create_topic(topic, queues, queues)
    return topic


def uniq(n: int) -> str:
    return f"0A00000100002A9F{time.time_ns() & 0xFFFFFFFF:08X}{n:08X}"


def props(**items: str) -> str:
    return "".join(f"{k}\x01{v}\x02" for k, v in items.items())


def v1_header(topic: str, queue_id: int, properties: str, **more: str) -> dict[str, str]:
    return {
        "producerGroup": "PG",
        "topic": topic,
        "defaultTopic": "TBW102",
        "defaultTopicQueueNums": "4",
        "queueId": str(queue_id),
        "sysFlag": "0",
        "bornTimestamp": "1700000000123",
        "flag": "7",
        "properties": properties,
        "reconsumeTimes": "0",
        "unitMode": "0",
        "batch": "0",
        **more,
    }


def v2_header(topic: str, queue_id: int, properties: str, **more: str) -> dict[str, str]:
    long = v1_header(topic, queue_id, properties)
    names = dict(
        zip(
            ("a", "b", "c", "d", "e", "f", "g", "h", "i", "j", "k", "m"), long.values(), strict=True
        )
    )
    return {**names, **more}


def pull(door: Door, topic: str, queue_id: int, offset: int = 0) -> list[record.Record]:
    client = RawClient(door.broker)
    try:
        reply, payload = client.call(PullMessageRequest("CG", topic, queue_id, offset))
    finally:
        client.close()
    assert isinstance(reply, PullMessageReply)
    if reply.status != PullStatus.FOUND:
        return []
    return list(record.iter_records(payload[0]))


def batch_item(body: bytes, properties: str, flag: int = 0) -> bytes:
    raw = properties.encode()
    head = struct.pack(">iIIii", 20 + len(body) + 2 + len(raw), 0, 0, flag, len(body))
    return head + body + struct.pack(">h", len(raw)) + raw


def offset_of(msg_id: str) -> int:
    return record.decode_offset_msg_id(msg_id)[1]


@pytest.mark.parametrize("serialize", [JSON, BINARY], ids=["json", "rocketmq"])
def test_a_v1_send_is_stored_as_sent_and_answered_with_its_place(
    door: Door, serialize: SerializeType
) -> None:
    topic = fresh_topic(door)
    key = uniq(1)
    sent = props(KEYS="k1 k2", TAGS="TagA", UNIQ_KEY=key, WAIT="true", color="blue")
    with RemotingClient(door.door) as client:
        resp = client.call(
            RequestCode.SEND_MESSAGE,
            v1_header(topic, 2, sent, sysFlag="1"),
            b"x\x9c\x01\x02",  # as if compressed: stored as sent, flag kept
            serialize_type=serialize,
        )
    assert resp.code == ResponseCode.SUCCESS, resp.remark
    assert resp.remark == ""
    assert resp.serialize_type == serialize
    assert resp.ext_fields["queueId"] == "2"
    assert resp.ext_fields["queueOffset"] == "0"
    (rec,) = pull(door, topic, 2)
    assert rec.body == b"x\x9c\x01\x02"
    assert rec.sysflag & record.SYSFLAG_COMPRESSED
    assert rec.flag == 7
    assert rec.born_timestamp == 1700000000123
    assert rec.born_host.startswith("127.0.0.1:")
    assert rec.properties["TAGS"] == "TagA"
    assert rec.properties["KEYS"] == "k1 k2"
    assert rec.properties["color"] == "blue"
    assert rec.properties["UNIQ_KEY"] == key
    assert offset_of(resp.ext_fields["msgId"]) == rec.phys_offset
    assert "transactionId" not in resp.ext_fields


@pytest.mark.parametrize("serialize", [JSON, BINARY], ids=["json", "rocketmq"])
def test_a_v2_send_with_short_names_lands_where_the_broker_picks(
    door: Door, serialize: SerializeType
) -> None:
    topic = fresh_topic(door, queues=1)
    key = uniq(2)
    with RemotingClient(door.door) as client:
        resp = client.call(
            RequestCode.SEND_MESSAGE_V2,
            v2_header(topic, -1, props(TAGS="TagB", UNIQ_KEY=key)),
            b"v2 body",
            serialize_type=serialize,
        )
    assert resp.code == ResponseCode.SUCCESS, resp.remark
    assert resp.ext_fields["queueId"] == "0"
    (rec,) = pull(door, topic, 0)
    assert (rec.body, rec.properties["TAGS"], rec.properties["UNIQ_KEY"]) == (
        b"v2 body",
        "TagB",
        key,
    )
    assert rec.flag == 7


@pytest.mark.parametrize(
    ("code", "serialize"),
    [
        (RequestCode.SEND_MESSAGE, JSON),
        (RequestCode.SEND_BATCH_MESSAGE, JSON),
        (RequestCode.SEND_BATCH_MESSAGE, BINARY),
    ],
    ids=["10-batch-json", "320-json", "320-rocketmq"],
)
def test_a_batch_stores_each_item_and_answers_every_id(
    door: Door, code: int, serialize: SerializeType
) -> None:
    topic = fresh_topic(door)
    keys = [uniq(10 + i) for i in range(5)]
    body = b"".join(
        batch_item(f"item-{i}".encode(), props(TAGS=f"T{i}", UNIQ_KEY=k), flag=i)
        for i, k in enumerate(keys)
    )
    outer = props(WAIT="true")
    header = (
        v1_header(topic, 1, outer, batch="1")
        if code == RequestCode.SEND_MESSAGE
        else v2_header(topic, 1, outer, m="1")
    )
    with RemotingClient(door.door) as client:
        resp = client.call(code, header, body, serialize_type=serialize)
    assert resp.code == ResponseCode.SUCCESS, resp.remark
    records = pull(door, topic, 1)
    assert [r.body for r in records] == [f"item-{i}".encode() for i in range(5)]
    assert [r.properties["UNIQ_KEY"] for r in records] == keys
    assert [r.properties["TAGS"] for r in records] == [f"T{i}" for i in range(5)]
    assert [r.flag for r in records] == list(range(5))
    ids = resp.ext_fields["msgId"].split(",")
    assert [offset_of(i) for i in ids] == [r.phys_offset for r in records]


def test_a_compressed_batch_stores_its_items_uncompressed(door: Door) -> None:
    """The C++ client zlib-compresses a whole batch body of 4 KB and more (sysflag 1); each
    item is stored as sent, uncompressed, and a body that does not inflate is refused."""
    topic = fresh_topic(door)
    keys = [uniq(40 + i) for i in range(32)]
    body = b"".join(
        batch_item(b"x" * 120 + bytes([65 + i % 26]), props(UNIQ_KEY=k)) for i, k in enumerate(keys)
    )
    assert len(body) > 4096
    header = v1_header(topic, 2, "", batch="1")
    header["sysFlag"] = str(record.SYSFLAG_COMPRESSED)
    with RemotingClient(door.door) as client:
        resp = client.call(RequestCode.SEND_MESSAGE, header, zlib.compress(body))
        assert resp.code == ResponseCode.SUCCESS, resp.remark
        garbage = client.call(RequestCode.SEND_MESSAGE, header, b"not zlib at all")
        assert garbage.code == ResponseCode.MESSAGE_ILLEGAL
        assert "inflate" in garbage.remark
    records = pull(door, topic, 2)
    assert [r.properties["UNIQ_KEY"] for r in records] == keys
    assert [r.body[-1] for r in records] == [65 + i % 26 for i in range(32)]
    assert not any(r.sysflag & record.SYSFLAG_COMPRESSED for r in records)


def test_a_batch_whose_sizes_lie_is_refused_and_nothing_is_stored(door: Door) -> None:
    topic = fresh_topic(door)
    good = batch_item(b"ok", props(UNIQ_KEY=uniq(30)))
    bad = bytearray(good)
    bad[0:4] = struct.pack(">i", len(good) + 50)  # total past the end
    with RemotingClient(door.door) as client:
        resp = client.call(
            RequestCode.SEND_MESSAGE, v1_header(topic, 0, "", batch="1"), good + bytes(bad)
        )
        assert resp.code == ResponseCode.MESSAGE_ILLEGAL
        assert resp.remark
        # the connection still serves
        again = client.call(RequestCode.SEND_MESSAGE, v1_header(topic, 0, "", batch="1"), good)
    assert again.code == ResponseCode.SUCCESS
    assert len(pull(door, topic, 0)) == 1


@pytest.mark.parametrize(
    "header",
    [
        {"producerGroup": "PG", "queueId": "0"},  # no topic
        {"producerGroup": "PG", "topic": "T", "queueId": "zero"},
        {"producerGroup": "PG", "topic": "T", "queueId": "0", "bornTimestamp": "1e3"},
        {"producerGroup": "PG", "topic": "T", "queueId": "0", "bornTimestamp": str(1 << 70)},
        {"topic": "T", "queueId": "0"},  # no group
    ],
    ids=["no-topic", "bad-queue", "bad-born", "huge-born", "no-group"],
)
def test_a_bad_header_is_answered_invalid_parameter(door: Door, header: dict[str, str]) -> None:
    with RemotingClient(door.door) as client:
        resp = client.call(RequestCode.SEND_MESSAGE, header, b"body")
        assert resp.code == ResponseCode.INVALID_PARAMETER
        assert resp.remark
        assert client.call(RequestCode.SEND_MESSAGE_V2, {}, b"").code == (
            ResponseCode.INVALID_PARAMETER
        )


def test_an_unknown_topic_is_created_from_tbw102_on_first_send(door: Door) -> None:
    topic = f"DoorAuto{time.time_ns()}"
    with RemotingClient(door.door) as client:
        resp = client.call(
            RequestCode.SEND_MESSAGE,
            v1_header(topic, 3, props(UNIQ_KEY=uniq(40))),
            b"auto",
        )
    assert resp.code == ResponseCode.SUCCESS, resp.remark
    with Admin(door.namesrv) as admin:
        route = wait_for(lambda: _route(admin, topic), 15, "the new topic's route")
    assert route.queue_datas[0].write_queue_nums == 4
    assert [r.body for r in pull(door, topic, 3)] == [b"auto"]


def _route(admin: Admin, topic: str) -> TopicRouteData | None:
    try:
        return admin.topic_route(topic)
    except FerryError:  # not routed yet
        return None


def test_a_delay_level_sends_the_message_later_with_its_level(door: Door) -> None:
    topic = fresh_topic(door)
    key = uniq(50)
    sent_ms = time.time_ns() // 1_000_000
    with RemotingClient(door.door) as client:
        resp = client.call(
            RequestCode.SEND_MESSAGE, v1_header(topic, 0, props(DELAY="1", UNIQ_KEY=key)), b"late"
        )
    assert resp.code == ResponseCode.SUCCESS, resp.remark
    assert pull(door, topic, 0) == []  # held by the scheduler (level 1: 1 s)
    (rec,) = wait_for(lambda: pull(door, topic, 0), 20, "the delayed message")
    assert (rec.body, rec.properties["UNIQ_KEY"]) == (b"late", key)
    assert rec.store_timestamp >= sent_ms + 900  # stored in the topic once due (level 1: 1 s)


@pytest.mark.parametrize("commit", [True, False], ids=["commit", "rollback"])
def test_end_transaction_commits_or_drops_a_half_message(door: Door, commit: bool) -> None:
    topic = fresh_topic(door, queues=1)
    key = uniq(60 + commit)
    sent = props(TRAN_MSG="true", PGROUP="TPG", UNIQ_KEY=key)
    with RemotingClient(door.door) as client:
        resp = client.call(
            RequestCode.SEND_MESSAGE,
            v1_header(topic, 0, sent, sysFlag=str(record.SYSFLAG_TX_PREPARED), producerGroup="TPG"),
            b"half",
        )
        assert resp.code == ResponseCode.SUCCESS, resp.remark
        assert resp.ext_fields["transactionId"] == key
        assert pull(door, topic, 0) == []  # set aside until it ends
        end = {
            "producerGroup": "TPG",
            "tranStateTableOffset": resp.ext_fields["queueOffset"],
            "commitLogOffset": str(offset_of(resp.ext_fields["msgId"])),
            "commitOrRollback": str(0x8 if commit else 0xC),
            "fromTransactionCheck": "false",
            "msgId": key,
            "transactionId": resp.ext_fields["transactionId"],
        }
        answer = client.call(RequestCode.END_TRANSACTION, end)
        assert answer.code == ResponseCode.SUCCESS, answer.remark
        if commit:
            (rec,) = wait_for(lambda: pull(door, topic, 0), 10, "the committed message")
            assert (rec.body, rec.properties["UNIQ_KEY"]) == (b"half", key)
        else:
            # a sentinel sent after the rollback: once it is there, the rollback has been served
            client.call(
                RequestCode.SEND_MESSAGE, v1_header(topic, 0, props(UNIQ_KEY=uniq(99))), b"after"
            )
            assert [r.body for r in wait_for(lambda: pull(door, topic, 0), 10, "x")] == [b"after"]
        bad = client.call(RequestCode.END_TRANSACTION, {**end, "commitLogOffset": "x"})
        assert bad.code == ResponseCode.INVALID_PARAMETER
