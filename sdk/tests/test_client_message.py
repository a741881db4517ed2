"""Messages to records and back, through ferry.protocol.record as the broker stores them."""

from __future__ import annotations

import pytest

from ferry.client.message import Message, MessageExt, MessageQueue, SendResult, SendStatus
from ferry.client.message_decode import decode_message
from ferry.client.message_encode import encode_message, message_properties
from ferry.protocol import record
from ferry.protocol.errors import InvalidParameterError

BORN_HOST = record.pack_host("10.1.2.3:0")
MSG_ID = "0A01020300011234567800000001ABCD"


def as_stored(raw: bytes, *, queue_id: int, queue_offset: int, phys: int, store_host: str) -> bytes:
    """What the store does to a producer's record: fills queue id, offsets and store stamp."""
    buf = bytearray(raw)
    record.QUEUE_ID.pack_into(buf, record.OFF_QUEUE_ID, queue_id)
    record.OFFSETS.pack_into(buf, record.OFF_OFFSETS, queue_offset, phys)
    record.STORE_STAMP.pack_into(
        buf, record.OFF_STORE_STAMP, 1_700_000_000_123, record.pack_host(store_host)
    )
    return bytes(buf)


def round_trip(msg: Message, msg_id: str = MSG_ID) -> tuple[bytes, MessageExt]:
    props = message_properties(msg, msg_id)
    raw = encode_message(msg, props, born_timestamp=1_700_000_000_000, born_host=BORN_HOST)
    stored = as_stored(raw, queue_id=5, queue_offset=42, phys=4096, store_host="10.9.9.9:10911")
    (rec,) = record.iter_records(stored)
    return raw, decode_message(rec, "broker-a")


def test_round_trip_keeps_tags_keys_properties_and_body() -> None:
    msg = Message(
        "orders",
        b"\x00payload\xff",
        tags="created",
        keys=["order-1", "customer-7"],
        properties={"region": "eu", "trace": "x"},
    )
    _, ext = round_trip(msg)
    assert ext.topic == "orders"
    assert ext.body == b"\x00payload\xff"
    assert ext.tags == "created"
    assert ext.keys == ["order-1", "customer-7"]
    assert ext.properties["region"] == "eu"
    assert ext.properties["trace"] == "x"
    assert ext.properties["KEYS"] == "order-1 customer-7"
    assert ext.msg_id == MSG_ID
    assert ext.queue == MessageQueue("orders", "broker-a", 5)
    assert ext.queue_offset == 42
    assert ext.commitlog_offset == 4096
    assert ext.born_timestamp == 1_700_000_000_000
    assert ext.store_timestamp == 1_700_000_000_123
    assert ext.born_host == "10.1.2.3:0"
    assert ext.store_host == "10.9.9.9:10911"
    assert ext.broker_name == "broker-a"
    assert ext.offset_msg_id == record.offset_msg_id("10.9.9.9:10911", 4096)
    assert record.decode_offset_msg_id(ext.offset_msg_id) == ("10.9.9.9:10911", 4096)


def test_unicode_body_and_properties_survive() -> None:
    msg = Message("t", "héllo wörld ✓", tags="标签", keys="ключ", properties={"名": "值 ✓"})
    _, ext = round_trip(msg)
    assert ext.body.decode() == "héllo wörld ✓"
    assert ext.tags == "标签"
    assert ext.keys == ["ключ"]
    assert ext.properties["名"] == "值 ✓"


def test_empty_body_and_no_tags_round_trip() -> None:
    _, ext = round_trip(Message("t", b""))
    assert ext.body == b""
    assert ext.tags is None
    assert ext.keys == []
    assert set(ext.properties) == {"UNIQ_KEY"}


def test_delay_and_timer_properties_are_written() -> None:
    _, ext = round_trip(Message("t", b"x", delay_level=3, deliver_at_ms=1_800_000_000_000))
    assert ext.properties["DELAY"] == "3"
    assert ext.delay_level == 3
    assert ext.properties["TIMER_DELIVER_MS"] == "1800000000000"
    assert ext.deliver_at_ms == 1_800_000_000_000


def test_record_has_the_producer_fields_and_no_store_fields() -> None:
    raw, _ = round_trip(Message("t", b"abc", tags="A"))
    (rec,) = record.iter_records(raw)
    assert rec.born_timestamp == 1_700_000_000_000
    assert rec.phys_offset == 0 and rec.store_timestamp == 0
    assert rec.properties["TAGS"] == "A"
    assert record.check_layout(raw, 0, len(raw)) == len(raw)


@pytest.mark.parametrize(
    "msg",
    [
        Message("t", b"x", properties={"bad\x01key": "v"}),
        Message("t", b"x", properties={"k": "bad\x02value"}),
        Message("t", b"x", tags="tag\x01"),
        Message("t", b"x", keys=["ok", "bad\x02"]),
    ],
)
def test_reserved_separators_are_rejected(msg: Message) -> None:
    with pytest.raises(InvalidParameterError, match="reserved separator"):
        message_properties(msg, MSG_ID)


def test_message_normalises_body_and_keys() -> None:
    msg = Message("t", "text", keys="one")
    assert msg.body == b"text"
    assert msg.keys == ["one"]
    assert Message("t", bytearray(b"ab")).body == b"ab"
    assert Message("t", b"x", keys=("a", "b")).keys == ["a", "b"]
    with pytest.raises(InvalidParameterError):
        Message("t", 12)  # type: ignore[arg-type]


def test_message_queues_sort_and_hash() -> None:
    queues = [
        MessageQueue("t", "broker-b", 0),
        MessageQueue("t", "broker-a", 1),
        MessageQueue("t", "broker-a", 0),
    ]
    assert sorted(queues)[0] == MessageQueue("t", "broker-a", 0)
    assert len({*queues, MessageQueue("t", "broker-a", 0)}) == 3
    assert str(queues[0]) == "t@broker-b#0"


def test_batch_send_result_splits_its_ids() -> None:
    result = SendResult(SendStatus.SEND_OK, "A,B,C", "X,Y,Z", MessageQueue("t", "b", 0), 10)
    assert result.msg_ids == ["A", "B", "C"]
