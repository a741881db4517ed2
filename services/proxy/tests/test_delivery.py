"""ferry.proxy.receipts and ferry.proxy.delivery: the receipt handle a client gets back holds
what an ack needs and refuses anything else with a Status; a receive's request read and
checked; a popped message as the client takes it; a receive's long poll fits its deadline."""

from __future__ import annotations

import base64

import pytest

from ferry.client.message import MessageExt, MessageQueue
from ferry.client.message_selector import MessageSelector
from ferry.client.pop_codec import PROPERTY_RECEIPT_HANDLE
from ferry.proxy import delivery, receipts
from ferry.proxy.consuming import poll_window
from ferry.proxy.convert import body_digest
from ferry.proxy.errors import ProxyError
from ferry.proxy.protocol import Code, Pb, definition, service
from ferry.proxy.registry import consumer_settings


def test_a_receipt_handle_round_trips_broker_and_ferry_handle() -> None:
    receipt = receipts.Receipt("broker-a", "0 1700000000000 60000 0 0 broker-a 1 7 99")
    text = receipts.encode(receipt)
    assert text.startswith("F1") and "\n" not in text and "=" not in text
    assert receipts.decode(text) == receipt
    assert receipts.decode(text).phys_offset == -1  # an older handle names no offset


def test_a_receipt_handle_carries_the_messages_commitlog_offset() -> None:
    receipt = receipts.Receipt("broker-a", "12.0.1700000000000", 4096)
    assert receipts.decode(receipts.encode(receipt)) == receipt


@pytest.mark.parametrize(
    "text",
    [
        "",
        "zzz",
        "F1!!!",
        "F1" + base64.urlsafe_b64encode(b"no-separator").decode(),
        "F1" + base64.urlsafe_b64encode(b"\nhandle-without-broker").decode(),
        "F1" + base64.urlsafe_b64encode(b"broker\n").decode(),
        "F1" + base64.urlsafe_b64encode(b"\xff\xfe\nx").decode(),
        "F1" + base64.urlsafe_b64encode(b"broker\nhandle\nnot-an-offset").decode(),
        "F1" + "A" * 5000,
    ],
)
def test_a_garbled_or_foreign_handle_is_invalid_receipt_handle(text: str) -> None:
    with pytest.raises(ProxyError) as caught:
        receipts.decode(text)
    assert caught.value.code is Code.INVALID_RECEIPT_HANDLE


def receive_request(**fields: object) -> Pb:
    req = service.ReceiveMessageRequest(batch_size=8)
    req.group.name = "cg-1"
    req.message_queue.topic.name = "T1"
    req.message_queue.broker.name = "broker-a"
    for name, value in fields.items():
        setattr(req, name, value)
    return req


def test_a_receive_request_is_read_with_its_filter_and_durations() -> None:
    req = receive_request()
    req.filter_expression.type = delivery.FILTER_TAG
    req.filter_expression.expression = "TagA || TagB"
    req.invisible_duration.seconds = 10
    req.long_polling_timeout.seconds = 2
    ask = delivery.receive_ask(req)
    assert ask == delivery.ReceiveAsk("cg-1", "T1", "broker-a", "TagA || TagB", 8, 10_000, 2000)
    bare = delivery.receive_ask(receive_request(batch_size=500))
    assert (bare.expression, bare.batch_size, bare.invisible_ms, bare.long_poll_ms) == (
        "*",
        delivery.MAX_BATCH,
        None,
        None,
    )


def test_an_sql_filter_becomes_a_selector_and_a_bad_one_is_refused() -> None:
    req = receive_request()
    req.filter_expression.type = delivery.FILTER_SQL
    req.filter_expression.expression = "a > 5"
    assert delivery.receive_ask(req).expression == MessageSelector.by_sql("a > 5")
    for kind, text in ((delivery.FILTER_SQL, "a >>> ("), (delivery.FILTER_SQL, ""), (9, "x")):
        req.filter_expression.type = kind
        req.filter_expression.expression = text
        with pytest.raises(ProxyError) as caught:
            delivery.receive_ask(req)
        assert caught.value.code is Code.ILLEGAL_FILTER_EXPRESSION


@pytest.mark.parametrize(
    ("change", "code"),
    [
        (lambda r: r.group.ClearField("name"), Code.ILLEGAL_CONSUMER_GROUP),
        (lambda r: setattr(r.message_queue.topic, "name", "bad topic!"), Code.ILLEGAL_TOPIC),
        (lambda r: setattr(r, "batch_size", 0), Code.BAD_REQUEST),
        (lambda r: setattr(r.invisible_duration, "seconds", 0), Code.ILLEGAL_INVISIBLE_TIME),
        (lambda r: setattr(r.invisible_duration, "seconds", 10**6), Code.ILLEGAL_INVISIBLE_TIME),
        (lambda r: setattr(r.long_polling_timeout, "seconds", -1), Code.ILLEGAL_POLLING_TIME),
    ],
)
def test_a_bad_receive_request_gets_its_code(change: object, code: Code) -> None:
    req = receive_request()
    change(req)  # type: ignore[operator]
    with pytest.raises(ProxyError) as caught:
        delivery.receive_ask(req)
    assert caught.value.code is code


def test_a_popped_message_reaches_the_client_with_id_digest_handle_and_attempt() -> None:
    msg = MessageExt(
        "T1",
        b"hello",
        tags="TagA",
        keys=["k1", "k2"],
        properties={
            "color": "blue",
            "UNIQ_KEY": "01ABC",
            "TAGS": "TagA",
            "KEYS": "k1 k2",
            PROPERTY_RECEIPT_HANDLE: "ferry-handle",
            "traceparent": "00-fdd5e214cba447e2493274cef6a9652f-ed9a1e8d8bfa0477-01",
            "tracestate": "k=v",
        },
        msg_id="01ABC",
        queue=MessageQueue("T1", "broker-a", 3),
        queue_offset=42,
        born_timestamp=1_700_000_000_123,
        store_timestamp=1_700_000_000_456,
        reconsume_times=2,
        broker_name="broker-a",
        commitlog_offset=8192,
    )
    topic = definition.Resource(name="T1")
    out = delivery.outbound(msg, topic, 30_000)
    sp = out.system_properties
    assert out.body == b"hello" and out.topic.name == "T1"
    # no system property, no POP_CK, no trace context: that has a field of its own
    assert dict(out.user_properties) == {"color": "blue"}
    assert sp.trace_context == "00-fdd5e214cba447e2493274cef6a9652f-ed9a1e8d8bfa0477-01"
    assert (sp.tag, list(sp.keys), sp.message_id) == ("TagA", ["k1", "k2"], "01ABC")
    assert sp.body_digest.checksum == body_digest(b"hello")
    assert (sp.queue_id, sp.queue_offset, sp.delivery_attempt) == (3, 42, 3)
    assert sp.born_timestamp.ToMilliseconds() == 1_700_000_000_123
    assert sp.invisible_duration.ToMilliseconds() == 30_000
    assert receipts.decode(sp.receipt_handle) == receipts.Receipt("broker-a", "ferry-handle", 8192)


def test_a_receive_polls_no_longer_than_its_deadline_allows() -> None:
    ask = delivery.ReceiveAsk("g", "t", "", "*", 1, None, 20_000)
    poll_s, timeout_s = poll_window(ask, 5.0)  # the client waits 5 s in all
    assert poll_s + 1.0 <= timeout_s <= 4.0
    assert poll_window(ask, 30.0)[0] == 20.0  # a deadline past the poll leaves it whole
    assert poll_window(ask, 0.5)[0] == 0.0


def test_a_consumers_settings_give_group_and_subscriptions() -> None:
    settings = definition.Settings()
    settings.subscription.group.name = "cg-1"
    entry = settings.subscription.subscriptions.add()
    entry.topic.name = "T1"
    entry.expression.type = delivery.FILTER_TAG
    entry.expression.expression = "TagA"
    settings.user_agent.language = 6
    settings.user_agent.version = "5.1.2"
    found = consumer_settings(settings)
    assert found is not None
    assert (found.group, found.subscriptions) == ("cg-1", {"T1": "TagA"})
    assert (found.language, found.version) == ("PYTHON", "5.1.2")
    producer = definition.Settings()
    producer.publishing.max_body_size = 1
    assert consumer_settings(producer) is None
