"""What a consumer's send-back stores: the retry or DLQ copy of a stored message."""

from __future__ import annotations

from ferry.protocol import record
from ferry.protocol.retry_copy import plan_send_back

UNIQ = "0A00000100002A9F0000000000000001"


def stored(topic: str = "Orders", reconsumed: int = 0, **props: str) -> record.Record:
    properties = {"TAGS": "TagA", "KEYS": "k1 k2", "UNIQ_KEY": UNIQ, **props}
    raw = bytearray(
        record.encode_record(
            topic.encode(),
            b"body",
            record.encode_properties(properties),
            flag=7,
            sysflag=record.SYSFLAG_COMPRESSED,
            born_timestamp=123,
            born_host=record.pack_host("10.0.0.1:0"),
            reconsume_times=reconsumed,
        )
    )
    record.OFFSETS.pack_into(raw, record.OFF_OFFSETS, 5, 4096)
    (rec,) = record.iter_records(bytes(raw))
    return rec


def copy_of(plan_record: bytes) -> record.Record:
    (rec,) = record.iter_records(plan_record)
    return rec


def test_a_first_failure_goes_to_the_retry_topic_with_its_origin() -> None:
    plan = plan_send_back(stored(), "g", delay_level=0, max_reconsume_times=16)
    assert (plan.topic, plan.to_dlq, plan.delay_level) == ("%RETRY%g", False, 3)
    copy = copy_of(plan.record)
    assert copy.topic == "%RETRY%g"
    assert copy.reconsume_times == 1
    assert (copy.body, copy.flag, copy.sysflag, copy.born_timestamp) == (
        b"body",
        7,
        record.SYSFLAG_COMPRESSED,
        123,
    )
    assert copy.born_host == "10.0.0.1:0"
    props = copy.properties
    assert props["RETRY_TOPIC"] == "Orders"
    assert props["ORIGIN_MESSAGE_ID"] == UNIQ
    assert props["UNIQ_KEY"] == UNIQ and props["TAGS"] == "TagA" and props["KEYS"] == "k1 k2"
    assert props["RECONSUME_TIME"] == "1"
    assert props["DELAY"] == "3"


def test_later_retries_keep_the_original_topic_and_grow_the_delay() -> None:
    retried = stored("%RETRY%g", reconsumed=2, RETRY_TOPIC="Orders", ORIGIN_MESSAGE_ID=UNIQ)
    plan = plan_send_back(retried, "g", delay_level=0, max_reconsume_times=16)
    copy = copy_of(plan.record)
    assert plan.delay_level == 5
    assert copy.properties["RETRY_TOPIC"] == "Orders"
    assert copy.reconsume_times == 3


def test_out_of_reconsume_times_or_asked_for_it_goes_to_the_dlq() -> None:
    exhausted = stored("%RETRY%g", reconsumed=2, RETRY_TOPIC="Orders", DELAY="4")
    plan = plan_send_back(exhausted, "g", delay_level=0, max_reconsume_times=2)
    assert (plan.topic, plan.to_dlq) == ("%DLQ%g", True)
    props = copy_of(plan.record).properties
    assert props["DLQ_ORIGIN_TOPIC"] == "Orders"
    assert props["DLQ_ORIGIN_MESSAGE_ID"] == UNIQ
    assert "DELAY" not in props
    assert plan_send_back(stored(), "g", delay_level=-1, max_reconsume_times=16).to_dlq


def test_a_named_delay_level_is_kept() -> None:
    plan = plan_send_back(stored(), "g", delay_level=7, max_reconsume_times=16)
    assert plan.delay_level == 7
    assert copy_of(plan.record).properties["DELAY"] == "7"
