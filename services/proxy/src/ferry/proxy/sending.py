"""SendMessage: each message a client sent checked, turned into a Ferry Message and sent with
the SDK's producer (its routes, queue choice, retries and batching); the client's message id
is kept as the record's UNIQ_KEY, so consumers see the id the producer was given back.

By type: NORMAL is a plain send; FIFO an orderly send keyed by its message group (one group,
one queue), the group kept as __SHARDINGKEY as RocketMQ 5 keeps it; DELAY a timer message
(the delivery time in seconds, as the clients put it); TRANSACTION a half message, sent by
the proxy's transaction side (transactions.py), answered with a transaction id."""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Sequence
from typing import Protocol

from ferry.client.message import Message, SendResult
from ferry.protocol.errors import FerryError, MessageIllegalError
from ferry.protocol.names import check_topic
from ferry.protocol.record import PROP_END, PROP_SEP, PROPERTY_UNIQ_KEY, SYSTEM_PROPERTIES
from ferry.proxy.convert import Inbound, SendEntry, body_digest
from ferry.proxy.delivery import PROPERTY_SHARDING_KEY
from ferry.proxy.errors import ProxyError, status_of
from ferry.proxy.protocol import Code, DigestType, Encoding, MessageType
from ferry.proxy.system_keys import FERRY_INTERNAL, ROCKETMQ_RESERVED

log = logging.getLogger("ferry.proxy.sending")

# the message types this proxy stores; QueryRoute names them as each queue's accepted types
SERVED_TYPES = (MessageType.NORMAL, MessageType.FIFO, MessageType.DELAY, MessageType.TRANSACTION)
MAX_MESSAGE_ID = 128
MAX_MESSAGE_GROUP = 64  # bytes, RocketMQ's proxy's maxMessageGroupSize
# the latest delivery time any broker may accept (its timerMaxDelaySec is at most 400 days);
# a broker refuses what is past its own limit, answered as ILLEGAL_DELIVERY_TIME too
MAX_DELAY_S = 400 * 86_400
_SEPARATORS = (PROP_SEP, PROP_END)
# names a client may not set: RocketMQ's reserved ones and Ferry's own (system_keys)
_RESERVED = SYSTEM_PROPERTIES | ROCKETMQ_RESERVED | FERRY_INTERNAL | {PROPERTY_SHARDING_KEY}


class Sender(Protocol):
    """What sending needs of ferry.client.aio's Producer."""

    async def send(self, msg: Message) -> SendResult: ...

    async def send_orderly(self, msg: Message, sharding_key: str | bytes) -> SendResult: ...


class HalfSender(Protocol):
    """What sending needs of the transaction side: a half message stored, and the
    transaction id the client ends it with."""

    async def send_half(self, msg: Message) -> tuple[SendResult, str]: ...


def to_message(msg: Inbound, max_body_size: int, now_s: float | None = None) -> Message:
    """The Ferry message to store for `msg`; ProxyError with the client's Code when the
    proxy refuses it. `now_s`: the clock a delivery time is checked against."""
    try:
        check_topic(msg.topic)
    except FerryError as err:
        raise ProxyError(Code.ILLEGAL_TOPIC, err.message) from None
    _check_type(msg)
    _check_body(msg, max_body_size)
    if not msg.message_id or len(msg.message_id) > MAX_MESSAGE_ID or _bad_text(msg.message_id):
        raise ProxyError(Code.ILLEGAL_MESSAGE_ID, f"message id {msg.message_id!r} is not valid")
    if msg.tag is not None and (not msg.tag.strip() or "|" in msg.tag or _bad_text(msg.tag)):
        raise ProxyError(Code.ILLEGAL_MESSAGE_TAG, f"tag {msg.tag!r} is blank or holds '|'")
    for key in msg.keys:
        if not key.strip() or any(ch.isspace() for ch in key) or _bad_text(key):
            raise ProxyError(Code.ILLEGAL_MESSAGE_KEY, f"key {key!r} is blank or holds spaces")
    for name, value in msg.user_properties.items():
        if not name or name in _RESERVED or _bad_text(name) or _bad_text(value):
            raise ProxyError(
                Code.ILLEGAL_MESSAGE_PROPERTY_KEY, f"property {name!r} is reserved or not valid"
            )
    props = {**msg.user_properties, PROPERTY_UNIQ_KEY: msg.message_id}
    if msg.message_group is not None:
        props[PROPERTY_SHARDING_KEY] = msg.message_group
    return Message(
        msg.topic,
        msg.body,
        tags=msg.tag,
        keys=list(msg.keys),
        properties=props,
        deliver_at_ms=_deliver_at_ms(msg, time.time() if now_s is None else now_s),
    )


# per type: (has a message group, has a delivery time), and the rule in words
_FIELDS = {
    MessageType.NORMAL: (
        (False, False),
        "a NORMAL message has no message group and no delivery time",
    ),
    MessageType.FIFO: ((True, False), "a FIFO message has a message group and no delivery time"),
    MessageType.DELAY: ((False, True), "a DELAY message has a delivery time and no message group"),
    MessageType.TRANSACTION: (
        (False, False),
        "a TRANSACTION message has no message group and no delivery time",
    ),
}


def message_type(msg: Inbound) -> MessageType:
    """The message's type; older clients leave it unset for NORMAL."""
    return MessageType(msg.message_type or MessageType.NORMAL)


def _check_type(msg: Inbound) -> None:
    kind = msg.message_type or MessageType.NORMAL
    if kind not in SERVED_TYPES:
        known = {t.value: t.name for t in MessageType}
        name = known.get(kind, f"message type {kind}:")
        raise ProxyError(Code.UNSUPPORTED, f"{name} messages are not served by this proxy yet")
    wanted, rule = _FIELDS[MessageType(kind)]
    if (msg.message_group is not None, msg.delivery_seconds is not None) != wanted:
        raise ProxyError(Code.MESSAGE_PROPERTY_CONFLICT_WITH_TYPE, rule)
    group = msg.message_group
    if group is not None and (
        not group.strip()
        or len(group.encode()) > MAX_MESSAGE_GROUP
        or not group.isprintable()
        or _bad_text(group)
    ):
        raise ProxyError(
            Code.ILLEGAL_MESSAGE_GROUP,
            f"message group {group!r} is blank, holds control characters or is over "
            f"{MAX_MESSAGE_GROUP} bytes",
        )


def _deliver_at_ms(msg: Inbound, now_s: float) -> int | None:
    """The timer's delivery time in ms; the clients send seconds since the epoch."""
    seconds = msg.delivery_seconds
    if seconds is None:
        return None
    if seconds < 0 or seconds - now_s > MAX_DELAY_S:
        raise ProxyError(
            Code.ILLEGAL_DELIVERY_TIME,
            f"delivery time {seconds} is not a time in seconds since the epoch within "
            f"{MAX_DELAY_S // 86_400} days from now",
        )
    return seconds * 1000


def _check_body(msg: Inbound, max_body_size: int) -> None:
    if msg.encoding not in (Encoding.UNSPECIFIED, Encoding.IDENTITY):
        raise ProxyError(Code.UNSUPPORTED, "only IDENTITY body encoding is served")
    if not msg.body:
        raise ProxyError(Code.MESSAGE_BODY_EMPTY, "the message body is empty")
    if len(msg.body) > max_body_size:
        raise ProxyError(
            Code.MESSAGE_BODY_TOO_LARGE,
            f"the body is {len(msg.body)} bytes, over {max_body_size}",
        )
    if msg.digest is not None:
        kind, checksum = msg.digest
        try:
            digest_type = DigestType(kind)
        except ValueError:
            raise ProxyError(Code.MESSAGE_CORRUPTED, f"unknown digest type {kind}") from None
        if body_digest(msg.body, digest_type) != checksum.upper():
            raise ProxyError(Code.MESSAGE_CORRUPTED, "the body does not match its digest")


def _bad_text(text: str) -> bool:
    return any(ch in text for ch in _SEPARATORS)


async def send_all(
    producer: Sender,
    messages: Sequence[Inbound],
    max_body_size: int,
    halves: HalfSender | None = None,
) -> list[SendEntry]:
    """Sends every message at once (the producer batches what arrives together), but the
    messages of one FIFO group one after another, in their order; one entry per message, in
    order. Without `halves`, TRANSACTION messages are refused."""
    chains: dict[str, asyncio.Future[SendEntry]] = {}

    async def after(earlier: asyncio.Future[SendEntry] | None, msg: Inbound) -> SendEntry:
        if earlier is not None:
            await asyncio.wait([earlier])
        return await _send_one(producer, halves, msg, max_body_size)

    sends = []
    for msg in messages:
        group = msg.message_group
        task = asyncio.ensure_future(after(chains.get(group) if group else None, msg))
        if group:
            chains[group] = task
        sends.append(task)
    return list(await asyncio.gather(*sends))


async def _send_one(
    producer: Sender, halves: HalfSender | None, msg: Inbound, max_body_size: int
) -> SendEntry:
    transaction_id = ""
    try:
        message = to_message(msg, max_body_size)
        kind = message_type(msg)
        if kind is MessageType.TRANSACTION:
            if halves is None:
                raise ProxyError(Code.UNSUPPORTED, "TRANSACTION messages are not served here")
            result, transaction_id = await halves.send_half(message)
        elif kind is MessageType.FIFO and msg.message_group is not None:
            result = await producer.send_orderly(message, sharding_key=msg.message_group)
        else:
            result = await producer.send(message)
    except ProxyError as err:
        return SendEntry(err.code, err.message, msg.message_id)
    except MessageIllegalError as err:
        if msg.delivery_seconds is None:
            return _failed(msg, err)
        # the broker's own limit (timerMaxDelaySec), under the proxy's
        log.info("delayed send to %s refused: %s", msg.topic, err)
        return SendEntry(Code.ILLEGAL_DELIVERY_TIME, err.message or str(err), msg.message_id)
    except FerryError as err:
        return _failed(msg, err)
    return SendEntry(Code.OK, "OK", msg.message_id, result.queue_offset, transaction_id)


def _failed(msg: Inbound, err: FerryError) -> SendEntry:
    code, text = status_of(err)
    log.info("send to %s failed: %s", msg.topic, err)
    return SendEntry(code, text, msg.message_id)
