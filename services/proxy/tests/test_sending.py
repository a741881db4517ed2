"""ferry.proxy.sending: what the proxy refuses before it reaches a broker, with the Code the
client maps to its own exception, and what it hands the SDK (the client's id as UNIQ_KEY)."""

from __future__ import annotations

import asyncio
import dataclasses

import pytest

from ferry.client.message import Message, MessageQueue, SendResult, SendStatus
from ferry.protocol.errors import SystemBusyError, TopicNotExistError
from ferry.proxy.convert import Inbound, body_digest
from ferry.proxy.errors import ProxyError
from ferry.proxy.protocol import Code, DigestType, Encoding, MessageType
from ferry.proxy.sending import send_all, to_message

LIMIT = 1024
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
        ({"message_type": MessageType.FIFO, "message_group": "g"}, Code.UNSUPPORTED),
        ({"message_type": MessageType.TRANSACTION}, Code.UNSUPPORTED),
        ({"message_type": 99}, Code.UNSUPPORTED),
        ({"message_group": "g"}, Code.MESSAGE_PROPERTY_CONFLICT_WITH_TYPE),
        ({"delivery_seconds": 1}, Code.MESSAGE_PROPERTY_CONFLICT_WITH_TYPE),
        ({"digest": (DigestType.CRC32, "00000000")}, Code.MESSAGE_CORRUPTED),
        ({"digest": (42, "00")}, Code.MESSAGE_CORRUPTED),
    ],
)
def test_refusals_name_the_client_code(change: dict[str, object], code: Code) -> None:
    with pytest.raises(ProxyError) as refused:
        to_message(dataclasses.replace(PLAIN, **change), LIMIT)  # type: ignore[arg-type]
    assert refused.value.code is code
    assert refused.value.message


def test_a_matching_digest_in_any_case_is_taken() -> None:
    digest = (DigestType.MD5, body_digest(b"body", DigestType.MD5).lower())
    assert to_message(dataclasses.replace(PLAIN, digest=digest), LIMIT).body == b"body"


class FakeProducer:
    def __init__(self, fail: dict[str, Exception]) -> None:
        self.fail = fail
        self.sent: list[Message] = []

    async def send(self, msg: Message) -> SendResult:
        error = self.fail.get(msg.body.decode())
        if error is not None:
            raise error
        self.sent.append(msg)
        queue = MessageQueue(msg.topic, "broker-a", 0)
        return SendResult(SendStatus.SEND_OK, "id", "offset-id", queue, len(self.sent) + 10)


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
