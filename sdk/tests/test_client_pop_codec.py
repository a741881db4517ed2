"""pop_codec: the SimpleConsumers' requests and plans, without I/O."""

from __future__ import annotations

import pytest

from ferry.client import MessageExt, MessageSelector
from ferry.client.message import ConsumeFromWhere
from ferry.client.pop_codec import (
    PROPERTY_RECEIPT_HANDLE,
    PopSettings,
    ack_request,
    batch_ack_errors,
    no_target_error,
    receive_rounds,
    route_targets,
)
from ferry.client.route import TopicRoute
from ferry.protocol.errors import (
    BrokerNotExistError,
    InvalidParameterError,
    InvalidReceiptHandleError,
)
from ferry.protocol.messages import BatchAckMessageReply, BrokerData, QueueData, TopicRouteData


def route(*brokers: tuple[str, bool]) -> TopicRoute:
    """brokers: (name, has a master)."""
    data = TopicRouteData(
        queue_datas=[QueueData(name, 2, 2) for name, _ in brokers],
        broker_datas=[
            BrokerData("c", name, {0: f"{name}:1"} if master else {1: f"{name}:2"})
            for name, master in brokers
        ],
    )
    return TopicRoute.from_data("T", data)


def test_targets_are_the_masters_and_a_receive_looks_at_each_then_long_polls_one() -> None:
    targets = route_targets("T", "*", route(("b", True), ("a", True), ("s", False)))
    assert [(t.broker_name, t.addr) for t in targets] == [("a", "a:1"), ("b", "b:1")]
    rounds = receive_rounds(targets, 1, 20.0)
    assert [(t.broker_name, wait) for t, wait in rounds] == [("b", 0.0), ("a", 0.0), ("b", 20.0)]
    (only,) = receive_rounds(targets[:1], 7, 5.0)
    assert only[1] == 5.0  # one broker: straight to the long poll


def test_no_target_says_why() -> None:
    assert isinstance(no_target_error("g", {}), InvalidParameterError)
    err = no_target_error("g", {"T": "*"})
    assert isinstance(err, BrokerNotExistError) and "T" in str(err)


def test_settings_build_the_pop_request() -> None:
    settings = PopSettings("g", 2.0, 30.0, ConsumeFromWhere.FIRST_OFFSET, 3)
    (target,) = route_targets("T", MessageSelector.by_sql("a > 1"), route(("a", True)))
    req = settings.request(
        target, max_messages=8, invisible_duration=None, await_s=2.0, client_id="c1"
    )
    assert (req.expression_type, req.expression) == ("SQL92", "a > 1")
    assert (req.invisible_ms, req.poll_ms, req.from_first, req.max_reconsume_times) == (
        30_000,
        2_000,
        True,
        3,
    )
    with pytest.raises(InvalidParameterError):
        PopSettings("g", invisible_duration=0)
    with pytest.raises(InvalidParameterError):
        settings.request(target, max_messages=0, invisible_duration=1, await_s=0, client_id="")


def test_acks_need_a_received_message_and_batch_answers_map_to_errors() -> None:
    msg = MessageExt("T", b"x")
    with pytest.raises(InvalidReceiptHandleError):
        ack_request("g", msg)
    msg.properties[PROPERTY_RECEIPT_HANDLE] = "1.0.5"
    assert ack_request("g", msg).receipt_handle == "1.0.5"
    reply = BatchAckMessageReply(codes=[0, 10090], messages=["", "stale"])
    ok, stale = batch_ack_errors(reply)
    assert ok is None and isinstance(stale, InvalidReceiptHandleError)
