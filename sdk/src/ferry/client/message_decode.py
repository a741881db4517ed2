"""How a pulled frame becomes the messages a consumer gets: consecutive records in the layout
of ferry.protocol.record, walked by record.walk(), each made a MessageExt. The hot path of
consumption: the C decoder (ferry.native) takes the plain records, the Python code here the
rest, and is the reference the C code is tested against."""

from __future__ import annotations

import functools
import zlib
from collections.abc import Mapping
from typing import Any

from ferry import native
from ferry.client.message import MessageExt, MessageQueue
from ferry.protocol import record, record_layout


def _int_property(props: Mapping[str, str], key: str) -> int | None:
    raw = props.get(key)
    if raw is None:
        return None
    try:
        return int(raw)
    except ValueError:
        return None


def decompressed(body: bytes, phys_offset: int) -> bytes:
    """A compressed record's body inflated; RecordError (naming its CommitLog offset) when
    it does not inflate. Callers test the sysflag first, so a plain record pays no call."""
    try:
        return zlib.decompress(body)
    except zlib.error as exc:
        raise record.RecordError(
            f"compressed body at CommitLog offset {phys_offset} is corrupt: {exc}"
        ) from None


@functools.lru_cache(maxsize=256)
def host_hex(store_host: str) -> str:
    """The first 16 hex digits of an offset message id (record.offset_msg_id), cached."""
    return record.pack_host(store_host).hex().upper()


def decode_records(
    buf: Any, broker_name: str, tags: frozenset[str] | None, out: list[MessageExt]
) -> None:
    """Appends the messages of consecutive records in `buf` (a pulled frame) whose TAGS are
    in `tags` (None: all), as decode_message(iter_records(...)) would make them; records of
    other tags are skipped before their body is copied. Raises record.RecordError at the
    first bad record, the ones before it appended.

    The hot path of consumption. The C decoder (ferry.native) takes the plain records and
    stops at any other (blank, compressed, delayed, malformed); decode_records_py takes that
    one and hands back."""
    if type(buf) is not bytes:
        buf = bytes(buf)  # one copy: slices of bytes are cheaper than of a memoryview
    if not native.ENABLED:
        decode_records_py(buf, broker_name, tags, out)
        return
    stop = len(buf)
    pos = 0
    while pos < stop:
        pos = native.decode_records(
            buf, pos, broker_name, tags, out, MessageExt, MessageQueue,
            record.topic_of, record.unpack_host, _host_info,
        )  # fmt: skip
        if pos < stop:
            pos = decode_records_py(buf, broker_name, tags, out, pos, one=True)


def _host_info(raw: bytes) -> tuple[str, str]:
    text = record.unpack_host(raw)
    return text, host_hex(text)


def decode_records_py(
    buf: bytes,
    broker_name: str,
    tags: frozenset[str] | None,
    out: list[MessageExt],
    pos: int = 0,
    *,
    one: bool = False,
) -> int:
    """decode_records in Python from `pos` (the reference for the C decoder); with `one`,
    returns after the first record that is not a blank. Returns where it stopped.

    record.walk() unpacks each record's head once; no intermediate Record, and queues, hosts
    and offset-id prefixes looked up once per frame."""
    queues: dict[tuple[str, int], MessageQueue] = {}
    hosts: dict[bytes, tuple[str, str]] = {}  # raw store host -> (text, offset id prefix)
    new = MessageExt.__new__
    len_byte, tail, off_body = (
        record_layout.TOPIC_LEN_SIZE,
        record_layout.TAIL_SIZE,
        record.OFF_BODY,
    )
    for start, head, at in record.walk(buf, pos):
        (
            size,
            _,
            _,
            queue_id,
            flag,
            queue_offset,
            phys_offset,
            sysflag,
            born_ts,
            born_host,
            store_ts,
            store_host,
            reconsume,
            _,
            _,
        ) = head
        pos = start + size
        topic_len = buf[at]
        props = record.decode_properties(buf[at + tail + topic_len : pos])
        tag = props.get(record.PROPERTY_TAGS) or None
        if tags is not None and tag not in tags:
            if one:
                return pos
            continue
        topic = record.topic_of(buf[at + len_byte : at + len_byte + topic_len])
        body = buf[start + off_body : at]
        if sysflag & record.SYSFLAG_COMPRESSED:
            body = decompressed(body, phys_offset)
        host = hosts.get(store_host)
        if host is None:
            text = record.unpack_host(store_host)
            host = hosts[store_host] = (text, host_hex(text))
        queue = queues.get((topic, queue_id))
        if queue is None:
            queue = queues[(topic, queue_id)] = MessageQueue(topic, broker_name, queue_id)
        offset_id = f"{host[1]}{phys_offset:016X}"
        keys = props.get(record.PROPERTY_KEYS)
        msg = new(MessageExt)
        msg.topic = topic
        msg.body = body
        msg.tags = tag
        msg.keys = keys.split() if keys else []
        msg.properties = props
        msg.delay_level = (
            _int_property(props, record.PROPERTY_DELAY) or 0
            if record.PROPERTY_DELAY in props
            else 0
        )
        msg.deliver_at_ms = (
            _int_property(props, record.PROPERTY_TIMER_DELIVER_MS)
            if record.PROPERTY_TIMER_DELIVER_MS in props
            else None
        )
        msg.msg_id = props.get(record.PROPERTY_UNIQ_KEY) or offset_id
        msg.offset_msg_id = offset_id
        msg.queue = queue
        msg.queue_offset = queue_offset
        msg.commitlog_offset = phys_offset
        msg.born_timestamp = born_ts
        msg.store_timestamp = store_ts
        msg.born_host = record.unpack_host(born_host)
        msg.store_host = host[0]
        msg.reconsume_times = reconsume
        msg.broker_name = broker_name
        msg.flag = flag
        msg.sysflag = sysflag
        out.append(msg)
        if one:
            return pos
    return len(buf)  # every record decoded, blank tails stepped over


def decode_message(rec: record.Record, broker_name: str) -> MessageExt:
    """A stored record (from a pull) as the MessageExt a consumer sees.

    The hot path of consumption: attributes are set directly, without __init__'s checks.
    A compressed body is decompressed; `sysflag` still says it travelled compressed.
    """
    props = rec.properties
    body = rec.body
    if rec.sysflag & record.SYSFLAG_COMPRESSED:
        body = decompressed(body, rec.phys_offset)
    keys = props.get(record.PROPERTY_KEYS)
    offset_id = f"{host_hex(rec.store_host)}{rec.phys_offset:016X}"
    msg = MessageExt.__new__(MessageExt)
    msg.topic = rec.topic
    msg.body = body
    msg.tags = props.get(record.PROPERTY_TAGS) or None
    msg.keys = keys.split() if keys else []
    msg.properties = props
    msg.delay_level = _int_property(props, record.PROPERTY_DELAY) or 0
    msg.deliver_at_ms = _int_property(props, record.PROPERTY_TIMER_DELIVER_MS)
    msg.msg_id = props.get(record.PROPERTY_UNIQ_KEY) or offset_id
    msg.offset_msg_id = offset_id
    msg.queue = MessageQueue(rec.topic, broker_name, rec.queue_id)
    msg.queue_offset = rec.queue_offset
    msg.commitlog_offset = rec.phys_offset
    msg.born_timestamp = rec.born_timestamp
    msg.store_timestamp = rec.store_timestamp
    msg.born_host = rec.born_host
    msg.store_host = rec.store_host
    msg.reconsume_times = rec.reconsume_times
    msg.broker_name = broker_name
    msg.flag = rec.flag
    msg.sysflag = rec.sysflag
    return msg
