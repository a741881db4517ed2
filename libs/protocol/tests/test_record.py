import zlib

import pytest

from ferry.protocol import record
from ferry.protocol.record import (
    RecordError,
    check_layout,
    decode_offset_msg_id,
    decode_properties,
    encode_properties,
    encode_record,
    iter_records,
    java_string_hash,
    offset_msg_id,
    tags_code_of,
)


def _record(
    body: bytes = b"hello", props: dict[str, str] | None = None, topic: bytes = b"T"
) -> bytes:
    return encode_record(
        topic,
        body,
        encode_properties(props or {}),
        born_timestamp=1234,
        born_host=record.pack_host("10.0.0.1:5555"),
        flag=3,
    )


def test_fixed_overhead_matches_rocketmq_v1_ipv4() -> None:
    assert len(_record(b"", {}, b"")) == record.FIXED_SIZE == 91


def test_round_trip_keeps_every_field() -> None:
    raw = _record(b"\x00body\xff", {"TAGS": "TagA", "KEYS": "k1 k2", "x": "ünïcode"}, b"Topic_1")
    (rec,) = iter_records(raw)
    assert rec.body == b"\x00body\xff"
    assert rec.topic == "Topic_1"
    assert rec.properties == {"TAGS": "TagA", "KEYS": "k1 k2", "x": "ünïcode"}
    assert rec.flag == 3
    assert rec.born_timestamp == 1234
    assert rec.born_host == "10.0.0.1:5555"
    assert rec.total_size == len(raw)


def test_check_layout_accepts_good_and_rejects_bad_records() -> None:
    raw = _record()
    assert check_layout(raw, 0, len(raw)) == len(raw)
    with pytest.raises(RecordError):
        check_layout(raw[:-1], 0, len(raw) - 1)
    bad_magic = b"\x00\x00\x00\x10" + raw[4:]
    with pytest.raises(RecordError):
        check_layout(bad_magic, 0, len(bad_magic))
    with pytest.raises(RecordError):
        check_layout(b"x" * 200, 0, 200)


def test_crc_covers_header_and_properties_not_only_body() -> None:
    raw = bytearray(_record(props={"KEYS": "a"}))
    record.CRC.pack_into(raw, 8, record.record_crc(raw, 0, len(raw)))
    assert record.verify_crc(raw, 0, len(raw))
    raw[-1] ^= 0xFF  # flip a property byte
    assert not record.verify_crc(raw, 0, len(raw))
    assert record.record_crc(raw, 0, len(raw)) == zlib.crc32(bytes(raw[12:]))


def test_iter_records_skips_blank_tail() -> None:
    blank = (12).to_bytes(4, "big") + record.BLANK_MAGIC.to_bytes(4, "big") + bytes(4)
    raw = _record(b"a") + blank + _record(b"b")
    assert [r.body for r in iter_records(raw)] == [b"a", b"b"]


def test_java_string_hash_matches_java() -> None:
    # values of "…".hashCode() in Java
    assert java_string_hash("TagA") == 2598919
    assert java_string_hash("") == 0
    assert java_string_hash("hello world") == 1794106052
    assert java_string_hash("polygenelubricants") == -2147483648


def test_tags_code_reads_the_tags_property_only() -> None:
    assert tags_code_of(encode_properties({"TAGS": "TagA"})) == java_string_hash("TagA")
    assert (
        tags_code_of(encode_properties({"X": "TAGS\x01", "Y": "1"}[:0] if False else {"KEYS": "k"}))
        == 0
    )
    assert tags_code_of(encode_properties({"KEYS": "k", "TAGS": "B"})) == java_string_hash("B")


def test_properties_round_trip_empty() -> None:
    assert encode_properties({}) == b""
    assert decode_properties(b"") == {}


def test_offset_msg_id_round_trip() -> None:
    mid = offset_msg_id("192.168.1.7:10911", 2**40 + 5)
    assert len(mid) == 32 and mid == mid.upper()
    assert decode_offset_msg_id(mid) == ("192.168.1.7:10911", 2**40 + 5)
    with pytest.raises(RecordError):
        decode_offset_msg_id("zz")


def test_retopic_keeps_the_message_and_updates_its_properties() -> None:
    raw = record.encode_record(
        b"Orders",
        b"body",
        record.encode_properties({"TAGS": "A", "DELAY": "2", "UNIQ_KEY": "u"}),
        flag=3,
        sysflag=record.SYSFLAG_COMPRESSED,
        born_timestamp=77,
        born_host=record.pack_host("10.0.0.2:5"),
        reconsume_times=4,
    )
    (original,) = record.iter_records(raw)
    copy_raw = record.retopic(
        original,
        "SCHEDULE_TOPIC_XXXX",
        set_props={"REAL_TOPIC": "Orders", "REAL_QID": "1"},
        drop_props=("DELAY",),
        queue_id=1,
    )
    (copy,) = record.iter_records(copy_raw)
    assert copy.topic == "SCHEDULE_TOPIC_XXXX" and copy.queue_id == 1
    assert (copy.body, copy.flag, copy.sysflag, copy.born_timestamp, copy.born_host) == (
        b"body",
        3,
        record.SYSFLAG_COMPRESSED,
        77,
        "10.0.0.2:5",
    )
    assert copy.reconsume_times == 4
    assert copy.properties == {
        "TAGS": "A",
        "UNIQ_KEY": "u",
        "REAL_TOPIC": "Orders",
        "REAL_QID": "1",
    }
