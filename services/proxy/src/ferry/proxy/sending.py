"""SendMessage: each message a client sent checked, turned into a Ferry Message and sent with
the SDK's producer (its routes, queue choice, retries and batching); the client's message id
is kept as the record's UNIQ_KEY, so consumers see the id the producer was given back."""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Sequence
from typing import Protocol

from ferry.client.message import Message, SendResult
from ferry.protocol.errors import FerryError
from ferry.protocol.names import check_topic
from ferry.protocol.record import PROP_END, PROP_SEP, PROPERTY_UNIQ_KEY, SYSTEM_PROPERTIES
from ferry.proxy.convert import Inbound, SendEntry, body_digest
from ferry.proxy.errors import ProxyError, status_of
from ferry.proxy.protocol import Code, DigestType, Encoding, MessageType

log = logging.getLogger("ferry.proxy.sending")

# the message types this proxy stores; QueryRoute names them as each queue's accepted types
SERVED_TYPES = (MessageType.NORMAL,)
MAX_MESSAGE_ID = 128
_SEPARATORS = (PROP_SEP, PROP_END)


class Sender(Protocol):
    """What sending needs of ferry.client.aio's Producer."""

    async def send(self, msg: Message) -> SendResult: ...


def to_message(msg: Inbound, max_body_size: int) -> Message:
    """The Ferry message to store for `msg`; ProxyError with the client's Code when the
    proxy refuses it."""
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
        if not name or name in SYSTEM_PROPERTIES or _bad_text(name) or _bad_text(value):
            raise ProxyError(
                Code.ILLEGAL_MESSAGE_PROPERTY_KEY, f"property {name!r} is reserved or not valid"
            )
    return Message(
        msg.topic,
        msg.body,
        tags=msg.tag,
        keys=list(msg.keys),
        properties={**msg.user_properties, PROPERTY_UNIQ_KEY: msg.message_id},
    )


def _check_type(msg: Inbound) -> None:
    kind = msg.message_type or MessageType.NORMAL  # older clients leave it unset
    if kind not in SERVED_TYPES:
        known = {t.value: t.name for t in MessageType}
        name = known.get(kind, f"message type {kind}:")
        raise ProxyError(Code.UNSUPPORTED, f"{name} messages are not served by this proxy yet")
    if msg.message_group is not None or msg.delivery_seconds is not None:
        raise ProxyError(
            Code.MESSAGE_PROPERTY_CONFLICT_WITH_TYPE,
            "a NORMAL message has no message group and no delivery time",
        )


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
    producer: Sender, messages: Sequence[Inbound], max_body_size: int
) -> list[SendEntry]:
    """Sends every message at once (the producer batches what arrives together); one entry
    per message, in order."""
    return list(await asyncio.gather(*(_send_one(producer, m, max_body_size) for m in messages)))


async def _send_one(producer: Sender, msg: Inbound, max_body_size: int) -> SendEntry:
    try:
        result = await producer.send(to_message(msg, max_body_size))
    except ProxyError as err:
        return SendEntry(err.code, err.message, msg.message_id)
    except FerryError as err:
        code, text = status_of(err)
        log.info("send to %s failed: %s", msg.topic, err)
        return SendEntry(code, text, msg.message_id)
    return SendEntry(Code.OK, "OK", msg.message_id, result.queue_offset)
