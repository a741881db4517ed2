"""The messaging conventions' attributes, as every span of Ferry names them."""

from __future__ import annotations

from ferry.protocol.span_attributes import messaging


def test_a_send_names_the_system_operation_destination_and_batch() -> None:
    assert messaging("send", operation_type="send", destination="Orders", batch_count=3) == {
        "messaging.system": "rocketmq",
        "messaging.operation.type": "send",
        "messaging.operation.name": "send",
        "messaging.destination.name": "Orders",
        "messaging.batch.message_count": 3,
    }


def test_a_single_message_is_no_batch_and_empty_facts_are_left_out() -> None:
    attributes = messaging("pull", destination="Orders", partition=0, consumer_group="")
    assert attributes["messaging.destination.partition.id"] == "0"
    assert "messaging.batch.message_count" not in attributes
    assert "messaging.consumer.group.name" not in attributes


def test_rocketmq_attributes_are_named_under_messaging_rocketmq() -> None:
    attributes = messaging("end_transaction", rocketmq={"transaction.from_check": True})
    assert attributes["messaging.rocketmq.transaction.from_check"] is True


def test_a_batching_operation_names_its_count_even_for_one_message() -> None:
    assert messaging("receive", batch_count=1, batching=True)["messaging.batch.message_count"] == 1
    assert "messaging.batch.message_count" not in messaging("receive", batch_count=1)
    assert "messaging.batch.message_count" not in messaging("receive", batching=True)
