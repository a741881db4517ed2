"""TransactionProducer's own logic: what it refuses, how a check's message looks."""

from __future__ import annotations

from typing import Any

import pytest

from ferry.client import LocalTransactionState, Message, MessageExt, TransactionProducer
from ferry.client.transaction import checked_message
from ferry.protocol import record
from ferry.protocol.codes import TransactionResolution
from ferry.protocol.errors import InvalidParameterError
from ferry.protocol.messages import CheckTransactionStateNotice
from ferry.protocol.names import TRANS_HALF_TOPIC

NOWHERE = "127.0.0.1:9"  # nothing listens; none of these tests sends a request


class Listener:
    def execute_local_transaction(self, msg: Message, arg: Any) -> LocalTransactionState:
        return LocalTransactionState.COMMIT

    def check_local_transaction(self, msg: MessageExt) -> LocalTransactionState:
        return LocalTransactionState.COMMIT


def test_states_map_to_rocketmq_resolutions() -> None:
    assert LocalTransactionState.COMMIT.resolution is TransactionResolution.COMMIT
    assert LocalTransactionState.ROLLBACK.resolution is TransactionResolution.ROLLBACK
    assert LocalTransactionState.UNKNOWN.resolution is TransactionResolution.UNKNOWN


def test_delayed_messages_cannot_be_sent_in_a_transaction() -> None:
    with (
        TransactionProducer("tx-checks", NOWHERE, Listener()) as producer,
        pytest.raises(InvalidParameterError, match="delayed"),
    ):
        producer.send_in_transaction(Message("t", b"x", delay_level=2))
    with pytest.raises(InvalidParameterError):
        TransactionProducer("tx-checks", NOWHERE, Listener(), check_threads=0)


class Routes:
    def master_addrs(self) -> dict[str, str]:
        return {"broker-a": "127.0.0.1:10911"}


def test_a_checked_message_shows_its_real_topic_queue_and_id() -> None:
    props = {
        record.PROPERTY_UNIQ_KEY: "ID-1",
        record.PROPERTY_KEYS: "order-7",
        record.PROPERTY_REAL_TOPIC: "Orders",
        record.PROPERTY_REAL_QID: "3",
        record.PROPERTY_TRAN_MSG: "true",
    }
    raw = record.encode_record(TRANS_HALF_TOPIC.encode(), b"body", record.encode_properties(props))
    notice = CheckTransactionStateNotice(producer_group="pg", commit_log_offset=0, record=raw)
    msg = checked_message(notice, Routes(), "127.0.0.1:10911")
    assert (msg.topic, msg.queue.queue_id, msg.queue.broker_name) == ("Orders", 3, "broker-a")
    assert (msg.msg_id, msg.keys, msg.body) == ("ID-1", ["order-7"], b"body")
