"""The pieces of the proxy's call checks that need no process: reading the client's
authorization metadata, the date-time window, and what each call needs (ferry.proxy.access)."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import pytest

from ferry.proxy import access
from ferry.proxy.auth import Refused, expected_signature, parse, stamp_ok
from ferry.proxy.protocol import Code, definition, methods
from ferry.proxy.protocol import service as pb
from ferry.runtime.security.permissions import SUPER, Need

NOW = datetime(2026, 12, 3, 12, 0, 0, tzinfo=UTC)


def _header(ak: str, sig: str) -> str:
    return f"MQv2-HMAC-SHA1 Credential={ak}, SignedHeaders=x-mq-date-time, Signature={sig}"


def test_the_clients_header_is_read_and_its_signature_is_hmac_sha1_of_the_stamp() -> None:
    stamp = "20261203T120000Z"
    sig = expected_signature("secret", stamp)
    assert sig == "e44ceace26b350d8af516a4e885d67006e956463"  # HMAC-SHA1(secret, stamp), hex
    signed = parse({"authorization": _header("alice", sig), "x-mq-date-time": stamp})
    assert (signed.access_key, signed.signature, signed.stamp) == ("alice", sig, stamp)


@pytest.mark.parametrize(
    "metadata",
    [
        {},
        {"x-mq-date-time": "20261203T120000Z"},
        {"authorization": _header("alice", "00")},
        {"authorization": "Bearer x", "x-mq-date-time": "20261203T120000Z"},
        {"authorization": "MQv2-HMAC-SHA1 Credential", "x-mq-date-time": "20261203T120000Z"},
        {"authorization": _header("", "00"), "x-mq-date-time": "20261203T120000Z"},
        {"authorization": _header("alice", ""), "x-mq-date-time": "20261203T120000Z"},
        {"authorization": _header("a" * 5000, "00"), "x-mq-date-time": "20261203T120000Z"},
    ],
)
def test_bad_authorization_metadata_is_refused_unauthorized(metadata: dict[str, str]) -> None:
    with pytest.raises(Refused) as refused:
        parse(metadata)
    assert refused.value.code == Code.UNAUTHORIZED


def test_the_stamp_window_spans_every_time_zone_and_no_more() -> None:
    def at(delta: timedelta) -> str:
        return (NOW + delta).strftime("%Y%m%dT%H%M%SZ")

    for ok in (timedelta(0), timedelta(hours=14), timedelta(hours=-12), timedelta(hours=5.5)):
        assert stamp_ok(at(ok), NOW), ok
    for bad in (timedelta(hours=15), timedelta(hours=-13), timedelta(days=2)):
        assert not stamp_ok(at(bad), NOW), bad
    assert not stamp_ok("yesterday", NOW)
    assert not stamp_ok("20261203T250000Z", NOW)


def _resource(name: str) -> object:
    return definition.Resource(name=name)


def test_calls_need_what_rocketmq_5_checks() -> None:
    topic, group = _resource("t"), _resource("g")
    queue = definition.MessageQueue(topic=topic)
    sub = [Need("Group", "g", ("Sub",)), Need("Topic", "t", ("Sub",))]
    send = pb.SendMessageRequest()
    send.messages.add(topic=_resource("b"))
    send.messages.add(topic=_resource("a"))
    assert access.needs("SendMessage", send) == [
        Need("Topic", "a", ("Pub",)),
        Need("Topic", "b", ("Pub",)),
    ]
    assert access.needs("QueryRoute", pb.QueryRouteRequest(topic=topic)) == [
        Need("Topic", "t", ("Pub", "Sub"))
    ]
    receive = pb.ReceiveMessageRequest(group=group, message_queue=queue)
    assert access.needs("ReceiveMessage", receive) == sub
    for name, cls in (
        ("AckMessage", pb.AckMessageRequest),
        ("ChangeInvisibleDuration", pb.ChangeInvisibleDurationRequest),
        ("ForwardMessageToDeadLetterQueue", pb.ForwardMessageToDeadLetterQueueRequest),
        ("QueryAssignment", pb.QueryAssignmentRequest),
    ):
        assert access.needs(name, cls(group=group, topic=topic)) == sub, name
    assert access.needs("EndTransaction", pb.EndTransactionRequest(topic=topic)) == [
        Need("Topic", "t", ("Pub",))
    ]
    producer = pb.HeartbeatRequest(client_type=definition.PRODUCER)
    consumer = pb.HeartbeatRequest(client_type=definition.SIMPLE_CONSUMER, group=group)
    assert access.needs("Heartbeat", producer) == []
    assert access.needs("Heartbeat", consumer) == [Need("Group", "g", ("Sub",))]
    assert access.needs("NotifyClientTermination", pb.NotifyClientTerminationRequest()) == []
    assert access.needs("SomeFutureCall", None) == SUPER


def test_every_method_of_the_service_has_a_rule() -> None:
    assert set(methods()) - set(access.RULES) == {"Telemetry"}  # telemetry_needs, per command


def test_telemetry_settings_need_pub_or_sub_and_other_commands_nothing() -> None:
    publish = pb.TelemetryCommand(settings=definition.Settings(client_type=definition.PRODUCER))
    publish.settings.publishing.topics.add(name="t")
    assert access.telemetry_needs(publish) == [Need("Topic", "t", ("Pub",))]
    subscribe = pb.TelemetryCommand(settings=definition.Settings())
    subscribe.settings.subscription.group.name = "g"
    subscribe.settings.subscription.subscriptions.add(topic=_resource("t"))
    assert access.telemetry_needs(subscribe) == [
        Need("Group", "g", ("Sub",)),
        Need("Topic", "t", ("Sub",)),
    ]
    assert access.telemetry_needs(pb.TelemetryCommand(thread_stack_trace={})) == []
