"""Half messages and their committed copies, as remoting builds them."""

from __future__ import annotations

import pytest

from ferry.protocol import record
from ferry.protocol.codes import TransactionResolution
from ferry.protocol.errors import InvalidParameterError, MessageIllegalError
from ferry.protocol.messages import SendMessageRequest
from ferry.protocol.names import TRANS_HALF_TOPIC, TRANS_OP_HALF_TOPIC
from ferry.remoting.end_transaction import DecidedHalves
from ferry.remoting.transaction_records import committed_record, half_record, op_record


def _send(topic: str = "Orders", count: int = 1) -> SendMessageRequest:
    return SendMessageRequest(
        producer_group="pg", topic=topic, queue_id=-1, count=count, transactional=True
    )


def _record(topic: str = "Orders") -> bytes:
    props = {record.PROPERTY_UNIQ_KEY: "ID-1", record.PROPERTY_KEYS: "k1", "traceparent": "tp"}
    return record.encode_record(
        topic.encode(), b"body", record.encode_properties(props), sysflag=record.SYSFLAG_COMPRESSED
    )


def test_a_half_message_goes_aside_and_its_commit_comes_back_as_sent() -> None:
    half = next(record.iter_records(half_record(_record(), _send(), 3)))
    assert half.topic == TRANS_HALF_TOPIC
    assert half.sysflag == record.SYSFLAG_COMPRESSED | record.SYSFLAG_TX_PREPARED
    assert half.properties[record.PROPERTY_REAL_TOPIC] == "Orders"
    assert half.properties[record.PROPERTY_REAL_QID] == "3"
    assert half.properties[record.PROPERTY_PGROUP] == "pg"
    stored = half._replace(phys_offset=4096)
    topic, queue_id, raw = committed_record(stored)
    copy = next(record.iter_records(raw))
    assert (topic, queue_id, copy.topic, copy.queue_id) == ("Orders", 3, "Orders", 3)
    assert copy.sysflag == record.SYSFLAG_COMPRESSED | record.SYSFLAG_TX_COMMIT
    assert copy.prepared_tx_offset == 4096
    assert copy.body == b"body"
    assert record.PROPERTY_REAL_TOPIC not in copy.properties
    assert copy.properties[record.PROPERTY_UNIQ_KEY] == "ID-1"
    assert copy.properties["traceparent"] == "tp"


def test_bad_half_messages_are_refused() -> None:
    with pytest.raises(InvalidParameterError):
        half_record(_record() * 2, _send(count=2), 0)
    with pytest.raises(MessageIllegalError):
        half_record(_record() * 2, _send(), 0)
    with pytest.raises(MessageIllegalError):
        half_record(_record("Other"), _send(), 0)
    with pytest.raises(MessageIllegalError):
        half_record(b"\x00" * 120, _send(), 0)


def test_an_op_record_names_the_half_message_and_the_decision() -> None:
    op = next(record.iter_records(op_record(777, TransactionResolution.ROLLBACK, 5)))
    assert (op.topic, op.body, op.properties["TAGS"]) == (TRANS_OP_HALF_TOPIC, b"777", "d")
    assert op.properties["TRAN_END"] == "ROLLBACK"


def test_a_commit_mark_is_an_op_record_that_ends_nothing() -> None:
    mark = op_record(777, TransactionResolution.COMMIT, 5, committing=True)
    op = next(record.iter_records(mark))
    assert (op.topic, op.body, op.properties["TRAN_END"]) == (
        TRANS_OP_HALF_TOPIC,
        b"777",
        "COMMITTING",
    )


def test_decided_halves_are_remembered_up_to_a_limit() -> None:
    decided = DecidedHalves(limit=2)
    for offset in (1, 2, 3):
        decided.add(offset, TransactionResolution.COMMIT)
    assert decided.get(1) is None
    assert decided.get(3) is TransactionResolution.COMMIT
    decided.discard(3)
    assert len(decided) == 1
