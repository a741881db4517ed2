"""A popped Ferry message as RocketMQ 5's Message, and the values a ReceiveMessageRequest
names, read and checked. No I/O."""

from __future__ import annotations

from dataclasses import dataclass

from ferry.client.message import MessageExt
from ferry.client.message_selector import Expression, MessageSelector
from ferry.client.pop_codec import PROPERTY_RECEIPT_HANDLE
from ferry.protocol.errors import FerryError
from ferry.protocol.names import check_group, check_topic
from ferry.protocol.record import PROPERTY_TIMER_DELIVER_MS, PROPERTY_TRAN_MSG, PROPERTY_UNIQ_KEY
from ferry.proxy import receipts
from ferry.proxy.convert import body_digest, topic_name
from ferry.proxy.errors import ProxyError
from ferry.proxy.protocol import Code, DigestType, Encoding, MessageType, Pb, definition
from ferry.proxy.system_keys import NOT_USER

FILTER_TAG = 1
FILTER_SQL = 2
MAX_BATCH = 32
MAX_INVISIBLE_MS = 12 * 3600 * 1000  # as RocketMQ's proxy: at most 12 hours
MIN_INVISIBLE_MS = 1000


@dataclass(frozen=True)
class ReceiveAsk:
    """What a ReceiveMessage asks for, checked."""

    group: str
    topic: str
    broker_name: str  # "" when the queue names none: every broker serving the topic
    expression: Expression
    batch_size: int
    invisible_ms: int | None  # None: the server's choice
    long_poll_ms: int | None  # None: no long polling was asked for


def group_name(resource: Pb) -> str:
    group = topic_name(resource)
    try:
        check_group(group)
    except FerryError as err:
        raise ProxyError(Code.ILLEGAL_CONSUMER_GROUP, err.message) from None
    return group


def checked_topic(resource: Pb) -> str:
    topic = topic_name(resource)
    try:
        check_topic(topic)
    except FerryError as err:
        raise ProxyError(Code.ILLEGAL_TOPIC, err.message) from None
    return topic


def expression(filter_expression: Pb) -> Expression:
    """TAG (or none) as a tag expression, SQL as an SQL92 selector checked here."""
    kind, text = int(filter_expression.type), str(filter_expression.expression).strip()
    if kind in (0, FILTER_TAG):
        return text or "*"
    if kind == FILTER_SQL:
        if not text:
            raise ProxyError(Code.ILLEGAL_FILTER_EXPRESSION, "the SQL92 filter is empty")
        try:
            return MessageSelector.by_sql(text)
        except FerryError as err:
            raise ProxyError(Code.ILLEGAL_FILTER_EXPRESSION, err.message) from None
    raise ProxyError(Code.ILLEGAL_FILTER_EXPRESSION, f"filter type {kind} is unknown")


def invisible_ms(duration: Pb) -> int:
    ms = int(duration.ToMilliseconds())
    if not MIN_INVISIBLE_MS <= ms <= MAX_INVISIBLE_MS:
        raise ProxyError(
            Code.ILLEGAL_INVISIBLE_TIME,
            f"invisible duration {ms} ms is outside {MIN_INVISIBLE_MS}..{MAX_INVISIBLE_MS} ms",
        )
    return ms


def receive_ask(request: Pb) -> ReceiveAsk:
    group = group_name(request.group)
    topic = checked_topic(request.message_queue.topic)
    batch = int(request.batch_size)
    if batch < 1:
        raise ProxyError(Code.BAD_REQUEST, f"batch_size must be at least 1, got {batch}")
    long_poll = None
    if request.HasField("long_polling_timeout"):
        long_poll = int(request.long_polling_timeout.ToMilliseconds())
        if long_poll < 0:
            raise ProxyError(Code.ILLEGAL_POLLING_TIME, f"long polling {long_poll} ms < 0")
    return ReceiveAsk(
        group=group,
        topic=topic,
        broker_name=str(request.message_queue.broker.name),
        expression=expression(request.filter_expression),
        batch_size=min(batch, MAX_BATCH),
        invisible_ms=(
            invisible_ms(request.invisible_duration)
            if request.HasField("invisible_duration")
            else None
        ),
        long_poll_ms=long_poll,
    )


TRACEPARENT = "traceparent"
PROPERTY_SHARDING_KEY = "__SHARDINGKEY"  # a FIFO message's group (sending.py writes it)


def outbound(msg: MessageExt, topic: Pb, invisible: int) -> Pb:
    """The client's Message for a popped one: user properties apart from the system ones and
    the trace context (its own field), the producer's id (UNIQ_KEY), a CRC32 digest, and a
    receipt handle naming its broker."""
    out = definition.Message(body=msg.body)
    out.topic.CopyFrom(topic)
    for name, value in msg.properties.items():
        if name not in NOT_USER:
            out.user_properties[name] = value
    sp = out.system_properties
    # the W3C context Ferry's producers put in the properties is RocketMQ 5's trace_context
    if TRACEPARENT in msg.properties:
        sp.trace_context = msg.properties[TRACEPARENT]
    if msg.tags:
        sp.tag = msg.tags
    sp.keys.extend(msg.keys)
    sp.message_id = msg.properties.get(PROPERTY_UNIQ_KEY) or msg.msg_id
    sp.body_digest.type = int(DigestType.CRC32)
    sp.body_digest.checksum = body_digest(msg.body)
    sp.body_encoding = int(Encoding.IDENTITY)
    _set_type(sp, msg.properties)
    sp.born_timestamp.FromMilliseconds(msg.born_timestamp)
    sp.born_host = msg.born_host
    sp.store_timestamp.FromMilliseconds(msg.store_timestamp)
    sp.store_host = msg.store_host
    handle = msg.properties[PROPERTY_RECEIPT_HANDLE]
    receipt = receipts.Receipt(msg.broker_name, handle, msg.commitlog_offset)
    sp.receipt_handle = receipts.encode(receipt)
    sp.queue_id = msg.queue_id
    sp.queue_offset = msg.queue_offset
    sp.invisible_duration.FromMilliseconds(invisible)
    sp.delivery_attempt = msg.reconsume_times + 1
    return out


def _set_type(sp: Pb, props: dict[str, str]) -> None:
    """The type the message was sent as, from what its record keeps of it."""
    group = props.get(PROPERTY_SHARDING_KEY)
    deliver_at = props.get(PROPERTY_TIMER_DELIVER_MS, "")
    if group:
        sp.message_type = int(MessageType.FIFO)
        sp.message_group = group
    elif deliver_at.isdigit():
        sp.message_type = int(MessageType.DELAY)
        sp.delivery_timestamp.FromMilliseconds(int(deliver_at))
    elif props.get(PROPERTY_TRAN_MSG) == "true":
        sp.message_type = int(MessageType.TRANSACTION)
    else:
        sp.message_type = int(MessageType.NORMAL)
