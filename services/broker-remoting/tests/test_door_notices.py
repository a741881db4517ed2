"""The broker door's CHECK_TRANSACTION_STATE: its body is the half message with the real topic
and queue id its producer sent it to, the rest as stored."""

from __future__ import annotations

from ferry.protocol import record
from ferry.protocol.messages import CheckTransactionStateNotice
from ferry.protocol.names import TRANS_HALF_TOPIC
from ferry.protocol.rocketmq.codes import ONEWAY_FLAG, RequestCode
from ferry.remoting.door.notices import to_notice

STORE_HOST = "10.0.0.7:10911"


def stored_half(props: dict[str, str]) -> bytes:
    """A half record as the store keeps it: offsets, store stamp and CRC filled in."""
    raw = bytearray(
        record.encode_record(
            TRANS_HALF_TOPIC.encode(),
            b"half body",
            record.encode_properties(props),
            flag=3,
            sysflag=record.SYSFLAG_TX_PREPARED,
            born_timestamp=1700000000123,
            born_host=record.pack_host("127.0.0.1:5555"),
        )
    )
    record.OFFSETS.pack_into(raw, record.OFF_OFFSETS, 17, 4096)
    record.STORE_STAMP.pack_into(
        raw, record.OFF_STORE_STAMP, 1700000000456, record.pack_host(STORE_HOST)
    )
    record.CRC.pack_into(raw, record.OFF_CRC, record.record_crc(raw, 0, len(raw)))
    return bytes(raw)


def check_of(raw: bytes) -> CheckTransactionStateNotice:
    return CheckTransactionStateNotice(
        producer_group="PG",
        commit_log_offset=4096,
        record=raw,
        tran_state_table_offset=17,
        msg_id="KEY1",
        transaction_id="KEY1",
    )


def test_the_check_carries_the_half_message_under_its_real_topic_and_queue() -> None:
    props = {"REAL_TOPIC": "Orders", "REAL_QID": "3", "UNIQ_KEY": "KEY1", "PGROUP": "PG"}
    cmd = to_notice(check_of(stored_half(props)))
    assert cmd is not None
    assert cmd.code == RequestCode.CHECK_TRANSACTION_STATE and cmd.flag & ONEWAY_FLAG
    assert cmd.ext_fields == {
        "tranStateTableOffset": "17",
        "commitLogOffset": "4096",
        "msgId": "KEY1",
        "transactionId": "KEY1",
        "offsetMsgId": record.offset_msg_id(STORE_HOST, 4096),
    }
    (half,) = record.iter_records(cmd.body)
    assert (half.topic, half.queue_id) == ("Orders", 3)
    assert half.total_size == len(cmd.body)
    assert record.verify_crc(cmd.body, 0, half.total_size)
    # the rest as stored
    assert (half.queue_offset, half.phys_offset) == (17, 4096)
    assert (half.store_host, half.store_timestamp) == (STORE_HOST, 1700000000456)
    assert (half.body, half.flag, half.born_timestamp) == (b"half body", 3, 1700000000123)
    assert half.born_host == "127.0.0.1:5555"
    assert half.sysflag == record.SYSFLAG_TX_PREPARED
    assert half.properties == props


def test_a_record_without_a_real_topic_or_that_does_not_decode_goes_as_it_is() -> None:
    plain = stored_half({"UNIQ_KEY": "KEY1"})
    plain_cmd = to_notice(check_of(plain))
    assert plain_cmd is not None and plain_cmd.body == plain
    junk = b"\x00\x00\x00\x10not a record"
    junk_cmd = to_notice(check_of(junk))
    assert junk_cmd is not None and junk_cmd.body == junk
    assert "offsetMsgId" not in junk_cmd.ext_fields
