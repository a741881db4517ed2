"""Bodies over compress_over travel and are stored zlib-compressed, flagged, and come back
whole to consumers."""

from __future__ import annotations

import zlib

import pytest

from ferry.client.consume_service import restore_retry_topic
from ferry.client.message import Message
from ferry.client.message_decode import decode_message
from ferry.client.message_encode import compressed_body, encode_message
from ferry.protocol import record

BIG = b"ferry " * 2000


def roundtrip(raw: bytes) -> record.Record:
    (rec,) = record.iter_records(raw)
    return rec


def test_a_body_over_the_threshold_is_compressed_flagged_and_decoded_whole() -> None:
    raw = encode_message(
        Message("T", BIG), {}, born_timestamp=1, born_host=bytes(8), compress_over=4096
    )
    rec = roundtrip(raw)
    assert rec.sysflag & record.SYSFLAG_COMPRESSED
    assert zlib.decompress(rec.body) == BIG and len(rec.body) < len(BIG) // 10
    msg = decode_message(rec, "broker-a")
    assert msg.body == BIG
    assert msg.sysflag & record.SYSFLAG_COMPRESSED


@pytest.mark.parametrize(("body", "over"), [(b"x" * 4096, 4096), (BIG, -1)])
def test_bodies_at_or_under_the_threshold_or_with_compression_off_travel_as_they_are(
    body: bytes, over: int
) -> None:
    assert compressed_body(body, over) == (body, 0)


def test_a_body_that_does_not_shrink_is_sent_as_it_is() -> None:
    already = zlib.compress(bytes(range(256)) * 4 + BIG, 9)  # compressed data: no gain
    assert compressed_body(already, 10) == (already, 0)


def test_a_corrupt_compressed_body_is_a_record_error() -> None:
    raw = record.encode_record(b"T", b"not zlib", b"", sysflag=record.SYSFLAG_COMPRESSED)
    with pytest.raises(record.RecordError, match="corrupt"):
        decode_message(roundtrip(raw), "broker-a")


def test_a_retried_message_shows_its_original_topic() -> None:
    props = record.encode_properties({record.PROPERTY_RETRY_TOPIC: "Orders"})
    msg = decode_message(roundtrip(record.encode_record(b"%RETRY%g", b"x", props)), "broker-a")
    assert restore_retry_topic(msg).topic == "Orders"
    assert msg.queue.topic == "%RETRY%g"
