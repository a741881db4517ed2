"""The CommitLog record codec: how one message lies in the log and on the wire.

Producers encode records in this layout, the store appends them as they are (filling in queue
offset, physical offset, store time and host, then the CRC), pulls return them untouched and
consumers decode them here. Big-endian, RocketMQ's v1 field order (see docs/protocol.md);
where each field lies is ferry.protocol.record_layout's, and walk() is the one loop over
consecutive records that the decoders here and the SDK's build on.

Departure from RocketMQ: the CRC covers every byte after the CRC field, not the body alone, so
that recovery also catches torn headers, topics and properties.
"""

from __future__ import annotations

import functools
import socket
import struct
import zlib
from collections.abc import Iterator, Mapping
from typing import Any, NamedTuple

from ferry.protocol import record_layout
from ferry.protocol.record_layout import (
    HOST_SIZE,
    MAX_PROPS_BYTES,
    MAX_TOPIC_BYTES,
    OFF_CRC,
    OFF_QUEUE_OFFSET,
    OFF_STORE_TIMESTAMP,
    PROPS_LEN,
    TAIL_SIZE,
    TOPIC_LEN_SIZE,
    fields_at,
)

# the layout's constants that users of the codec reach as record.X
BLANK_MAGIC = record_layout.BLANK_MAGIC
BLANK_MIN = record_layout.BLANK_MIN
CRC_START = record_layout.CRC_START
FIXED_SIZE = record_layout.FIXED_SIZE
HEAD = record_layout.HEAD
MAGIC = record_layout.MAGIC
OFF_BODY = record_layout.OFF_BODY
OFF_BODYLEN = record_layout.OFF_BODYLEN
OFF_QUEUE_ID = record_layout.OFF_QUEUE_ID
OFF_SYSFLAG = record_layout.OFF_SYSFLAG
PREFIX = record_layout.PREFIX
PROP_END = record_layout.PROP_END
PROP_SEP = record_layout.PROP_SEP
SYSFLAG_COMPRESSED = record_layout.SYSFLAG_COMPRESSED
SYSFLAG_TX_COMMIT = record_layout.SYSFLAG_TX_COMMIT
SYSFLAG_TX_PREPARED = record_layout.SYSFLAG_TX_PREPARED

# Fields the store fills in: QUEUEID, QUEUEOFFSET/PHYSICALOFFSET, STORETIMESTAMP/STOREHOST.
QUEUE_ID = fields_at("QUEUEID")
OFFSETS = fields_at("QUEUEOFFSET", "PHYSICALOFFSET")
STORE_STAMP = fields_at("STORETIMESTAMP", "STOREHOST")
CRC = fields_at("CRC")
BODY_LEN = fields_at("BODYLEN")
OFF_OFFSETS = OFF_QUEUE_OFFSET
OFF_STORE_STAMP = OFF_STORE_TIMESTAMP

# reserved property keys
PROPERTY_TAGS = "TAGS"
PROPERTY_KEYS = "KEYS"
PROPERTY_UNIQ_KEY = "UNIQ_KEY"
PROPERTY_DELAY = "DELAY"
PROPERTY_TIMER_DELIVER_MS = "TIMER_DELIVER_MS"
PROPERTY_REAL_TOPIC = "REAL_TOPIC"
PROPERTY_REAL_QID = "REAL_QID"
PROPERTY_RETRY_TOPIC = "RETRY_TOPIC"
PROPERTY_RECONSUME_TIME = "RECONSUME_TIME"
PROPERTY_MAX_RECONSUME_TIMES = "MAX_RECONSUME_TIMES"
PROPERTY_TRAN_MSG = "TRAN_MSG"
PROPERTY_PGROUP = "PGROUP"
# set by the scheduler on what it delivers: the CommitLog offset of the record it came from
PROPERTY_SCHEDULED_FROM = "SCHEDULED_FROM"
# properties the SDK and the brokers set themselves: a copy of a message (a resend, a row
# forwarded by Spark) drops them, or it would be taken for a delayed, retried or transactional one
SYSTEM_PROPERTIES = frozenset(
    {
        PROPERTY_TAGS,
        PROPERTY_KEYS,
        PROPERTY_UNIQ_KEY,
        PROPERTY_DELAY,
        PROPERTY_TIMER_DELIVER_MS,
        PROPERTY_REAL_TOPIC,
        PROPERTY_REAL_QID,
        PROPERTY_RETRY_TOPIC,
        PROPERTY_RECONSUME_TIME,
        PROPERTY_MAX_RECONSUME_TIMES,
        PROPERTY_TRAN_MSG,
        PROPERTY_PGROUP,
    }
)
TAGS_KEY = f"{PROPERTY_TAGS}{PROP_SEP}".encode()  # how a TAGS item starts in the properties
PROP_END_BYTES = PROP_END.encode()


class RecordError(ValueError):
    """Bytes that are not a well-formed record."""


class Record(NamedTuple):
    """One decoded record, as stored."""

    total_size: int
    queue_id: int
    flag: int
    queue_offset: int
    phys_offset: int
    sysflag: int
    born_timestamp: int
    born_host: str
    store_timestamp: int
    store_host: str
    reconsume_times: int
    prepared_tx_offset: int
    body: bytes
    topic: str
    properties: dict[str, str]


def encode_properties(props: Mapping[str, str]) -> bytes:
    if not props:
        return b""
    return "".join([f"{k}{PROP_SEP}{v}{PROP_END}" for k, v in props.items()]).encode()


def decode_properties(raw: bytes | memoryview) -> dict[str, str]:
    if not raw:
        return {}
    text = raw.decode() if type(raw) is bytes else str(raw, "utf-8")
    out: dict[str, str] = {}
    for item in text.split(PROP_END):
        if item:
            key, _, value = item.partition(PROP_SEP)
            out[key] = value
    return out


def check_property(key: str, value: str) -> None:
    for ch in (PROP_SEP, PROP_END):
        if ch in key or ch in value:
            raise RecordError(f"property {key!r} contains a reserved separator character")


def pack_host(host: str) -> bytes:
    """'ip:port' -> 4 bytes of IPv4 + 4 bytes of port (RocketMQ's host layout)."""
    ip, _, port = host.rpartition(":")
    try:
        return socket.inet_aton(ip or "0.0.0.0") + int(port or 0).to_bytes(4, "big")
    except (OSError, ValueError):
        return bytes(HOST_SIZE)


# Decoded hosts and topics: a consumer sees the same few over and over, and formatting them
# per record was a fifth of its decode time. Bounded, since records may come from anywhere.
_HOSTS: dict[bytes, str] = {}
_TOPICS: dict[bytes, str] = {}
_CACHE_MAX = 4096


def unpack_host(raw: bytes) -> str:
    host = _HOSTS.get(raw)
    if host is None:
        host = f"{socket.inet_ntoa(raw[:4])}:{int.from_bytes(raw[4:8], 'big')}"
        if len(_HOSTS) >= _CACHE_MAX:
            _HOSTS.clear()
        _HOSTS[bytes(raw)] = host
    return host


def topic_of(raw: bytes) -> str:
    """A record's topic bytes as text (cached)."""
    return _topic_of(raw)


def _topic_of(raw: bytes) -> str:
    topic = _TOPICS.get(raw)
    if topic is None:
        topic = raw.decode()
        if len(_TOPICS) >= _CACHE_MAX:
            _TOPICS.clear()
        _TOPICS[raw] = topic
    return topic


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


def record_crc(buf: Any, pos: int, size: int) -> int:
    return zlib.crc32(memoryview(buf)[pos + CRC_START : pos + size])


def check_layout(buf: Any, pos: int, end: int) -> int:
    """Validates the framing of the record at pos (sizes agree, magic right); returns its size."""
    if end - pos < FIXED_SIZE:
        raise RecordError(f"truncated record at {pos}: {end - pos} bytes left")
    size, magic = PREFIX.unpack_from(buf, pos)
    if magic != MAGIC:
        raise RecordError(f"bad magic {magic:#x} at {pos}")
    if size < FIXED_SIZE or pos + size > end:
        raise RecordError(f"bad record size {size} at {pos}")
    (body_len,) = BODY_LEN.unpack_from(buf, pos + OFF_BODYLEN)
    if body_len < 0 or OFF_BODY + body_len + TAIL_SIZE > size:
        raise RecordError(f"bad body length {body_len} at {pos}")
    topic_len = buf[pos + OFF_BODY + body_len]
    props_at = pos + OFF_BODY + body_len + 1 + topic_len
    if props_at + PROPS_LEN.size > pos + size:
        raise RecordError(f"bad topic length at {pos}")
    (props_len,) = PROPS_LEN.unpack_from(buf, props_at)
    if props_at + PROPS_LEN.size + props_len != pos + size:
        raise RecordError(f"record sizes disagree at {pos}")
    return int(size)


def topic_bytes(buf: Any, pos: int) -> bytes:
    (body_len,) = BODY_LEN.unpack_from(buf, pos + OFF_BODYLEN)
    at = pos + OFF_BODY + body_len + TOPIC_LEN_SIZE
    return bytes(buf[at : at + buf[at - 1]])


def properties_bytes(buf: Any, pos: int, size: int) -> bytes:
    (body_len,) = BODY_LEN.unpack_from(buf, pos + OFF_BODYLEN)
    at = pos + OFF_BODY + body_len
    return bytes(buf[at + TAIL_SIZE + buf[at] : pos + size])


def tags_code_of(props_raw: bytes) -> int:
    """The ConsumeQueue tag code of a record: the Java hash of its TAGS property, 0 if none."""
    i = props_raw.find(TAGS_KEY)
    while i > 0 and props_raw[i - 1] != PROP_END_BYTES[0]:  # starts a key, not inside a value
        i = props_raw.find(TAGS_KEY, i + 1)
    if i < 0:
        return 0
    start = i + len(TAGS_KEY)
    end = props_raw.find(PROP_END_BYTES, start)
    return tags_code(props_raw[start : end if end >= 0 else len(props_raw)])


@functools.lru_cache(maxsize=4096)
def tags_code(tag: bytes) -> int:
    return java_string_hash(tag.decode(errors="replace"))


def java_string_hash(text: str) -> int:
    """Java's String.hashCode (UTF-16 units, int32), as RocketMQ stores tag codes."""
    units = text.encode("utf-16-be")
    h = 0
    for (unit,) in struct.iter_unpack(">H", units):
        h = (31 * h + unit) & 0xFFFFFFFF
    return h - (1 << 32) if h & 0x80000000 else h


def walk(buf: Any, pos: int = 0, stop: int | None = None) -> Iterator[tuple[int, Any, int]]:
    """The records of buf[pos:stop] in turn, blank records (segment tails) stepped over: per
    record (pos, head, at), head the HEAD fields in one unpack (TOTALSIZE first, BODYLEN
    last), at the position of its TOPICLEN byte. Raises RecordError at a record whose magic
    or size is wrong; what lies past the head is the caller's to check."""
    stop = len(buf) if stop is None else stop
    unpack = HEAD.unpack_from
    while pos < stop:
        if stop - pos < OFF_BODY:  # only a blank segment tail is this short
            size, magic = PREFIX.unpack_from(buf, pos)
            if magic == BLANK_MAGIC and size > 0:
                pos += size
                continue
            raise RecordError(f"bad record at {pos}")
        head = unpack(buf, pos)
        size = head[0]
        if head[1] != MAGIC:
            if head[1] == BLANK_MAGIC and size > 0:
                pos += size
                continue
            raise RecordError(f"bad record at {pos}")
        if size < FIXED_SIZE or pos + size > stop:
            raise RecordError(f"bad record at {pos}")
        yield pos, head, pos + OFF_BODY + head[-1]
        pos += size


def iter_records(buf: Any, start: int = 0, end: int | None = None) -> Iterator[Record]:
    """Decodes consecutive records; steps over blank (segment tail) records."""
    mv = memoryview(buf)
    for pos, head, at in walk(buf, start, end):
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
            prepared,
            _,
        ) = head
        topic_len = buf[at]
        yield Record(
            size,
            queue_id,
            flag,
            queue_offset,
            phys_offset,
            sysflag,
            born_ts,
            unpack_host(born_host),
            store_ts,
            unpack_host(store_host),
            reconsume,
            prepared,
            bytes(mv[pos + OFF_BODY : at]),
            _topic_of(bytes(mv[at + TOPIC_LEN_SIZE : at + TOPIC_LEN_SIZE + topic_len])),
            decode_properties(mv[at + TAIL_SIZE + topic_len : pos + size]),
        )


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


def verify_crc(buf: Any, pos: int, size: int) -> bool:
    (stored,) = CRC.unpack_from(buf, pos + OFF_CRC)
    return bool(stored == record_crc(buf, pos, size))


# ---- message ids ---------------------------------------------------------------------------


def offset_msg_id(store_host: str, phys_offset: int) -> str:
    """RocketMQ's offset message id: store IPv4 + port + CommitLog offset, 32 hex digits."""
    return (pack_host(store_host) + phys_offset.to_bytes(8, "big")).hex().upper()


def decode_offset_msg_id(msg_id: str) -> tuple[str, int]:
    try:
        raw = bytes.fromhex(msg_id)
    except ValueError:
        raise RecordError(f"not an offset message id: {msg_id!r}") from None
    if len(raw) != 16:
        raise RecordError(f"not an offset message id: {msg_id!r}")
    return unpack_host(raw[:8]), int.from_bytes(raw[8:], "big")
