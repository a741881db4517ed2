"""Request/reply without I/O: request and reply properties, matching, timeouts, late replies."""

from __future__ import annotations

import logging

import pytest

from ferry.client.message import Message, MessageExt
from ferry.client.request_reply import ReplyMatcher, reply_message, request_message
from ferry.protocol.errors import InvalidParameterError, ReplyTimeoutError


def stamped(request: Message) -> MessageExt:
    """The request as a consumer gets it: the broker added CLUSTER and REPLY_TO_BROKER."""
    props = {**request.properties, "CLUSTER": "DefaultCluster", "REPLY_TO_BROKER": "h:1"}
    return MessageExt(request.topic, request.body, properties=props)


def test_a_reply_carries_what_the_requester_matches_it_by() -> None:
    request, correlation_id = request_message(Message("orders", b"q"), "client#secret", 1500)
    assert request.properties["TTL"] == "1500"
    reply, target = reply_message(stamped(request), b"a", "g", {"k": "v"})
    assert reply.topic == "DefaultCluster_REPLY_TOPIC"
    assert reply.properties["CORRELATION_ID"] == correlation_id
    assert reply.properties["REPLY_TO_CLIENT"] == "client#secret"
    assert reply.properties["MSG_TYPE"] == "reply" and reply.properties["k"] == "v"
    assert target.broker_addr == "h:1"
    assert target.request.reply_to == "client#secret" and target.request.ttl_ms == 1500


def test_only_requests_can_be_replied_to_and_timeouts_are_positive() -> None:
    with pytest.raises(InvalidParameterError, match="is not a request"):
        reply_message(MessageExt("orders", b"plain"), b"a", "g")
    with pytest.raises(InvalidParameterError, match="positive"):
        request_message(Message("orders", b"q"), "c", 0)


def test_replies_find_their_waiters_and_late_ones_are_dropped_once_logged(
    caplog: pytest.LogCaptureFixture,
) -> None:
    matcher: ReplyMatcher[str] = ReplyMatcher()
    matcher.add("c1", "waiter-1", 1000)
    matcher.add("c2", "waiter-2", 1000)
    assert matcher.sent("c1", "b:1") and matcher.sent("c2", "b:1")
    assert matcher.keep_polling("b:1")

    def reply(cid: str) -> MessageExt:
        return MessageExt("R", b"", properties={"CORRELATION_ID": cid})

    assert matcher.match(reply("c2")) == "waiter-2"
    timed_out = matcher.timed_out("c1")
    assert timed_out is not None and timed_out[0] == "waiter-1"
    assert isinstance(timed_out[1], ReplyTimeoutError)
    assert "through b:1 had no reply in 1000 ms" in str(timed_out[1])
    with caplog.at_level(logging.INFO, logger="ferry.client.request"):
        assert matcher.match(reply("c1")) is None
        assert matcher.match(reply("c2")) is None
    assert matcher.late == 2
    assert len([r for r in caplog.records if "dropped" in r.getMessage()]) == 1
    assert len(matcher) == 0
