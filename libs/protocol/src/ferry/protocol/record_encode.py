"""Encoding records as producers send them: encode_record, the SDK's per-message
encode_plain with its cached topic_tail, and retopic, a record copied to another topic (all
reached as ferry.protocol.record.X)."""

from __future__ import annotations

from collections.abc import Mapping

from ferry.protocol.record_hosts import pack_host
from ferry.protocol.record_layout import (
    FIXED_SIZE,
    HEAD,
    HOST_SIZE,
    MAGIC,
    MAX_PROPS_BYTES,
    MAX_TOPIC_BYTES,
    PROPS_LEN,
)
from ferry.protocol.record_properties import encode_properties
from ferry.protocol.record_types import Record, RecordError

_CACHE_MAX = 4096  # topic tails kept (bounded, since a producer may send to any topic)


def encode_record(
    topic_raw: bytes,
    body: bytes,
    props_raw: bytes,
    *,
    flag: int = 0,
    sysflag: int = 0,
    born_timestamp: int = 0,
    born_host: bytes = bytes(HOST_SIZE),
    reconsume_times: int = 0,
    prepared_tx_offset: int = 0,
    queue_id: int = 0,
) -> bytes:
    """One record as a producer sends it; the store fills in offsets, store stamp and CRC."""
    if len(topic_raw) > MAX_TOPIC_BYTES:
        raise RecordError("topic longer than 255 bytes")
    if len(props_raw) > MAX_PROPS_BYTES:
        raise RecordError("properties longer than 65535 bytes")
    total = FIXED_SIZE + len(body) + len(topic_raw) + len(props_raw)
    head = HEAD.pack(
        total,
        MAGIC,
        0,
        queue_id,
        flag,
        0,
        0,
        sysflag,
        born_timestamp,
        born_host,
        0,
        bytes(HOST_SIZE),
        reconsume_times,
        prepared_tx_offset,
        len(body),
    )
    return b"".join(
        (
            head,
            body,
            bytes((len(topic_raw),)),
            topic_raw,
            PROPS_LEN.pack(len(props_raw)),
            props_raw,
        )
    )


# TOPICLEN + TOPIC of a record, by topic: a producer sends to the same few topics.
_TOPIC_TAILS: dict[str, bytes] = {}


def topic_tail(topic: str) -> bytes:
    """The TOPICLEN byte and the UTF-8 topic, as they follow a record's body (cached)."""
    tail = _TOPIC_TAILS.get(topic)
    if tail is None:
        raw = topic.encode()
        if len(raw) > MAX_TOPIC_BYTES:
            raise RecordError("topic longer than 255 bytes")
        tail = bytes((len(raw),)) + raw
        if len(_TOPIC_TAILS) >= _CACHE_MAX:
            _TOPIC_TAILS.clear()
        _TOPIC_TAILS[topic] = tail
    return tail


_EMPTY_HOST = bytes(HOST_SIZE)


def encode_plain(
    tail: bytes, body: bytes, props_raw: bytes, sysflag: int, born_timestamp: int, born_host: bytes
) -> bytes:
    """encode_record for a producer's usual message (flag, reconsume times, transaction offset
    and queue 0), with the topic as topic_tail() gives it: the SDK's per-message hot path."""
    n_props = len(props_raw)
    if n_props > MAX_PROPS_BYTES:
        raise RecordError("properties longer than 65535 bytes")
    n_body = len(body)
    head = HEAD.pack(
        FIXED_SIZE - 1 + n_body + len(tail) + n_props,
        MAGIC,
        0,
        0,
        0,
        0,
        0,
        sysflag,
        born_timestamp,
        born_host,
        0,
        _EMPTY_HOST,
        0,
        0,
        n_body,
    )
    return b"".join((head, body, tail, PROPS_LEN.pack(n_props), props_raw))


def retopic(
    rec: Record,
    topic: str,
    *,
    set_props: Mapping[str, str] | None = None,
    drop_props: tuple[str, ...] = (),
    queue_id: int = 0,
    sysflag: int | None = None,
    prepared_tx_offset: int | None = None,
) -> bytes:
    """A copy of a record for another topic (a delayed message stored aside in
    SCHEDULE_TOPIC_XXXX, a half message, a due message going back to its real topic): body,
    flags, born stamp and host, reconsume times kept; properties updated; the store fills in
    the rest again. sysflag and prepared_tx_offset replace the record's when given (a
    transaction's half message, its committed copy)."""
    props = dict(rec.properties)
    for key in drop_props:
        props.pop(key, None)
    if set_props:
        props.update(set_props)
    return encode_record(
        topic.encode(),
        rec.body,
        encode_properties(props),
        flag=rec.flag,
        sysflag=rec.sysflag if sysflag is None else sysflag,
        born_timestamp=rec.born_timestamp,
        born_host=pack_host(rec.born_host),
        reconsume_times=rec.reconsume_times,
        prepared_tx_offset=rec.prepared_tx_offset
        if prepared_tx_offset is None
        else prepared_tx_offset,
        queue_id=queue_id,
    )
