"""ferry.proxy.sending: what the proxy refuses before it reaches a broker, with the Code the
client maps to its own exception, and what it hands the SDK (the client's id as UNIQ_KEY, a
FIFO message's group as __SHARDINGKEY, a DELAY message's time in ms)."""

from __future__ import annotations

import asyncio
import dataclasses
import time

import pytest

from ferry.client.message import Message, MessageQueue, SendResult, SendStatus
from ferry.protocol.errors import MessageIllegalError, SystemBusyError, TopicNotExistError
from ferry.proxy.convert import Inbound, body_digest
from ferry.proxy.errors import ProxyError
from ferry.proxy.protocol import Code, DigestType, Encoding, MessageType
from ferry.proxy.sending import send_all, to_message

LIMIT = 1024
NOW = 1_800_000_000  # seconds; the clock the tests check delivery times against
PLAIN = Inbound(
    topic="T",
    body=b"body",
    tag="TagA",
    keys=("k1", "k2"),
    message_id="0102FC0000000127150B22CF0600000000",
    message_type=MessageType.NORMAL,
    user_properties={"color": "blue"},
    message_group=None,
    delivery_seconds=None,
    digest=None,
    encoding=Encoding.IDENTITY,
)


def test_a_normal_message_keeps_tag_keys_properties_and_the_client_id() -> None:
    got = to_message(PLAIN, LIMIT)
    assert (got.topic, got.body, got.tags, got.keys) == ("T", b"body", "TagA", ["k1", "k2"])
    assert got.properties == {"color": "blue", "UNIQ_KEY": PLAIN.message_id}


@pytest.mark.parametrize(
    ("change", "code"),
    [
        ({"topic": "bad topic"}, Code.ILLEGAL_TOPIC),
        ({"body": b""}, Code.MESSAGE_BODY_EMPTY),
        ({"body": b"x" * (LIMIT + 1)}, Code.MESSAGE_BODY_TOO_LARGE),
        ({"encoding": Encoding.GZIP}, Code.UNSUPPORTED),
        ({"message_id": ""}, Code.ILLEGAL_MESSAGE_ID),
        ({"tag": " "}, Code.ILLEGAL_MESSAGE_TAG),
        ({"tag": "a||b"}, Code.ILLEGAL_MESSAGE_TAG),
        ({"keys": ("two words",)}, Code.ILLEGAL_MESSAGE_KEY),
        ({"user_properties": {"UNIQ_KEY": "x"}}, Code.ILLEGAL_MESSAGE_PROPERTY_KEY),
        ({"user_properties": {"a\x01b": "x"}}, Code.ILLEGAL_MESSAGE_PROPERTY_KEY),
        ({"message_type": MessageType.LITE}, Code.UNSUPPORTED),
        ({"message_type": 99}, Code.UNSUPPORTED),
        ({"user_properties": {"__SHARDINGKEY": "g"}}, Code.ILLEGAL_MESSAGE_PROPERTY_KEY),
        # a type conflicting with its fields
        ({"message_group": "g"}, Code.MESSAGE_PROPERTY_CONFLICT_WITH_TYPE),
        ({"delivery_seconds": 1}, Code.MESSAGE_PROPERTY_CONFLICT_WITH_TYPE),
        ({"message_type": MessageType.FIFO}, Code.MESSAGE_PROPERTY_CONFLICT_WITH_TYPE),
        (
            {"message_type": MessageType.FIFO, "message_group": "g", "delivery_seconds": 1},
            Code.MESSAGE_PROPERTY_CONFLICT_WITH_TYPE,
        ),
        ({"message_type": MessageType.DELAY}, Code.MESSAGE_PROPERTY_CONFLICT_WITH_TYPE),
        (
            {"message_type": MessageType.DELAY, "delivery_seconds": NOW, "message_group": "g"},
            Code.MESSAGE_PROPERTY_CONFLICT_WITH_TYPE,
        ),
        (
            {"message_type": MessageType.TRANSACTION, "message_group": "g"},
            Code.MESSAGE_PROPERTY_CONFLICT_WITH_TYPE,
        ),
        (
            {"message_type": MessageType.TRANSACTION, "delivery_seconds": NOW},
            Code.MESSAGE_PROPERTY_CONFLICT_WITH_TYPE,
        ),
        # a group or a time that is not one
        ({"message_type": MessageType.FIFO, "message_group": " "}, Code.ILLEGAL_MESSAGE_GROUP),
        ({"message_type": MessageType.FIFO, "message_group": "a\tb"}, Code.ILLEGAL_MESSAGE_GROUP),
        ({"message_type": MessageType.FIFO, "message_group": "g" * 65}, Code.ILLEGAL_MESSAGE_GROUP),
        ({"message_type": MessageType.DELAY, "delivery_seconds": -1}, Code.ILLEGAL_DELIVERY_TIME),
        (  # milliseconds where seconds belong: tens of thousands of years away
            {"message_type": MessageType.DELAY, "delivery_seconds": NOW * 1000},
            Code.ILLEGAL_DELIVERY_TIME,
        ),
        (
            {"message_type": MessageType.DELAY, "delivery_seconds": NOW + 401 * 86_400},
            Code.ILLEGAL_DELIVERY_TIME,
        ),
        ({"digest": (DigestType.CRC32, "00000000")}, Code.MESSAGE_CORRUPTED),
        ({"digest": (42, "00")}, Code.MESSAGE_CORRUPTED),
    ],
)
def test_refusals_name_the_client_code(change: dict[str, object], code: Code) -> None:
    with pytest.raises(ProxyError) as refused:
        to_message(dataclasses.replace(PLAIN, **change), LIMIT, NOW)  # type: ignore[arg-type]
    assert refused.value.code is code
    assert refused.value.message


def test_a_fifo_message_keeps_its_group_as_the_sharding_key() -> None:
    fifo = dataclasses.replace(PLAIN, message_type=MessageType.FIFO, message_group="order-7")
    got = to_message(fifo, LIMIT, NOW)
    assert got.properties["__SHARDINGKEY"] == "order-7"
    assert got.deliver_at_ms is None


def test_a_delay_message_is_a_timer_message_at_its_time_in_ms() -> None:
    delayed = dataclasses.replace(PLAIN, message_type=MessageType.DELAY, delivery_seconds=NOW + 3)
    got = to_message(delayed, LIMIT, NOW)
    assert got.deliver_at_ms == (NOW + 3) * 1000
    assert "__SHARDINGKEY" not in got.properties
    past = dataclasses.replace(delayed, delivery_seconds=NOW - 60)  # due: stored at once
    assert to_message(past, LIMIT, NOW).deliver_at_ms == (NOW - 60) * 1000


def test_a_matching_digest_in_any_case_is_taken() -> None:
    digest = (DigestType.MD5, body_digest(b"body", DigestType.MD5).lower())
    assert to_message(dataclasses.replace(PLAIN, digest=digest), LIMIT).body == b"body"


class FakeProducer:
    def __init__(self, fail: dict[str, Exception]) -> None:
        self.fail = fail
        self.sent: list[Message] = []
        self.orderly: list[tuple[str | bytes, bytes]] = []
        self.halves: list[Message] = []

    async def send(self, msg: Message) -> SendResult:
        error = self.fail.get(msg.body.decode())
        if error is not None:
            raise error
        self.sent.append(msg)
        queue = MessageQueue(msg.topic, "broker-a", 0)
        return SendResult(SendStatus.SEND_OK, "id", "offset-id", queue, len(self.sent) + 10)

    async def send_orderly(self, msg: Message, sharding_key: str | bytes) -> SendResult:
        # the first message of a group waits, so a later one sent at once would overtake it
        if not any(key == sharding_key for key, _ in self.orderly):
            await asyncio.sleep(0.01)  # wait-ok: a slow first send, for order to be tested
        self.orderly.append((sharding_key, msg.body))
        return await self.send(msg)

    async def send_half(self, msg: Message) -> tuple[SendResult, str]:
        self.halves.append(msg)
        return await self.send(msg), f"tx-{len(self.halves)}"


def test_send_all_answers_each_message_in_order_with_its_own_outcome() -> None:
    producer = FakeProducer({"busy": SystemBusyError("full"), "gone": TopicNotExistError("T")})
    batch = [
        dataclasses.replace(PLAIN, body=body, message_id=f"01{i}")
        for i, body in enumerate([b"a", b"busy", b"", b"gone"])
    ]
    entries = asyncio.run(send_all(producer, batch, LIMIT))
    assert [(e.message_id, e.code) for e in entries] == [
        ("010", Code.OK),
        ("011", Code.TOO_MANY_REQUESTS),
        ("012", Code.MESSAGE_BODY_EMPTY),
        ("013", Code.TOPIC_NOT_FOUND),
    ]
    assert entries[0].offset == 11
    assert [m.body for m in producer.sent] == [b"a"]


def test_fifo_messages_go_orderly_by_group_in_their_order() -> None:
    producer = FakeProducer({})
    batch = [
        dataclasses.replace(
            PLAIN,
            body=f"{group}{i}".encode(),
            message_id=f"{group}{i}",
            message_type=MessageType.FIFO,
            message_group=group,
        )
        for i in range(3)
        for group in ("a", "b")
    ]
    entries = asyncio.run(send_all(producer, batch, LIMIT))
    assert all(e.code is Code.OK for e in entries)
    by_group = {g: [body for key, body in producer.orderly if key == g] for g in ("a", "b")}
    assert by_group == {"a": [b"a0", b"a1", b"a2"], "b": [b"b0", b"b1", b"b2"]}


def test_a_transaction_message_is_a_half_answered_with_its_transaction_id() -> None:
    producer = FakeProducer({})
    half = dataclasses.replace(PLAIN, message_type=MessageType.TRANSACTION)
    refused = asyncio.run(send_all(producer, [half], LIMIT))
    assert refused[0].code is Code.UNSUPPORTED  # no transaction side given
    entries = asyncio.run(send_all(producer, [half], LIMIT, producer))
    assert (entries[0].code, entries[0].transaction_id) == (Code.OK, "tx-1")
    assert [m.body for m in producer.halves] == [b"body"]


def test_a_delay_the_broker_refuses_is_an_illegal_delivery_time() -> None:
    producer = FakeProducer({"far": MessageIllegalError("past timerMaxDelaySec (259200 s)")})
    future = int(time.time()) + 3600
    far = dataclasses.replace(
        PLAIN, body=b"far", message_type=MessageType.DELAY, delivery_seconds=future
    )
    entries = asyncio.run(send_all(producer, [far], LIMIT))
    assert entries[0].code is Code.ILLEGAL_DELIVERY_TIME
    assert "timerMaxDelaySec" in entries[0].message
