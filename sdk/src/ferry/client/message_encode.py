"""How a message becomes a CommitLog record (the layout of ferry.protocol.record): the
properties it is stored with, its compressed body, and the plain-message batches the SDK's
send path encodes in C (ferry.native) where it can, with the Python references here."""

from __future__ import annotations

import zlib
from collections.abc import Mapping, Sequence
from typing import cast

from ferry import native
from ferry.client.message import Message, PlainMessage
from ferry.protocol import record, record_layout
from ferry.protocol.errors import InvalidParameterError, MessageIllegalError

_SEPARATORS = (record.PROP_SEP, record.PROP_END)


def _check(text: str, what: str) -> None:
    for ch in _SEPARATORS:
        if ch in text:
            raise InvalidParameterError(f"{what} contains a reserved separator character ({ch!r})")


def message_properties(msg: Message, msg_id: str) -> dict[str, str]:
    """The properties a message is stored with: the user's, then the reserved ones."""
    props: dict[str, str] = {}
    for key, raw in msg.properties.items():
        value = raw if isinstance(raw, str) else str(raw)
        _check(key, "property name")
        _check(value, f"property {key!r}")
        props[key] = value
    if msg.tags:
        _check(msg.tags, "tags")
        props[record.PROPERTY_TAGS] = msg.tags
    if msg.keys:
        joined = " ".join(msg.keys)
        _check(joined, "keys")
        props[record.PROPERTY_KEYS] = joined
    props[record.PROPERTY_UNIQ_KEY] = msg_id
    if msg.delay_level > 0:
        props[record.PROPERTY_DELAY] = str(msg.delay_level)
    if msg.deliver_at_ms is not None:
        props[record.PROPERTY_TIMER_DELIVER_MS] = str(msg.deliver_at_ms)
    return props


COMPRESS_LEVEL = 5  # zlib level of compressed bodies, as RocketMQ's compressLevel


def compressed_body(body: bytes, compress_over: int) -> tuple[bytes, int]:
    """(body, sysflag): bodies longer than compress_over bytes are zlib-compressed and flagged
    SYSFLAG_COMPRESSED, unless that would not make them smaller. compress_over < 0: never."""
    if compress_over < 0 or len(body) <= compress_over:
        return body, 0
    packed = zlib.compress(body, COMPRESS_LEVEL)
    if len(packed) >= len(body):
        return body, 0
    return packed, record.SYSFLAG_COMPRESSED


def encode_message(
    msg: Message,
    props: Mapping[str, str],
    *,
    born_timestamp: int,
    born_host: bytes,
    compress_over: int = -1,
) -> bytes:
    """One record in the layout of ferry.protocol.record, ready for a SendMessageRequest."""
    body, sysflag = compressed_body(msg.body, compress_over)
    try:
        return record.encode_record(
            msg.topic.encode(),
            body,
            record.encode_properties(props),
            sysflag=sysflag,
            born_timestamp=born_timestamp,
            born_host=born_host,
        )
    except record.RecordError as exc:
        raise MessageIllegalError(str(exc)) from None


_UNIQ_PREFIX = f"{record.PROPERTY_UNIQ_KEY}{record.PROP_SEP}"
_TAGS_PREFIX = f"{record.PROPERTY_TAGS}{record.PROP_SEP}"
_KEYS_PREFIX = f"{record.PROPERTY_KEYS}{record.PROP_SEP}"


def encode_plain_message(
    msg: Message, msg_id: str, *, born_timestamp: int, born_host: bytes, compress_over: int = -1
) -> bytes:
    """encode_message for a message without properties of its own, delay or timer (the
    common send): the same bytes, without building the properties dict first."""
    text = f"{_UNIQ_PREFIX}{msg_id}{record.PROP_END}"
    if msg.keys:
        joined = " ".join(msg.keys)
        _check(joined, "keys")
        text = f"{_KEYS_PREFIX}{joined}{record.PROP_END}{text}"
    if msg.tags:
        _check(msg.tags, "tags")
        text = f"{_TAGS_PREFIX}{msg.tags}{record.PROP_END}{text}"
    body, sysflag = compressed_body(msg.body, compress_over)
    try:
        return record.encode_plain(
            record.topic_tail(msg.topic),
            body,
            text.encode(),
            sysflag,
            born_timestamp,
            born_host,
        )
    except record.RecordError as exc:
        raise MessageIllegalError(str(exc)) from None


# UNIQ_KEY's property bytes besides the 32-digit id, and a record's fixed size besides the
# topic (FIXED_SIZE counts the topic's length byte, which topic_tail() holds)
_UNIQ_SIZE = len(_UNIQ_PREFIX) + 1 + 32
_BASE_SIZE = record.FIXED_SIZE - record_layout.TOPIC_LEN_SIZE + _UNIQ_SIZE
MAX_PLAIN_TEXT = 60_000  # tags + keys over this go the general way (which checks 65,535)


def plain_message(msg: Message, tail_len: int) -> PlainMessage | None:
    """A snapshot of `msg` for encode_plain_batch, its tags and keys checked; None when the
    message needs the general path (properties of its own, delay, timer, huge tags/keys).
    In C (ferry.native) where it can; a message C leaves alone (a separator in its tags, a
    body not of bytes) goes through plain_message_py, which says why or takes it."""
    if native.ENABLED:
        found = native.plain_message(msg, _BASE_SIZE + tail_len, MAX_PLAIN_TEXT, PlainMessage)
        if found is not None:
            return cast(PlainMessage, found)
    return plain_message_py(msg, tail_len)


def plain_messages(msgs: list[Message], topic: str, tail_len: int) -> list[PlainMessage] | None:
    """plain_message of each message of a batch of `topic`; None when any needs the general
    path or names another topic (the caller's checks then say which). A separator in tags or
    keys raises, as plain_message does."""
    if native.ENABLED:
        found = native.plain_messages(
            msgs, topic, _BASE_SIZE + tail_len, MAX_PLAIN_TEXT, PlainMessage
        )
        if found is not None:
            return cast(list[PlainMessage], found)
    plain: list[PlainMessage] = []
    for msg in msgs:
        one = plain_message_py(msg, tail_len) if msg.topic == topic else None
        if one is None:
            return None
        plain.append(one)
    return plain


def plain_message_py(msg: Message, tail_len: int) -> PlainMessage | None:
    """plain_message in Python: the reference for the C code."""
    if msg.properties or msg.delay_level > 0 or msg.deliver_at_ms is not None:
        return None
    size = _BASE_SIZE + tail_len + len(msg.body)
    tags = msg.tags or ""
    keys = ""
    if tags:
        _check(tags, "tags")
        size += len(_TAGS_PREFIX) + 1 + len(tags.encode())
    if msg.keys:
        keys = " ".join(msg.keys)
        _check(keys, "keys")
        size += len(_KEYS_PREFIX) + 1 + len(keys.encode())
    if len(tags) + len(keys) > MAX_PLAIN_TEXT:
        return None
    return PlainMessage(msg.body, tags, keys, size)


def encode_plain_batch(
    topic: str,
    msgs: Sequence[PlainMessage],
    ids: Sequence[str],
    *,
    born_timestamp: int,
    born_host: bytes,
    compress_over: int = -1,
) -> bytes:
    """The records of plain messages of one topic, concatenated: the same bytes as
    encode_message of each (with its id as UNIQ_KEY). In C (ferry.native) unless a body is to
    be compressed; encode_plain_batch_py is the reference."""
    if native.ENABLED:
        out = native.encode_plain_batch(
            record.topic_tail(topic),
            list(msgs),
            list(ids),
            born_timestamp,
            born_host,
            compress_over,
        )
        if out is not None:
            return out
    return encode_plain_batch_py(
        topic,
        msgs,
        ids,
        born_timestamp=born_timestamp,
        born_host=born_host,
        compress_over=compress_over,
    )


def encode_plain_batch_py(
    topic: str,
    msgs: Sequence[PlainMessage],
    ids: Sequence[str],
    *,
    born_timestamp: int,
    born_host: bytes,
    compress_over: int = -1,
) -> bytes:
    """encode_plain_batch in one Python loop and one join."""
    tail = record.topic_tail(topic)
    fixed = record.FIXED_SIZE - record_layout.TOPIC_LEN_SIZE + len(tail)
    pack = record.HEAD.pack
    magic = record.MAGIC
    empty = bytes(record_layout.HOST_SIZE)
    props_len = record_layout.PROPS_LEN.pack
    parts: list[bytes] = []
    add = parts.append
    for msg, msg_id in zip(msgs, ids, strict=True):
        text = f"{_UNIQ_PREFIX}{msg_id}{record.PROP_END}"
        if msg.keys:
            text = f"{_KEYS_PREFIX}{msg.keys}{record.PROP_END}{text}"
        if msg.tags:
            text = f"{_TAGS_PREFIX}{msg.tags}{record.PROP_END}{text}"
        props = text.encode()
        body = msg.body
        sysflag = 0
        if 0 <= compress_over < len(body):
            body, sysflag = compressed_body(body, compress_over)
        n_body = len(body)
        n_props = len(props)
        add(
            pack(
                fixed + n_body + n_props,
                magic,
                0,
                0,
                0,
                0,
                0,
                sysflag,
                born_timestamp,
                born_host,
                0,
                empty,
                0,
                0,
                n_body,
            )
        )
        add(body)
        add(tail)
        add(props_len(n_props))
        add(props)
    return b"".join(parts)
